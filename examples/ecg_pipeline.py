"""Heartbeat outliers in an ECG, in one file: cuDF -> CuPy -> Numba -> PyTorch on Dask.

    python examples/ecg_pipeline.py                  # MIT-BIH record 208, five minutes at 360 Hz
    python examples/ecg_pipeline.py --csv FILE --rate 250 --device gpu

Each step hands its data on without a copy. dask's ``read_csv`` gives cuDF partitions on GPUs
(pandas on CPUs, by dask's ``dataframe.backend``); the column becomes CuPy (NumPy) chunks over
the same memory, each convolved with a Ricker wavelet as wide as a QRS complex, with a margin
from its neighbours; the client keeps the beats (one threshold for the whole recording). On one
worker a Numba kernel (CUDA or CPU) reads the recording in place to cut each beat to 128
points, and PyTorch takes them by DLPack, trains an autoencoder and scores each beat by how
badly it is rebuilt, all in one memory pool per GPU. ``python -m examples.ecg``: the full app.
"""

import argparse
import os

import dask
import dask.dataframe as dd
import numpy as np
from distributed import Client, LocalCluster

from dask_gpu_interop import GPUMemoryPlugin, memory_report, resolve_device

RECORD = os.path.join(os.path.dirname(__file__), "ecg", "data", "record208-5min-360hz.csv")
QRS_SECONDS = 0.10  # the wavelet's width: sigma = QRS / 6
THRESHOLD = 0.3  # a beat's response reaches this share of the 75th percentile of all peaks'
SPACING_SECONDS = 0.2  # two beats are never closer
BEFORE, AFTER = 0.25, 0.45  # seconds of a beat before and after its R peak
SIZE, EPOCHS = 128, 30  # points per beat (at any sampling rate); passes of training


def module_of(array):  # CuPy or NumPy, whichever holds the array
    return __import__(type(array).__module__.split(".")[0])


def qrs_response(chunk, sigma: float, half_width: int):
    """|the chunk convolved with a Ricker wavelet of width ``sigma``|: a QRS of either polarity
    gives a large response, the slow P and T waves and the baseline little."""
    xp = module_of(chunk)
    t = xp.arange(-half_width, half_width + 1, dtype=xp.float32) / sigma
    wavelet = (1 - t**2) * xp.exp(-(t**2) / 2)
    full = xp.convolve(chunk, wavelet - wavelet.mean())  # "same", for chunks of any length
    return xp.abs(full[half_width:half_width + len(chunk)]).astype(xp.float32)


def local_maxima(chunk):
    xp = module_of(chunk)
    peak = xp.zeros(chunk.shape, dtype=bool)
    peak[1:-1] = (chunk[1:-1] > chunk[:-2]) & (chunk[1:-1] >= chunk[2:]) & (chunk[1:-1] > 0)
    return peak


@dask.delayed
def peaks_in(response, peak, start: int):  # a chunk's peaks: (positions, heights), on the host
    where = module_of(peak).flatnonzero(peak)
    return [a.get() if hasattr(a, "get") else a for a in (where + start, response[where])]


def read_signal(path, column: str, blocksize):
    """The recording as a Dask array of CuPy (NumPy) chunks, a chunk per block of the file."""
    frame = dd.read_csv(path, usecols=[column], dtype={column: "float32"}, blocksize=blocksize)
    return frame[column].to_dask_array(lengths=True)


def find_beats(signal, rate: float) -> np.ndarray:
    """The R peaks (sample positions) whose beats lie whole in ``signal``, found chunk by
    chunk with one threshold for the whole recording."""
    sigma = QRS_SECONDS / 6 * rate
    half_width = int(np.ceil(5 * sigma))
    response = signal.map_overlap(qrs_response, depth=half_width, boundary="none",
                                  sigma=sigma, half_width=half_width)
    peaks = response.map_overlap(local_maxima, depth=1, boundary="none", dtype=bool)
    found = dask.compute(*map(peaks_in, response.to_delayed().ravel(), peaks.to_delayed().ravel(),
                              np.cumsum((0, *response.chunks[0][:-1]))))  # to the client
    positions, heights = (np.concatenate(column) for column in zip(*found, strict=True))
    beats = [(-SPACING_SECONDS * rate, 0.0)]  # (position, height): one per spacing, the highest
    for beat in zip(positions, heights, strict=True):
        if beat[0] - beats[-1][0] < SPACING_SECONDS * rate:
            beats[-1] = max(beats[-1], beat, key=lambda b: b[1])
        else:
            beats.append(beat)
    beats, heights = np.array(beats[1:], dtype=np.float64).reshape(-1, 2).T
    if len(beats):
        beats = beats[heights >= THRESHOLD * np.quantile(heights, 0.75)]
    beats = beats.astype(np.int64)
    return beats[(beats > BEFORE * rate) & (beats < len(signal) - AFTER * rate - 2)]  # whole


def interpolate(x, t):
    """``x`` at the fractional position ``t`` (linear), compiled for the CPU and the GPU."""
    i = int(t)
    return x[i] * (i + 1 - t) + x[i + 1] * (t - i)


def cut_beats(x, starts, step: float, out) -> bool:
    """Beat ``b`` as ``out[b]``: ``x`` at ``starts[b] + j * step``; Numba reads ``x`` where it
    lies. Whether the kernel saw ``x``'s own memory (no copy)."""
    if hasattr(x, "__cuda_array_interface__"):
        from numba import cuda
        at = cuda.jit(device=True)(interpolate)
        @cuda.jit
        def kernel(x, starts, step, out):
            b, j = cuda.grid(2)
            if b < out.shape[0] and j < out.shape[1]:
                out[b, j] = at(x, starts[b] + j * step)

        view = cuda.as_cuda_array(x)  # a Numba device array over the CuPy array's memory
        kernel[((len(out) + 7) // 8, SIZE // 32), (8, 32)](view, starts, step, out)
        return view.device_ctypes_pointer.value == x.data.ptr
    import numba
    at = numba.njit(interpolate)
    @numba.njit
    def loops(x, starts, step, out):
        for b in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[b, j] = at(x, starts[b] + j * step)
    loops(x, starts, step, out)
    return True  # Numba's CPU functions take NumPy arrays as they are


def train_and_score(x, positions, rate: float):
    """On one worker: the beats cut by Numba, then an autoencoder in PyTorch; each beat's
    score (mean squared error of its rebuild), and whether each hand-off kept the memory."""
    import torch

    xp = module_of(x)
    starts = xp.asarray(positions - BEFORE * rate, dtype=xp.float64)
    beats = xp.empty((len(positions), SIZE), dtype=xp.float32)
    numba_in_place = cut_beats(x, starts, (BEFORE + AFTER) * rate / (SIZE - 1), beats)
    beats = (beats - beats.mean(axis=1, keepdims=True)) / beats.std()
    tensor = torch.from_dlpack(beats)  # the same memory, on the same device
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(SIZE, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4), torch.nn.ReLU(),
        torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, SIZE)).to(tensor.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(EPOCHS):
        for batch in tensor[torch.randperm(len(tensor), device=tensor.device)].split(64):
            loss = ((model(batch) - batch) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        scores = ((model(tensor) - tensor) ** 2).mean(dim=1)
    return scores.cpu().numpy(), {"Numba": numba_in_place,
                                  "PyTorch": tensor.data_ptr() == (
                                      beats.data.ptr if xp is not np else beats.ctypes.data)}


def start_cluster(device, workers):
    """dask-cuda's cluster (a worker per GPU), or one of processes with no GPU in sight."""
    if device == "gpu":
        from dask_cuda import LocalCUDACluster
        return LocalCUDACluster(n_workers=workers)
    return LocalCluster(n_workers=workers or 2, env={"CUDA_VISIBLE_DEVICES": ""})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--csv", default=RECORD, help="a CSV with a header (default: a record)")
    parser.add_argument("--column", default="ecg_mv")
    parser.add_argument("--rate", type=float, default=360.0, help="samples per second")
    parser.add_argument("--device", choices=["gpu", "cpu", "auto"], default="auto")
    parser.add_argument("--workers", type=int, help="default: a GPU each, or 2 processes")
    parser.add_argument("--blocksize", default="default", help="bytes of the file per chunk")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.csv):
        parser.error(f"--csv {args.csv}: no such file")
    if args.rate < 50:
        parser.error(f"--rate {args.rate:g}: too low to resolve a QRS complex (100-1000 Hz)")
    try:
        device = resolve_device(args.device)
    except RuntimeError as err:  # no GPU, or no GPU stack
        parser.error(str(err))
    backend = {"dataframe.backend": "cudf" if device == "gpu" else "pandas"}
    with (dask.config.set(backend), start_cluster(device, args.workers) as cluster,
          Client(cluster) as client):
        # one memory pool per GPU that cuDF, CuPy, Numba and PyTorch share (CPUs: nothing)
        client.register_plugin(GPUMemoryPlugin(async_alloc=True))
        signal = read_signal(args.csv, args.column, args.blocksize).persist()
        positions = find_beats(signal, args.rate)
        minutes = len(signal) / args.rate / 60
        print(f"{len(positions):,} beats in {minutes:.1f} min ({len(positions) / minutes:.0f} "
              f"bpm) on {device}")
        if len(positions) < 10:
            raise SystemExit(f"{args.csv}: too few beats; is --column the ECG, --rate its rate?")
        (whole,) = signal.rechunk(len(signal)).to_delayed()  # the recording on one worker
        scores, in_place = dask.delayed(train_and_score)(whole, positions, args.rate).compute()
        print("handed on without a copy: " + ", ".join(f"to {k} {'yes' if v else 'NO'}"
                                                       for k, v in in_place.items()))
        flagged = scores > np.median(scores) + 6 * np.median(abs(scores - np.median(scores)))
        print(f"outliers: {flagged.sum()} of {len(scores)} beats, the worst at "
              + ", ".join(f"{p / args.rate:.1f} s" for p in positions[np.argsort(-scores)[:5]]))
        print(memory_report(client))
    return positions, scores, in_place


if __name__ == "__main__":
    main()

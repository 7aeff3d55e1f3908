"""Heartbeat outliers in an ECG, in one file: cuDF -> CuPy -> Numba -> PyTorch on Dask.

Each step hands its data on without a copy. By default MIT-BIH record 208; ``python -m
examples.ecg`` is the full application.
"""

import argparse
import math
import os

import dask
import dask.dataframe as dd
import numpy as np
from dask.utils import format_bytes, parse_bytes

import dask_gpu_interop

RECORD = os.path.join(os.path.dirname(__file__), "ecg/data/record208-5min-360hz.csv")
QRS_SECONDS = 0.10  # the wavelet's width: sigma = QRS / 6
THRESHOLD = 0.3  # a beat's response reaches this share of the peaks' 75th percentile
SPACING_SECONDS = 0.2  # two beats are never closer
BEFORE, AFTER = 0.25, 0.45  # seconds of a beat before and after its R peak
SIZE, EPOCHS = 128, 30  # points per beat (at any sampling rate); passes of training


def module_of(data):  # its library: CuPy or NumPy (arrays), cuDF or pandas (columns)
    return __import__(type(data).__module__.split(".")[0])


def qrs_response(chunk, sigma, half_width):
    """|``chunk`` convolved with a Ricker wavelet|: large at a QRS, small elsewhere."""
    xp = module_of(chunk)
    t = xp.arange(-half_width, half_width + 1, dtype=xp.float32) / sigma
    wavelet = (1 - t**2) * xp.exp(-(t**2) / 2)
    full = xp.convolve(chunk, wavelet - wavelet.mean())  # "same", for any length
    return xp.abs(full[half_width:half_width + len(chunk)]).astype(xp.float32)


def local_maxima(x):
    """Where ``x`` is above 0 and its left neighbour, and not below its right one."""
    peak = module_of(x).zeros(x.shape, dtype=bool)
    peak[1:-1] = (x[1:-1] > x[:-2]) & (x[1:-1] >= x[2:]) & (x[1:-1] > 0)
    return peak


@dask.delayed
def peaks_in(response, peak, start):
    """A chunk's peaks as (positions, heights), NumPy arrays for the client."""
    where = module_of(peak).flatnonzero(peak)
    found = (where + start, response[where])
    return [a.get() if hasattr(a, "get") else a for a in found]  # CuPy's: to the host


def numbers(text):  # a pandas or cuDF column of text as float32; not a number: NA
    return module_of(text).to_numeric(text, errors="coerce").astype("float32")


def read_values(path, column, blocksize):
    """The recording's values by dask's read_csv: a cuDF (pandas) partition a block."""
    frame = dd.read_csv(path, usecols=[column], dtype={column: "str"},
                        blocksize=blocksize, skipinitialspace=True)
    # each block's text as numbers, where it was read
    return frame[column].map_partitions(numbers, meta=(column, "float32"))


def find_beats(signal, rate):
    """The R peaks with whole beats, found chunk by chunk, one threshold for all."""
    sigma = QRS_SECONDS / 6 * rate
    half_width = int(np.ceil(5 * sigma))
    # each chunk with a margin of its neighbours: where the file is cut changes nothing
    response = signal.map_overlap(qrs_response, depth=half_width, boundary="none",
                                  sigma=sigma, half_width=half_width)
    peaks = response.map_overlap(local_maxima, depth=1, boundary="none", dtype=bool)
    starts = np.cumsum((0, *response.chunks[0][:-1]))
    chunks = zip(response.to_delayed().ravel(), peaks.to_delayed().ravel(), starts,
                 strict=True)
    # every chunk's peaks, to the client
    found = dask.compute(*[peaks_in(r, p, start) for r, p, start in chunks])
    positions, heights = (np.concatenate(column) for column in zip(*found, strict=True))
    beats = [(-SPACING_SECONDS * rate, 0.0)]  # (position, height), one a spacing
    for beat in zip(positions, heights, strict=True):
        if beat[0] - beats[-1][0] < SPACING_SECONDS * rate:
            beats[-1] = max(beats[-1], beat, key=lambda b: b[1])  # the highest
        else:
            beats.append(beat)
    beats, heights = np.array(beats[1:], dtype=np.float64).reshape(-1, 2).T
    if len(beats):
        beats = beats[heights >= THRESHOLD * np.quantile(heights, 0.75)]
    beats = beats.astype(np.int64)
    whole = (beats > BEFORE * rate) & (beats < len(signal) - AFTER * rate - 2)
    return beats[whole]


def interpolate(x, t):  # x at the fractional position t, compiled for CPU and GPU
    i = int(t)
    return x[i] * (i + 1 - t) + x[i + 1] * (t - i)


def cut_beats(x, starts, step, out):
    """``out[b, j]``: ``x`` at ``starts[b] + j * step``; whether x was read in place."""
    if hasattr(x, "__cuda_array_interface__"):
        from numba import cuda
        at = cuda.jit(device=True)(interpolate)

        @cuda.jit
        def kernel(x, starts, step, out):
            b, j = cuda.grid(2)
            if b < out.shape[0] and j < out.shape[1]:
                out[b, j] = at(x, starts[b] + j * step)
        # a Numba device array over the CuPy array's memory
        view = cuda.as_cuda_array(x)
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


def train_and_score(x, positions, rate):
    """The beats cut by Numba, an autoencoder in PyTorch; each beat's score (its
    rebuild's mean squared error), and whether each hand-off kept the memory."""
    import torch

    xp = module_of(x)
    starts = xp.asarray(positions - BEFORE * rate, dtype=xp.float64)
    beats = xp.empty((len(positions), SIZE), dtype=xp.float32)
    numba_in_place = cut_beats(x, starts, (BEFORE + AFTER) * rate / (SIZE - 1), beats)
    beats = (beats - beats.mean(axis=1, keepdims=True)) / beats.std()
    tensor = torch.from_dlpack(beats)  # the same memory, on the same device
    pointer = beats.data.ptr if xp is not np else beats.ctypes.data
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(SIZE, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4),
        torch.nn.ReLU(), torch.nn.Linear(4, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, SIZE),
    ).to(tensor.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(EPOCHS):
        shuffled = tensor[torch.randperm(len(tensor), device=tensor.device)]
        for batch in shuffled.split(64):
            loss = ((model(batch) - batch) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        scores = ((model(tensor) - tensor) ** 2).mean(dim=1)
    in_place = {"Numba": numba_in_place, "PyTorch": tensor.data_ptr() == pointer}
    return scores.cpu().numpy(), in_place


def check_csv(path, column):
    """ValueError (or OSError) unless ``path`` is CSV with ``column`` in its header."""
    with open(path, "rb") as file:
        header = file.readline(100_000).decode("utf-8-sig", "replace").rstrip("\r\n")
    names = [name.lstrip().strip('"') for name in header.split(",")]  # as read_csv
    if column in names:
        return
    if not header or "\ufffd" in header or not header.replace("\t", " ").isprintable():
        problem = "is empty, or not CSV text (compressed?): give it as plain CSV"
    elif ";" in header or "\t" in header:
        problem = "is not comma-separated: save it as CSV with commas"
    elif names[0].lstrip("-+").replace(".", "", 1).isdigit():
        problem = f"has no header line: add one naming the ECG's column ({column})"
    else:
        problem = f"has no column {column!r}: give --column, one of {names}"
    raise ValueError(f"--csv {path} {problem}"[:300])


def run(device, path, column, rate, blocksize):
    """The recording's beats, each scored; printed as it goes."""
    # dask's dataframes of cuDF partitions on GPUs, pandas ones on CPUs
    dask.config.set({"dataframe.backend": "cudf" if device == "gpu" else "pandas"})
    values = read_values(path, column, blocksize).persist()  # kept on the workers
    missing = values.isna().to_dask_array(lengths=True)  # n/a, text: not numbers
    if len(missing) < 10 * rate:
        raise SystemExit(f"{path}: {len(missing):,} values, under 10 s at {rate:g} Hz: "
                         "give a longer recording, or its --rate")
    gaps, first = (int(n) for n in dask.compute(missing.sum(), missing.argmax()))
    if gaps:
        raise SystemExit(f"{path}: {gaps:,} value(s) of {column} not a number, first "
                         f"at sample {first:,}: fill or cut the gaps (an ECG has none)")
    signal = values.to_dask_array(lengths=True)  # CuPy (NumPy) chunks, no copy
    positions = find_beats(signal, rate)
    minutes = len(signal) / rate / 60
    print(f"{len(positions):,} beats in {minutes:.1f} min "
          f"({len(positions) / minutes:.0f} bpm) on {device}")
    if len(positions) < 10:
        raise SystemExit(f"{path}: too few beats: check --column and --rate")
    # the recording in one chunk, on one worker, where its beats are cut and scored
    (whole,) = signal.rechunk(len(signal)).to_delayed()
    scores, in_place = dask.delayed(train_and_score)(whole, positions, rate).compute()
    copies = [f"to {k} {'yes' if v else 'NO'}" for k, v in in_place.items()]
    print("handed on without a copy: " + ", ".join(copies))
    median = np.median(scores)
    flagged = scores > median + 6 * np.median(abs(scores - median))
    worst = [f"{p / rate:.1f} s" for p in positions[np.argsort(-scores)[:5]]]
    print(f"outliers: {flagged.sum()} of {len(scores)} beats, the worst at "
          + ", ".join(worst))
    return positions, scores, in_place


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--csv", help="a CSV with a header line (default: record 208)")
    parser.add_argument("--column", default="ecg_mv", help="the ECG's column")
    parser.add_argument("--rate", type=float, help="samples a second (record 208: 360)")
    parser.add_argument("--device", choices=["gpu", "cpu", "auto"], default="auto")
    parser.add_argument("--blocksize", type=parse_bytes, default="64MB",
                        help="bytes of the file a chunk, e.g. 64MB")
    local_or_started = parser.add_mutually_exclusive_group()
    local_or_started.add_argument("--workers", type=int, help="default: a GPU each")
    local_or_started.add_argument("--scheduler", help="a started cluster's address")
    args = parser.parse_args(argv)
    if args.csv is None and not os.path.isfile(RECORD):  # bad input: one line, first
        parser.error("no --csv given, and no record beside this file: give --csv FILE")
    if args.csv and args.rate is None:
        parser.error("--csv needs --rate HZ: the recording's samples a second")
    rate = 360.0 if args.rate is None else args.rate
    if not 50 <= rate <= 100_000:
        parser.error(f"--rate {rate:g}: too low or high to resolve a QRS (100-1000 Hz)")
    path = args.csv or RECORD
    try:
        check_csv(path, args.column)
    except (ValueError, OSError) as err:  # OSError: no such file, or not readable
        parser.error(str(err))
    least = max(10_000, math.ceil(os.path.getsize(path) / 1000))  # 1000 chunks at most
    if args.blocksize < least:
        parser.error(f"--blocksize {format_bytes(args.blocksize)}: give "
                     f"{format_bytes(least)} or more (a chunk a task, 1000 at most)")
    try:
        # --scheduler's cluster, or a local one (a worker per GPU, or CPU workers)
        with dask_gpu_interop.cluster_client(
                args.scheduler, device=args.device, n_workers=args.workers,
                memory={"async_alloc": True}) as (client, device):  # a pool a GPU
            result = run(device, path, args.column, rate, args.blocksize)
            print(dask_gpu_interop.memory_report(client))  # each GPU's pool
    except dask_gpu_interop.ClusterError as err:  # no GPU, no scheduler there, ...
        parser.error(err.message(flags=""))
    return result


if __name__ == "__main__":
    main()

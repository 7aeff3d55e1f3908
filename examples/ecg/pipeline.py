"""The ECG pipeline on a Dask cluster: read, convolve, detect, embed, train, score.

Where each step runs and why:

- **read, convolve, detect, embed** run where the data is: the stream is one Dask array, a
  chunk per CSV block, and each chunk's task reads a window reaching a little past its ends
  (``chunks``): the wavelet's half-width for the convolution, the NMS half-window for the
  detection, the beat's own extent for the embedding. Only small things come back to the
  client: candidate positions and responses (a few numbers a beat), from which the client sets
  one threshold for the whole recording, finds the beats, their lengths and which to prune.
  The signal, the response and the embeddings stay on the workers (on GPU workers, on the GPU).
- **training runs on one worker.** The VAE has about 40k weights and a 20-hour recording
  about 85k beats (87 MB of embeddings): a small job for one device, while data-parallel
  training across workers would all-reduce the gradients at every step, over TCP between
  processes, for longer than the step itself takes. So the training beats (75%, drawn
  at random) move once to a single worker (the scheduler picks the one holding most of them)
  and the model comes back as NumPy weights (under a megabyte).
- **scoring runs everywhere:** the weights go to every worker holding embeddings, which scores
  its own beats in place; a score and a 2-D latent point per beat come back.

With no distributed Client, the same graph runs on Dask's local scheduler (one process):
that is how the benchmark times the steps without the cluster's overheads.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np

from . import chunks as chunking
from . import detect, vae
from .backend import Backend
from .params import Params, check_rate

STAGES = ("read", "convolve", "detect", "embed", "train", "score")


@dataclass
class ECGResult:
    """What a run found; per-beat arrays are aligned with ``beats.positions``."""

    device: str
    rate: float
    samples: int
    chunks: int
    params: Params
    times: dict = field(default_factory=dict)  # stage -> seconds
    beats: detect.BeatTable | None = None
    threshold: float = math.nan
    train: np.ndarray | None = None  # bool: in the training set (embedded beats only)
    scores: np.ndarray | None = None  # negative ELBO per beat; NaN where pruned
    latent: np.ndarray | None = None  # (n, 2) latent means; NaN where pruned
    outlier_threshold: float = math.nan
    model: dict | None = None  # vae.train's state (NumPy weights, scale, loss history)
    excerpt: tuple | None = None  # (first sample, NumPy samples): 10 s around the top outlier

    @property
    def test(self) -> np.ndarray:
        """Embedded beats held out of training: the ones whose scores are honest."""
        return self.beats.kept & ~self.train

    @property
    def flagged(self) -> np.ndarray:
        return self.beats.kept & (np.nan_to_num(self.scores, nan=-np.inf) > self.outlier_threshold)

    @property
    def seconds(self) -> float:
        return self.samples / self.rate


def run(source, rate, *, device: str = "cpu", params: Params | None = None, chunks=None,
        column: int = 0, blocksize=None, on_stage=None) -> ECGResult:
    """Run the pipeline on ``source``: a CSV path, or a 1-D array of samples.

    ``device``: "gpu" or "cpu" (resolved already: see ``dask_gpu_interop.resolve_device``). ``chunks``:
    for an array, chunk lengths (an int or a tuple); a CSV is chunked by ``blocksize`` (bytes or
    "64MB"). By default, 4 chunks per worker (a CSV's between 1 MiB and 256 MiB each). Uses the
    current distributed Client when there is one. ``on_stage``: called with each stage's name
    ("read", ..., "train", "score") as the stage begins, in this process: the caller's own work
    can start where it waits least on the stages (while one worker trains, the client only
    waits).
    """
    rate = check_rate(rate)
    vae.check_installed()
    params = params or Params()
    backend = Backend(device)
    result = ECGResult(device=device, rate=rate, samples=0, chunks=0, params=params)
    stage = _Stages(result.times, on_stage)

    with stage("read"):
        signal = _read(source, backend, chunks, column, blocksize)
        (signal,) = _persist(signal)
    result.samples, result.chunks = int(signal.shape[0]), len(signal.chunks[0])
    if result.samples < 2 * params.ricker_half_width(rate):
        raise ValueError(f"the recording is too short: {result.samples} samples at {rate:g} Hz")

    with stage("convolve"):
        (response,) = _persist(_convolve(signal, rate, params, backend))

    with stage("detect"):
        result.threshold, positions = _detect(response, rate, params, backend)
        result.beats = detect.beat_table(positions, rate, params, result.samples)

    with stage("embed"):
        parts = _embed(signal, result.beats, backend)

    rng = np.random.default_rng(params.seed)
    result.train = result.beats.kept & (rng.random(len(result.beats)) < params.train_fraction)
    n_train = int(result.train.sum())
    if n_train < 2 or not result.test.any():
        raise ValueError(
            f"only {int(result.beats.kept.sum())} beats could be embedded ({n_train} to train "
            "on): the recording is too short, or no heartbeat was found in it"
        )

    with stage("train"):
        result.model = _train(parts, result.train, params, backend)

    with stage("score"):
        result.scores, result.latent = _score(parts, result.model, len(result.beats), backend)

    train_scores = result.scores[result.train]
    result.outlier_threshold = float(np.quantile(train_scores, 1 - params.contamination))
    result.excerpt = _excerpt(signal, result, backend)
    return result


def evaluate(result: ECGResult, truth, tolerance_seconds: float = 0.05) -> dict:
    """Scores against a known truth (``synthetic.SyntheticECG``): beat detection F1 over all
    beats, and the outlier ranking (ROC AUC) over the held-out beats only."""
    from .metrics import detection_scores, match, roc_auc

    if abs(truth.rate - result.rate) > 1e-9 * result.rate:
        raise ValueError(f"truth is at {truth.rate:g} Hz but the run was at {result.rate:g} Hz")
    detection = detection_scores(result.beats.positions, truth.peaks, result.rate,
                                 tolerance_seconds)
    for_detected, _ = match(result.beats.positions, truth.peaks,
                            int(round(tolerance_seconds * result.rate)))
    matched = for_detected >= 0
    abnormal = np.zeros(len(result.beats), dtype=bool)
    abnormal[matched] = truth.abnormal[for_detected[matched]]
    held_out = result.test & matched
    flagged = result.flagged & held_out
    positives = int(abnormal[held_out].sum())
    return {
        "detection": detection,
        "outliers": {
            "auc": roc_auc(result.scores[held_out], abnormal[held_out]),
            "held_out": int(held_out.sum()),
            "abnormal": positives,
            "flagged": int(flagged.sum()),
            "flagged_abnormal": int((flagged & abnormal).sum()),
        },
    }


def find_beats(source, rate, *, device: str = "cpu", params: Params | None = None, chunks=None,
               column: int = 0, blocksize=None) -> detect.BeatTable:
    """Only the segmentation (read, convolve, detect, prune): the beats of ``source``."""
    rate = check_rate(rate)
    params = params or Params()
    backend = Backend(device)
    (signal,) = _persist(_read(source, backend, chunks, column, blocksize))
    (response,) = _persist(_convolve(signal, rate, params, backend))
    _, positions = _detect(response, rate, params, backend)
    return detect.beat_table(positions, rate, params, int(signal.shape[0]))


# -- stages ----------------------------------------------------------------------------------

def _read(source, backend: Backend, chunks, column, blocksize):
    from . import reader

    xp = backend.xp
    if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
        if blocksize is None:
            size = os.path.getsize(source) if os.path.isfile(source) else 0
            blocksize = min(max(size // (4 * _worker_count()) + 1, 1 << 20), 256 << 20)
        frame = reader.read_csv(source, backend, column=column, blocksize=blocksize)
        (frame,) = _persist(frame)
        lengths = frame.map_partitions(len).compute()
        return reader.frame_to_array(frame, list(lengths), backend)
    array = np.asarray(source, dtype=np.float32)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D recording, got shape {array.shape}")
    if chunks is None:
        chunks = chunking.even_chunks(len(array), 4 * _worker_count())
    signal = da.from_array(array, chunks=chunks, asarray=False)
    if backend.is_gpu:
        signal = signal.map_blocks(xp.asarray, dtype="float32", meta=xp.empty(0, dtype=xp.float32))
    return signal


def _convolve(signal, rate, params: Params, backend: Backend):
    half = params.ricker_half_width(rate)
    sigma = params.ricker_sigma(rate)
    meta = backend.xp.empty(0, dtype=backend.xp.float32)
    pieces = []
    for w in chunking.windows(signal.chunks[0], half):
        task = dask.delayed(_convolve_window)(signal[w.read_start:w.read_stop], w.lo, w.hi,
                                              sigma, half, backend.device)
        pieces.append(da.from_delayed(task, shape=(w.stop - w.start,), dtype="float32", meta=meta))
    return da.concatenate(pieces)


def _convolve_window(x, lo, hi, sigma, half, device):
    backend = Backend(device)
    kernel = detect.ricker(sigma, half, backend.xp)
    return detect.convolve(x, kernel, backend)[lo:hi]


def _detect(response, rate, params: Params, backend: Backend):
    half = params.nms_half_window(rate)
    tasks = [
        dask.delayed(_candidates_window)(response[w.read_start:w.read_stop], w.lo, w.hi, half,
                                         w.read_start, backend.device)
        for w in chunking.windows(response.chunks[0], half)
    ]
    found = dask.compute(*tasks)
    positions = np.concatenate([p for p, _ in found]) if found else np.empty(0, np.int64)
    heights = np.concatenate([h for _, h in found]) if found else np.empty(0, np.float32)
    level = detect.threshold(heights, params)
    return level, positions[heights >= level]


def _candidates_window(response, lo, hi, half, offset, device):
    backend = Backend(device)
    positions, heights = detect.candidates(response, lo, hi, half, backend)
    return backend.to_host(positions) + offset, backend.to_host(heights)


@dataclass
class _Part:
    """The embeddings of the kept beats one chunk owns (a persisted task) and their indices."""

    beats: np.ndarray  # indices into the beat table
    embeddings: object  # Delayed, persisted: (len(beats), 256) CuPy/NumPy array


def _embed(signal, table: detect.BeatTable, backend: Backend) -> list[_Part]:
    spans = chunking.bounds(signal.chunks[0])
    kept = np.flatnonzero(table.kept)
    owners = chunking.owner(table.positions[kept], spans)
    n = int(signal.shape[0])
    parts = []
    for index in np.unique(owners):
        beats = kept[owners == index]
        starts, ends = table.starts[beats], table.ends[beats]
        a = max(0, int(math.floor(starts.min())))
        b = min(n, int(math.ceil(ends.max())) + 2)
        task = dask.delayed(_embed_window)(signal[a:b], starts - a, ends - a, backend.device)
        parts.append(_Part(beats, task))
    persisted = _persist(*[p.embeddings for p in parts])
    for part, emb in zip(parts, persisted, strict=True):
        part.embeddings = emb
    return parts


def _embed_window(x, starts, ends, device):
    from .embed import embed_beats

    return embed_beats(x, starts, ends, Backend(device))


def _train(parts: list[_Part], train: np.ndarray, params: Params, backend: Backend) -> dict:
    pieces = []
    for part in parts:
        rows = np.flatnonzero(train[part.beats])
        if len(rows):
            pieces.append(dask.delayed(_rows)(part.embeddings, rows, backend.device))
    task = dask.delayed(_train_on_one_worker)(pieces, params, backend.device)
    (state,) = dask.compute(task)
    return state


def _rows(embeddings, rows, device):
    xp = Backend(device).xp
    return embeddings[xp.asarray(rows)]


def _train_on_one_worker(pieces, params, device):
    # a warm-up still running on this worker would call CUDA beside the step's graph capture
    _wait_for_warm_up()
    xp = Backend(device).xp
    return vae.train(xp.concatenate(pieces), params, device, threads=_worker_threads())


def _worker_threads() -> int | None:
    """The threads of the worker running this task: its share of the CPU cores. (Dask starts
    workers with OMP_NUM_THREADS=1, which would leave PyTorch on one core of a CPU worker.)"""
    try:
        from distributed import get_worker

        return int(get_worker().state.nthreads)
    except (ImportError, ValueError, AttributeError):
        return None


def _score(parts: list[_Part], state: dict, n_beats: int, backend: Backend):
    state_task = dask.delayed(state)
    tasks = [dask.delayed(vae.score)(p.embeddings, state_task, backend.device) for p in parts]
    scored = dask.compute(*tasks)
    scores = np.full(n_beats, np.nan, dtype=np.float64)
    latent = np.full((n_beats, vae.LATENT), np.nan, dtype=np.float64)
    for part, (s, z) in zip(parts, scored, strict=True):
        scores[part.beats] = s
        latent[part.beats] = z
    return scores, latent


# -- a worker's first tasks, prepared ahead ---------------------------------------------------

def warm_up_in_background(device: str) -> None:
    """On this worker, in a daemon thread: PyTorch is imported (seconds of the interpreter's
    time, best spent while the client still makes or reads the data rather than beside the
    first tasks), then each stage's kernels run once on ten seconds of a synthetic wave
    (CuPy's and Numba's GPU kernels compile at first use, or load from their disk caches), and
    the scoring's forward pass on a few beats (on a GPU, PyTorch's kernels and library handles,
    which a worker that did not train would otherwise make in its first scoring task).
    Started as the cluster comes up, this overlaps what the first tasks would wait for with
    what the client does meanwhile. An error is left for the stage that meets it."""
    import threading

    threading.Thread(target=_warm_up, args=(device,), name=WARM_UP_THREAD, daemon=True).start()


WARM_UP_THREAD = "ecg-warm-up"


def _wait_for_warm_up() -> None:
    """Wait for this process's warm-up (:func:`warm_up_in_background`), if one is running."""
    import threading

    for thread in threading.enumerate():
        if thread.name == WARM_UP_THREAD:
            thread.join()


def _warm_up(device: str) -> None:
    with contextlib.suppress(Exception):
        import torch  # noqa: F401
    try:
        backend = Backend(device)
        rate, params = 250.0, Params()
        wave = np.sin(np.arange(2500, dtype=np.float32) * np.float32(2 * np.pi / 200))
        signal = backend.xp.asarray(wave)
        kernel = detect.ricker(params.ricker_sigma(rate), params.ricker_half_width(rate),
                               backend.xp)
        response = detect.convolve(signal, kernel, backend)
        positions, _ = detect.candidates(response, 0, len(response),
                                         params.nms_half_window(rate), backend)
        backend.to_host(positions)
        beats = _embed_window(signal, np.array([100.0, 300.0]), np.array([300.0, 500.0]), device)
        backend.xp.concatenate([_rows(beats, np.array([1]), device), beats])
        vae.warm_up(device)
    except Exception:  # the stage that meets it raises it with its own context
        pass


# -- helpers ---------------------------------------------------------------------------------

def _persist(*collections):
    """Persist and wait: with a distributed Client, ``persist`` returns before the work is done."""
    out = dask.persist(*collections)
    try:
        from distributed import futures_of, wait
    except ImportError:
        return out
    futures = futures_of(out)
    if futures:
        wait(futures)
        for future in futures:
            if future.status == "error":
                future.result()  # raises the task's own exception
    return out


def _excerpt(signal, result: ECGResult, backend: Backend, seconds: float = 10.0):
    """Ten seconds of the stream around the highest-scoring held-out beat, on the host."""
    test = np.flatnonzero(result.test)
    centre = int(result.beats.positions[test[np.argmax(result.scores[test])]]) if len(test) else 0
    width = min(result.samples, int(seconds * result.rate))
    start = min(max(0, centre - width // 2), result.samples - width)
    values = backend.to_host(signal[start:start + width].compute())
    return start, np.asarray(values, dtype=np.float32)


def _worker_count() -> int:
    try:
        from distributed import get_client

        from dask_gpu_interop import cluster_workers

        return max(1, len(cluster_workers(get_client())))
    except (ImportError, ValueError):
        return 1


class _Stages:
    """Wall-clock seconds per stage, into ``times``; ``on_stage(name)`` as each begins."""

    def __init__(self, times: dict, on_stage=None):
        self.times = times
        self.on_stage = on_stage

    @contextmanager
    def __call__(self, name: str):
        if self.on_stage is not None:
            self.on_stage(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = time.perf_counter() - start

"""Where the whole job's training data lives, decided before any work from an estimate of
the feature table and of XGBoost's quantized matrix against what the workers may hold.

The job never holds the feature table: each worker makes its partitions one at a time as
XGBoost reads them into its quantized matrix (``train.stream``). What is placed is that matrix:

- **device**: the quantized matrix in the GPUs' memory (XGBoost's ``QuantileDMatrix``): the
  fastest, where the matrix, the partitions in flight and the training's own arrays fit;
- **host**: XGBoost's external-memory matrix (``ExtMemQuantileDMatrix``), its pages in host
  memory and as many as fit on the GPU (``cache_host_ratio``), read over the bus at every
  tree level; for a matrix larger than a GPU. On CPU workers the matrix is in host memory
  anyway, and the partitions are kept between XGBoost's passes where the table fits too.

Neither fits: a ``ValueError`` in one line, saying how much memory it needs and what to do.

The estimate: rows from the text's size and the bytes per line of the files' first lines;
the table's bytes from its row width (45 float32 features and an int32 label); XGBoost's
matrix about ``QUANTIZED_BYTES_PER_VALUE`` a feature value and XGBoost's training memory
beside it ``TRAINING_BYTES_PER_ROW`` a row (both measured); the partitions in flight on a GPU
while the matrix is built (the one XGBoost reads and those made meanwhile, ``PREFETCH``: two
where they fit, else one, else none) at ``TASK_PEAK`` times their text. A GPU may fill
``DEVICE_SHARE`` of its memory (or of its pool's maximum); a worker's host memory is filled to
Dask's spill threshold. The prediction of a GPU's peak: the matrix, and the larger of the
partitions in flight and the training memory, which come one after the other. External memory
moves the matrix's pages to host memory, not the training memory: where that alone does not
fit a GPU, the job stops before any work.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

import dask
from dask.utils import format_bytes

from . import files, schema

CHOICES = ("auto", "device", "host")
# Both measured with the job's "GPU memory" line (benchmarks/README.md):
QUANTIZED_BYTES_PER_VALUE = 1.1  # XGBoost's quantized matrix (its compressed bin indices)
TRAINING_BYTES_PER_ROW = 104  # XGBoost's memory beside its matrix at its peak, per row: the
# gradients, the rows' positions, the predictions and the sorts of each round's AUC
TASK_PEAK = 5  # a GPU task's device memory stays under 5 times its text (read.py's chunks)
PREFETCH = (2, 1, 0)  # partitions made ahead on a GPU, the first whose memory fits: more overlap
PAGE_SHARE = 1 / 16  # of a GPU: the pages XGBoost's external memory brings over at once
# The share of a GPU's memory (or its pool's maximum) the training may fill: the workers hold
# no results, only the training's own allocations; the rest is for the CUDA context, the
# libraries' workspaces and the pool's fragmentation.
DEVICE_SHARE = 0.9
SAMPLE_BYTES = 1 << 16  # of each sampled file's text
SAMPLED_FILES = 32


def row_bytes() -> int:
    """Bytes of one row of the feature table (its columns' widths)."""
    from .features import meta

    return int(sum(dtype.itemsize for dtype in meta().dtypes))


def host_share() -> float:
    """The share of a worker's memory limit it holds before it writes results to disk (Dask's
    ``distributed.worker.memory.spill``; its pause threshold where spilling is off)."""
    for key in ("distributed.worker.memory.spill", "distributed.worker.memory.pause"):
        value = dask.config.get(key, default=False)
        if value:
            return float(value)
    return 1.0


@dataclass(frozen=True)
class Estimate:
    """What the ETL and training will hold."""

    rows: int
    table_bytes: int  # the feature table
    quantized_bytes: int  # XGBoost's quantized matrix of it
    task_bytes: int  # one partition being made, at its peak on a GPU

    @property
    def training_bytes(self) -> int:
        """XGBoost's own arrays for training on every row."""
        return self.rows * TRAINING_BYTES_PER_ROW


def bytes_per_line(paths, sample: int = SAMPLE_BYTES, count: int = SAMPLED_FILES) -> float:
    """Mean bytes per line of the first whole lines of up to ``count`` of ``paths`` (spread
    over them), decompressed; 0 when they hold no line."""
    paths = list(paths)
    step = max(1, math.ceil(len(paths) / count))
    size = lines = 0
    for path in paths[::step]:
        with files.open_text(path) as f:
            head = f.read(sample)
        end = head.rfind(b"\n") + 1
        size += end
        lines += head.count(b"\n", 0, end)
    return size / lines if lines else 0.0


def estimate(plan: files.Plan) -> Estimate:
    """The estimate for ``plan``."""
    text = sum(part.nbytes for part in plan.parts)
    paths = list(dict.fromkeys(piece.path for part in plan.parts for piece in part.pieces))
    per_line = bytes_per_line(paths) if paths else 0.0
    rows = int(text / per_line) if per_line else 0
    largest = max((part.nbytes for part in plan.parts), default=0)
    return Estimate(rows=rows, table_bytes=rows * row_bytes(),
                    quantized_bytes=int(rows * len(schema.FEATURES) * QUANTIZED_BYTES_PER_VALUE),
                    task_bytes=largest * TASK_PEAK)


@dataclass(frozen=True)
class Memory:
    """What the workers may use: each GPU worker's device memory (its pool's maximum where one
    is set, else its device's), and the workers' host memory together (their memory limits,
    each host's at most its memory)."""

    gpus: tuple[int, ...]
    host_bytes: int
    cores_per_worker: int = 1  # the fewest cores a worker may use (see measure)


@dataclass(frozen=True)
class Placement:
    where: str  # "device" or "host": where XGBoost's quantized matrix lives
    reason: str
    keep: bool = False  # the partitions kept between XGBoost's passes (CPU workers)
    cache_host_ratio: float | None = None  # host: the share of the matrix's pages in host memory
    peak_bytes: int = 0  # the predicted peak of a GPU's memory
    prefetch: int = 1  # partitions made ahead while XGBoost reads one

    @property
    def external(self) -> bool:
        """XGBoost's external-memory matrix on GPUs."""
        return self.where == "host" and self.cache_host_ratio is not None

    def line(self) -> str:
        place = ("the GPUs' memory" if self.where == "device" else "host memory")
        return f"training data: XGBoost's matrix in {place} ({self.where}): {self.reason}"


def _sizes(estimate_: Estimate) -> str:
    return (f"XGBoost's matrix of about {estimate_.rows:,} rows "
            f"({format_bytes(estimate_.quantized_bytes)}; the feature table would be "
            f"{format_bytes(estimate_.table_bytes)}, made a partition at a time)")


def choose(estimate_: Estimate, memory: Memory, device: str, asked: str = "auto") -> Placement:
    """Where XGBoost's quantized matrix lives; ValueError (one line: what it needs, what to
    do) where it cannot fit, or ``asked`` cannot be had."""
    if asked not in CHOICES:
        raise ValueError(f"--training-data {asked}: choose one of {', '.join(CHOICES)}")
    host = memory.host_bytes * host_share()
    fewer = "or fewer quarters (--data); a larger --partition-size does not help"
    matrix, table = estimate_.quantized_bytes, estimate_.table_bytes
    if device != "gpu" or not memory.gpus:
        if asked == "device":
            raise ValueError("--training-data device: the workers have no GPU; leave it auto")
        if host and matrix + estimate_.training_bytes > host:
            raise ValueError(
                f"{_sizes(estimate_)} and XGBoost's training memory need "
                f"{format_bytes(matrix + estimate_.training_bytes)}, more than the workers hold "
                f"in memory before they spill to disk ({format_bytes(host)}): use more workers "
                f"or machines, {fewer}")
        keep = not host or table + matrix + estimate_.training_bytes <= host
        kept = ("the partitions kept between XGBoost's passes" if keep else
                "the partitions made again at each of XGBoost's passes (the table does not "
                "fit beside the matrix)")
        return Placement("host", f"CPU workers: {_sizes(estimate_)} in their memory "
                                 f"({format_bytes(host)} may be held), {kept}", keep=keep)
    gpus = len(memory.gpus)
    smallest = min(memory.gpus)
    each = smallest * DEVICE_SHARE
    per_gpu = matrix / gpus
    training = estimate_.training_bytes / gpus
    if estimate_.task_bytes > smallest:
        raise ValueError(
            f"a partition being made on a GPU needs up to {format_bytes(estimate_.task_bytes)}"
            f" ({TASK_PEAK}x its text), more than the {format_bytes(smallest)} a GPU has: give "
            "a smaller --partition-size")

    def others(prefetch: int) -> float:
        """Beside the matrix: the partitions in flight while it is built, or XGBoost's
        training memory once it is (the larger: the two come one after the other)."""
        return max((prefetch + 1) * estimate_.task_bytes, training)

    def parts(prefetch: int) -> str:
        flight = f"{prefetch + 1} partition{'s' if prefetch else ''}"
        return (f"{format_bytes(per_gpu)} of matrix, then the larger of {flight} in flight "
                f"({format_bytes((prefetch + 1) * estimate_.task_bytes)}) and XGBoost's "
                f"training memory ({format_bytes(training)})")

    may_fill = f"the {format_bytes(each)} each of {gpus} GPU(s) may fill"
    fitting = [p for p in PREFETCH if per_gpu + others(p) <= each]
    if asked == "device" or (asked == "auto" and fitting):
        prefetch = fitting[0] if fitting else PREFETCH[-1]
        need = per_gpu + others(prefetch)
        verdict = "fits" if fitting else "does not fit (asked for: expect running out)"
        return Placement("device", f"{_sizes(estimate_)} {verdict} {may_fill}: predicted "
                                   f"peak {format_bytes(need)} a GPU ({parts(prefetch)})",
                         peak_bytes=int(need), prefetch=prefetch)
    prefetch = PREFETCH[-1]
    need = per_gpu + others(prefetch)
    staging = smallest * PAGE_SHARE
    if training + staging > each:  # the matrix's pages go to host memory, the training's not
        raise ValueError(
            f"XGBoost's training memory for about {estimate_.rows:,} rows, "
            f"{format_bytes(training)} on each of {gpus} GPU(s) beside its matrix, with "
            f"{format_bytes(staging)} for its external memory's pages, is more than "
            f"{may_fill}; its external memory does not hold it: use more GPUs (each trains "
            f"on its share), {fewer}")
    room = max(0.0, each - others(prefetch) - staging)
    ratio = min(1.0, max(0.0, 1 - room / per_gpu)) if per_gpu else 0.0
    on_host = matrix * ratio
    if host and on_host > host:
        raise ValueError(
            f"{_sizes(estimate_)} needs {format_bytes(need)} on each of {gpus} GPU(s), more "
            f"than {may_fill}, and {format_bytes(on_host)} of its pages in host memory, more "
            f"than the workers hold before they spill to disk ({format_bytes(host)}): use "
            f"more GPUs or machines, {fewer}")
    why = ("asked for" if asked == "host" else
           f"{_sizes(estimate_)} needs {format_bytes(need)} a GPU, more than {may_fill}")
    peak = others(prefetch) + staging + per_gpu * (1 - ratio)
    return Placement("host", f"{why}; XGBoost's external memory: {ratio:.0%} of its pages in "
                             f"host memory ({format_bytes(on_host)}), the rest on the GPUs; "
                             f"predicted peak {format_bytes(peak)} a GPU ({parts(prefetch)})",
                     cache_host_ratio=round(ratio, 4), peak_bytes=int(peak), prefetch=prefetch)


def _worker_memory(dask_worker=None) -> dict:
    """This worker's host, memory limit (0: none), its host's memory and cores, and the cores
    this process may run on (dask-cuda pins each GPU worker to its GPU's)."""
    import psutil

    manager = getattr(dask_worker, "memory_manager", None)
    limit = getattr(manager, "memory_limit", None) or 0
    cpus = os.cpu_count() or 1
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    return {"host": socket.gethostname(), "limit": int(limit),
            "total": int(psutil.virtual_memory().total), "cpus": cpus, "allowed": allowed}


def _device_bytes(dask_worker=None) -> int:
    """This GPU worker's device memory (where the memory plugin does not report it)."""
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[1])


def measure(client, device: str) -> Memory:
    """What the workers of ``client``'s cluster may hold (see :class:`Memory`)."""
    from dask_gpu_interop import memory_report

    workers = client.run(_worker_memory)
    by_host: dict[str, list[dict]] = {}
    for info in workers.values():
        by_host.setdefault(info["host"], []).append(info)
    host = sum(min(group[0]["total"], sum(w["limit"] or group[0]["total"] for w in group))
               for group in by_host.values())
    # a worker's cores: those it may run on, at most its host's shared out over its workers
    cores = min((min(w["allowed"], w["cpus"] // len(group))
                 for group in by_host.values() for w in group), default=1)
    gpus: tuple[int, ...] = ()
    if device == "gpu":
        sizes = {}
        for address, snap in memory_report(client).items():
            total = (snap.get("device") or {}).get("total")
            if total:
                maximum = snap.get("maximum_pool_size")
                sizes[address] = min(total, maximum) if maximum else total
        missing = [address for address in workers if address not in sizes]
        if missing:
            sizes.update(client.run(_device_bytes, workers=missing))
        gpus = tuple(sizes[address] for address in sorted(sizes))
    return Memory(gpus=gpus, host_bytes=host, cores_per_worker=max(1, cores))


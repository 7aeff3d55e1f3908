"""Where the whole job keeps its training data: in the GPUs' memory, or in the workers' host
memory while XGBoost's quantized matrix alone lives on the GPUs. Decided before any work, from
an estimate of the feature table and of XGBoost's matrix against what the workers may hold.

- **device**: the ETL's cuDF partitions stay on the GPUs and XGBoost builds its matrix there
  from them (the fastest path, when the table and the matrix fit);
- **host**: each ETL task hands its table back as pandas, held in its worker's host memory;
  XGBoost sketches and quantizes those partitions batch by batch on the worker's CPU cores
  (``QuantileDMatrix`` from host data), and the quantized matrix, about two bytes a value
  instead of the table's four, is moved to the GPU to train there. On CPU workers this is the
  only path.

Neither fits: a ``ValueError`` in one line, saying how much memory it needs and what to do.

The estimate: rows from the text's size and the bytes per line of the files' first lines;
the table's bytes from its row width (45 float32 features and an int32 label); XGBoost's
matrix about ``QUANTIZED_BYTES_PER_VALUE`` a feature value; the ETL's tasks in flight on a GPU
its threads' partitions at ``TASK_PEAK`` times their text. The data a GPU holds may fill
``DEVICE_SHARE`` of its memory (or of its pool's maximum), the tasks passing through all of
it; a worker's host memory is filled to Dask's spill threshold.
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
QUANTIZED_BYTES_PER_VALUE = 2  # XGBoost's quantized matrix: a bin index per value, and more
TASK_PEAK = 5  # a GPU task's device memory stays under 5 times its text (read.py's chunks)
# Above this share of a GPU's memory, GPU workers move results to host memory (dask-cuda's
# device memory limit, the same for the in-process worker): the data should stay below it.
DEVICE_SHARE = 0.8
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
    task_bytes: int  # a GPU's ETL tasks in flight at their peak (its threads' partitions)


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


def estimate(plan: files.Plan, threads: int = 1) -> Estimate:
    """The estimate for ``plan`` on workers of ``threads`` threads each."""
    text = sum(part.nbytes for part in plan.parts)
    paths = list(dict.fromkeys(piece.path for part in plan.parts for piece in part.pieces))
    per_line = bytes_per_line(paths) if paths else 0.0
    rows = int(text / per_line) if per_line else 0
    largest = max((part.nbytes for part in plan.parts), default=0)
    return Estimate(rows=rows, table_bytes=rows * row_bytes(),
                    quantized_bytes=rows * len(schema.FEATURES) * QUANTIZED_BYTES_PER_VALUE,
                    task_bytes=threads * largest * TASK_PEAK)


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
    where: str  # "device" or "host"
    reason: str

    def line(self) -> str:
        place = ("the GPUs' memory" if self.where == "device" else "the workers' host memory")
        return f"training data: in {place} ({self.where}): {self.reason}"


def _sizes(estimate_: Estimate) -> str:
    return (f"the feature table ({format_bytes(estimate_.table_bytes)}, about "
            f"{estimate_.rows:,} rows) and XGBoost's matrix "
            f"({format_bytes(estimate_.quantized_bytes)})")


def choose(estimate_: Estimate, memory: Memory, device: str, asked: str = "auto") -> Placement:
    """Where the training data lives; ValueError (one line: what it needs, what to do) where
    it cannot fit, or ``asked`` cannot be had."""
    if asked not in CHOICES:
        raise ValueError(f"--training-data {asked}: choose one of {', '.join(CHOICES)}")
    host = memory.host_bytes * host_share()
    both = estimate_.table_bytes + estimate_.quantized_bytes
    fewer = "or fewer quarters (--data); a larger --partition-size does not help"
    if device != "gpu" or not memory.gpus:
        if asked == "device":
            raise ValueError("--training-data device: the workers have no GPU; leave it auto")
        if host and both > host:
            raise ValueError(
                f"{_sizes(estimate_)} need {format_bytes(both)}, more than the workers hold "
                f"in memory before they spill to disk ({format_bytes(host)}): use more workers "
                f"or machines, {fewer}")
        return Placement("host", f"CPU workers: {_sizes(estimate_)} in their memory "
                                 f"({format_bytes(host)} may be held)")
    gpus = len(memory.gpus)
    each = min(memory.gpus) * DEVICE_SHARE
    matrix = estimate_.quantized_bytes / gpus
    on_device = estimate_.table_bytes / gpus + max(estimate_.task_bytes, matrix)
    fits_device = on_device <= each
    if estimate_.task_bytes > min(memory.gpus):  # passing: the whole GPU, not its share
        raise ValueError(
            f"the ETL's tasks in flight on a GPU need up to {format_bytes(estimate_.task_bytes)}"
            f" (its threads' partitions at {TASK_PEAK}x their text), more than the "
            f"{format_bytes(min(memory.gpus))} a GPU has: give a smaller --partition-size or "
            "--threads-per-worker 1")
    if matrix > each:
        raise ValueError(
            f"XGBoost's quantized matrix of about {estimate_.rows:,} rows needs about "
            f"{format_bytes(estimate_.quantized_bytes)} of GPU memory, "
            f"{format_bytes(matrix)} on each of {gpus} GPU(s), more than the "
            f"{format_bytes(each)} a GPU may fill ({DEVICE_SHARE:.0%} of its memory or pool): "
            f"use more GPUs (each holds its share), {fewer}")
    may_fill = f"the {format_bytes(each)} each of {gpus} GPU(s) may fill"
    if asked == "device" or (asked == "auto" and fits_device):
        verdict = "fit" if fits_device else "do not fit (asked for: expect spilling)"
        return Placement("device", f"{_sizes(estimate_)} {verdict} {may_fill} "
                                   f"({format_bytes(on_device)} each)")
    if host and estimate_.table_bytes + estimate_.quantized_bytes > host:
        raise ValueError(
            f"{_sizes(estimate_)} need {format_bytes(on_device)} on each of {gpus} GPU(s), "
            f"more than the {format_bytes(each)} a GPU may fill, and "
            f"{format_bytes(both)} of host memory, more than the workers hold before they "
            f"spill to disk ({format_bytes(host)}): use more GPUs or machines, {fewer}")
    why = ("asked for" if asked == "host" else
           f"{_sizes(estimate_)} need {format_bytes(on_device)} on each GPU, more than {may_fill}")
    return Placement("host", f"{why}; the table in host memory ({format_bytes(host)} may be "
                             f"held), XGBoost's quantized matrix on the GPUs "
                             f"({format_bytes(matrix)} each)")


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


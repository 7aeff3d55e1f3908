"""The plan of one all-to-all (:func:`dask_gpu_interop.shuffle`): which worker splits which
input partitions and makes which output partitions, and how much each step works on; the
shuffle's settings in dask config that decide it, read and checked; and each worker's
memory, which "auto" steps are measured against."""

from __future__ import annotations

from dataclasses import dataclass

from .._client import workers_of
from ..device import memory_info

#: dask config: the bytes each split of a worker, and each run of its output partitions, works
#: on at once, "auto" or a size ("1GiB"); with a size, a worker's share is split and gathered
#: in steps of about that much, each a task of its own.
STEP_KEY = "gpu-interop.shuffle.step-bytes"
#: dask config: how the batches cross between workers, "direct" (the default: each split sends
#: its batches to their workers itself, :mod:`.inbox`; where a worker's share takes
#: one step) or "batches" (tasks of their own, which dask moves as it moves any data).
EXCHANGE_KEY = "gpu-interop.shuffle.exchange"
EXCHANGES = ("batches", "direct")
#: dask config: the longest a shuffle waits while none of its tasks ends, and the longest a
#: destination worker may take to take a batch sent to it, as a duration ("5 minutes",
#: "300s"), or None for no limit; past it, a ShuffleError names what was still running.
TIMEOUT_KEY = "gpu-interop.shuffle.timeout"
#: With "auto", a worker's share (what it holds of the input, or gets of the output) goes
#: through one split and one run of outputs while it is at most this part of the worker's
#: memory (the GPU's for cuDF partitions, the worker's memory limit for pandas ones) ...
ONE_STEP_PART = 1 / 8
#: ... and else in steps of this part of it (at most :data:`STEP_MOST`), so that what a step
#: holds beside the rest stays small, and the rest can spill to host memory.
STEP_PART = 1 / 16
#: The largest step "auto" takes.
STEP_MOST = 2 * 2**30


@dataclass(frozen=True)
class Plan:
    """Where each task of one all-to-all runs, and how much each works on.

    ``workers`` are every worker, sorted; ``owners[i]`` holds input partition ``i``. Output
    partitions go to the workers in contiguous runs (:meth:`outputs_of`), so that each
    split's rows bound for one worker are one slice of it. With ``step_bytes`` (and the input
    partitions' ``sizes``), a worker's share is split and gathered in steps of about that
    many bytes, each a task of its own (:meth:`input_groups`, :meth:`output_groups`); without,
    in one split and one run of outputs per worker.
    """

    workers: tuple[str, ...]
    owners: tuple[str, ...]
    npartitions: int
    sizes: tuple[int, ...] = ()
    step_bytes: int | None = None

    def __post_init__(self):
        strays = sorted(set(self.owners) - set(self.workers))
        if strays:  # their partitions would be split nowhere: rows lost, never that
            raise ValueError(f"input partitions placed on {strays}, not among the workers")

    def outputs_of(self, worker: int) -> tuple[int, int]:
        """``(first, stop)``: the output partitions placed on ``workers[worker]``."""
        count = len(self.workers)
        return (-(-worker * self.npartitions // count),
                -(-(worker + 1) * self.npartitions // count))  # fmt: skip

    def destination(self, partition: int) -> int:
        """The index in ``workers`` of the worker that makes output ``partition``."""
        return partition * len(self.workers) // self.npartitions

    def inputs_on(self, worker: int) -> list[int]:
        """The input partitions held by ``workers[worker]``."""
        address = self.workers[worker]
        return [i for i, owner in enumerate(self.owners) if owner == address]

    def input_groups(self, worker: int) -> list[list[int]]:
        """The input partitions of ``workers[worker]`` in the groups split together: one
        group, or runs of at most ``step_bytes`` (a partition larger than that alone)."""
        held = self.inputs_on(worker)
        if self.step_bytes is None:
            return [held] if held else []
        runs, run, total = [], [], 0
        for i in held:
            size = self.sizes[i] if i < len(self.sizes) else 0
            if run and total + size > self.step_bytes:
                runs.append(run)
                run, total = [], 0
            run.append(i)
            total += size
        return runs + [run] if run else runs

    def output_groups(self, worker: int) -> list[tuple[int, int]]:
        """The output partitions of ``workers[worker]`` in the runs ``(first, stop)`` that
        each batch bound for it holds: one run, or runs of about ``step_bytes`` each (by the
        input's bytes spread evenly over the output partitions)."""
        first, stop = self.outputs_of(worker)
        per_output = sum(self.sizes) / self.npartitions
        if self.step_bytes is None or stop <= first or not per_output:
            return [(first, stop)]
        count = max(1, int(self.step_bytes // per_output))
        return [(start, min(start + count, stop)) for start in range(first, stop, count)]

    @property
    def sources(self) -> list[int]:
        """The workers (indices) holding at least one input partition."""
        held = set(self.owners)
        return [s for s, address in enumerate(self.workers) if address in held]

    @property
    def destinations(self) -> list[int]:
        """The workers (indices) that receive at least one output partition."""
        runs = [self.outputs_of(d) for d in range(len(self.workers))]
        return [d for d, (first, stop) in enumerate(runs) if first < stop]


def step_setting() -> int | None:
    """``gpu-interop.shuffle.step-bytes`` from dask config: None for "auto", else the size;
    ValueError in one line for anything else."""
    import dask
    from dask.utils import parse_bytes

    value = dask.config.get(STEP_KEY, "auto")
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        size = parse_bytes(value) if isinstance(value, str) else value
    except (ValueError, TypeError):
        size = None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{STEP_KEY}={value!r} in dask config: give a size such as 1GiB, or "
                         "auto")
    return size


def exchange_setting() -> str:
    """``gpu-interop.shuffle.exchange`` from dask config, "direct" by default; ValueError in
    one line for anything else."""
    import dask

    value = dask.config.get(EXCHANGE_KEY, "direct")
    name = value.strip().lower() if isinstance(value, str) else value
    if name not in EXCHANGES:
        raise ValueError(f"{EXCHANGE_KEY}={value!r} in dask config: choose one of "
                         f"{', '.join(EXCHANGES)}")  # fmt: skip
    return name


def timeout_setting() -> float | None:
    """``gpu-interop.shuffle.timeout`` from dask config, in seconds (None for no limit);
    ValueError in one line for anything but a positive duration."""
    import dask
    from dask.utils import parse_timedelta

    value = dask.config.get(TIMEOUT_KEY, "5 minutes")
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        return None
    try:
        seconds = None if isinstance(value, bool) else parse_timedelta(value, default="s")
    except (ValueError, TypeError, KeyError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise ValueError(f"{TIMEOUT_KEY}={value!r} in dask config: give a duration such as "
                         "5 minutes or 300s, or None for no limit")  # fmt: skip
    return float(seconds)


def shares(plan: Plan) -> dict[str, int]:
    """The bytes each worker of ``plan`` holds of the input or gets of the output (the input's
    bytes spread evenly over the output partitions), whichever is more."""
    total = sum(plan.sizes)
    held = dict.fromkeys(plan.workers, 0)
    for i, owner in enumerate(plan.owners):
        held[owner] += plan.sizes[i] if i < len(plan.sizes) else 0
    for d, address in enumerate(plan.workers):
        first, stop = plan.outputs_of(d)
        held[address] = max(held[address], total * (stop - first) // plan.npartitions)
    return held


def auto_step(share: dict[str, int], memory: dict[str, int | None]) -> int | None:
    """The step for "auto": None (one step per worker) while every worker's share is at most
    :data:`ONE_STEP_PART` of its memory (or its memory is not known); else
    :data:`STEP_PART` of the smallest such worker's memory, at most :data:`STEP_MOST`."""
    over = [memory[w] for w, size in share.items()
            if memory.get(w) and size > ONE_STEP_PART * memory[w]]
    if not over:
        return None
    return max(1, min(STEP_MOST, int(min(over) * STEP_PART)))


def workers_memory(client, workers, gpu: bool) -> dict[str, int | None]:
    """Each worker's memory: its GPU's (``gpu``), as the scheduler knows it or else as the
    worker's device says, or its memory limit; None where not known."""
    if gpu and all(address in _DEVICE_MEMORY for address in workers):
        return {address: _DEVICE_MEMORY[address] for address in workers}
    info = workers_of(client)
    memory = {}
    for address in workers:
        worker = info.get(address, {})
        size = (worker.get("gpu") or {}).get("memory-total") if gpu else worker.get(
            "memory_limit")
        memory[address] = int(size) if size else None
    if gpu:
        memory.update({address: _DEVICE_MEMORY[address] for address, size in memory.items()
                       if size is None and address in _DEVICE_MEMORY})  # fmt: skip
        _DEVICE_MEMORY.update({address: size for address, size in memory.items() if size})
    unknown = [address for address, size in memory.items() if size is None]
    if gpu and unknown:
        # the scheduler has GPU figures only where distributed's NVML diagnostics run
        answers = client.run(memory_info, workers=unknown, on_error="return")
        asked = {address: int(answer[1]) for address, answer in answers.items()
                 if isinstance(answer, tuple) and answer[1] > 0}  # fmt: skip
        _DEVICE_MEMORY.update(asked)
        memory.update(asked)
    return memory


#: Each GPU worker's device memory as the scheduler or the worker said (by address: a worker
#: keeps its device), so that it is asked once, not at every shuffle.
_DEVICE_MEMORY: dict[str, int] = {}


def _step(client, plan: Plan, setting: int | None, gpu: bool) -> int | None:
    if setting is not None:
        return setting
    return auto_step(shares(plan), workers_memory(client, plan.workers, gpu))

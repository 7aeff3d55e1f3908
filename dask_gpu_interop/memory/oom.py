"""A task that ran the GPU out of memory: tell the user which pool, how full, who took most.

Every framework words its out-of-memory error differently (RMM's ``MemoryError:
std::bad_alloc: out_of_memory``, CuPy's and PyTorch's ``OutOfMemoryError``, Numba's
``CUDA_ERROR_OUT_OF_MEMORY``, XGBoost's ``cudaErrorMemoryAllocation``, JAX's
``RESOURCE_EXHAUSTED``), and none of them knows the worker's pool or the other tasks. The
plugin recognizes them when a task errs and replaces the error the client gets with
:class:`GPUOutOfMemoryError`, whose message names the pool, what was in use, the largest
tasks by peak and what to change for that task (the original error's text is kept in it):
smaller partitions where the task alone is larger than the pool or device, releasing,
streaming or spilling the results the worker holds where they take most of the memory, and
a larger pool or managed memory where the task fits but not beside the rest (:func:`cause`).
"""

from __future__ import annotations

import threading
import time

from dask.utils import format_bytes

# Said by device (never host) out-of-memory errors of the frameworks we bind.
DEVICE_OOM_TEXT = (
    "out_of_memory",  # RMM
    "CUDA out of memory",  # PyTorch
    "cudaErrorMemoryAllocation",  # XGBoost, CUDA runtime
    "CUDA_ERROR_OUT_OF_MEMORY",  # Numba, CUDA driver
    "RESOURCE_EXHAUSTED: Out of memory",  # JAX
    "Out of memory allocating",  # CuPy's own pool
)


class GPUOutOfMemoryError(MemoryError):
    """A task ran its worker's GPU out of memory; the message says what to change.

    A ``MemoryError``. The plugin recognizes the out-of-memory errors of RMM, CuPy, PyTorch,
    Numba, XGBoost and JAX when a task fails on a worker with statistics on, and puts this
    error in their place, so that the client's ``future.result()`` (or ``compute()``) raises
    it; the worker logs the same line. The message names the task, the refused request (when
    RMM saw it), the pool's size and maximum, what was in use, the largest tasks by peak on
    that worker, what to change for that task (smaller partitions for a task larger than the
    pool or device; releasing, streaming or spilling results where the worker's held results
    fill it; a larger pool or managed memory otherwise), and ends with the original error's
    first line.

    See Also
    --------
    memory_report : every worker's task prefixes by peak device memory.

    Examples
    --------
    >>> from dask_gpu_interop import GPUOutOfMemoryError
    >>> try:
    ...     frame.compute()
    ... except GPUOutOfMemoryError as err:
    ...     print(err)  # GPU out of memory in task 'huge-0' on tcp://...: the RMM pool of ...
    """


def is_device_oom(exc: BaseException, recent_failure: bool = False) -> bool:
    """Whether ``exc`` is a device out-of-memory error (``recent_failure``: RMM just refused
    an allocation in this process, so a bare MemoryError is the device's)."""
    if isinstance(exc, GPUOutOfMemoryError):
        return False  # already explained
    text = str(exc)
    if any(marker in text for marker in DEVICE_OOM_TEXT):
        return True
    if type(exc).__name__ == "OutOfMemoryError":  # CuPy's and PyTorch's classes
        return True
    return recent_failure and isinstance(exc, MemoryError)


class FailureLog:
    """What RMM's failure-callback adaptor saw: the last allocation the resource refused.

    ``in_use``: a callable giving the bytes allocated through the resource, read at the
    failure (by the time the task's error is handled, its buffers are freed).
    """

    def __init__(self, in_use=None):
        self.in_use = in_use
        self.count = 0
        self.last: tuple[float, int, int | None] | None = None  # (time, asked, in use)
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> bool:
        try:
            used = self.in_use() if self.in_use is not None else None
        except Exception:
            used = None
        with self._lock:
            self.count += 1
            self.last = (time.monotonic(), int(nbytes), used)
        return False  # do not retry: let the allocation fail

    def since(self, moment: float) -> tuple[int, int | None] | None:
        """(bytes asked, bytes in use) of the last refused allocation after ``moment``."""
        with self._lock:
            if self.last is not None and self.last[0] >= moment:
                return self.last[1], self.last[2]
            return None


def explain(
    exc: BaseException,
    *,
    key: str,
    worker: str,
    mode: str,
    pool_bytes: int | None,
    maximum_bytes: int | None,
    in_use_bytes: int | None,
    device_total: int | None,
    asked_bytes: int | None,
    largest: list[tuple[str, int]],
    overlapped: bool,
    task_bytes: int | None = None,
    stored_bytes: int | None = None,
    spilling: bool = False,
) -> str:
    """The one-line message for a task that ran out of device memory.

    ``task_bytes``: the most the failed task allocated itself (with the tasks beside it when
    ``overlapped``); ``stored_bytes``: the results the worker keeps on the device, where its
    data store says; ``spilling``: cuDF's spilling is on (and could not make room). With them
    the advice fits the cause (see :func:`cause`)."""
    where = f"GPU out of memory in task {key!r} on {worker}"
    if asked_bytes:
        where += f" (a request for {format_bytes(asked_bytes)} was refused)"
    if mode == "async":
        pool = "the CUDA async pool"
    elif pool_bytes is not None:
        pool = f"the {'managed ' if mode == 'managed' else ''}RMM pool of {format_bytes(pool_bytes)}"
        if maximum_bytes is not None:
            pool += f" (maximum {format_bytes(maximum_bytes)})"
    else:
        pool = "the device" if mode == "pool" else "managed memory"
    used = []
    if in_use_bytes is not None:
        used.append(f"{format_bytes(in_use_bytes)} in use")
    if device_total is not None:
        used.append(f"{format_bytes(device_total)} on the device")
    state = f"{pool}: {', '.join(used)}" if used else pool
    tasks = ""
    if largest:
        ranked = ", ".join(f"{prefix} {format_bytes(peak)}" for prefix, peak in largest)
        tasks = f"; largest tasks by peak here: {ranked}"
        if overlapped:
            tasks += " (tasks ran side by side, so these peaks overlap)"
    found = cause(mode=mode, maximum_bytes=maximum_bytes, device_total=device_total,
                  in_use_bytes=in_use_bytes, asked_bytes=asked_bytes, task_bytes=task_bytes,
                  stored_bytes=stored_bytes, overlapped=overlapped)
    advice = _advice(found, mode=mode, maximum_bytes=maximum_bytes, device_total=device_total,
                     in_use_bytes=in_use_bytes, asked_bytes=asked_bytes, task_bytes=task_bytes,
                     stored_bytes=stored_bytes, overlapped=overlapped, spilling=spilling)
    return f"{where}: {state}{tasks}. {advice} [{type(exc).__name__}: {_first_line(exc)}]"


TASK, HELD, PRESSURE = "task", "held", "pressure"


def _limit(maximum_bytes: int | None, device_total: int | None) -> int | None:
    """The most a task could have: the pool's maximum, else the device."""
    if maximum_bytes and device_total:
        return min(maximum_bytes, device_total)
    return maximum_bytes or device_total


def _held(in_use_bytes, task_bytes, stored_bytes) -> int | None:
    """Bytes in use that are not the failed task's: results kept on the worker (and the
    tasks beside it); None when unknown."""
    held = None
    if in_use_bytes is not None and task_bytes is not None:
        held = max(0, in_use_bytes - task_bytes)
    if stored_bytes:
        held = max(held or 0, stored_bytes)
    return held


def cause(*, mode: str, maximum_bytes: int | None, device_total: int | None,
          in_use_bytes: int | None, asked_bytes: int | None, task_bytes: int | None,
          stored_bytes: int | None, overlapped: bool) -> str:
    """Why a task ran out of device memory, from what the plugin saw:

    - ``"task"``: the task alone asks for more than the pool or device can ever give (its
      refused request, plus what it held, when it ran alone): only smaller pieces of work
      help;
    - ``"held"``: most of the memory in use is not the task's but results the worker keeps
      (or other tasks): releasing, spilling or streaming them, or more GPUs, help;
    - ``"pressure"``: the task fits the device but not beside what is in use, or the numbers
      are not known: a larger pool, fewer tasks at once, or oversubscribing the device with
      managed memory help. Managed memory is always this: it oversubscribes the device
      already, and what ran out is the host memory behind it.
    """
    if mode == "managed":
        return PRESSURE
    limit = _limit(maximum_bytes, device_total)
    if limit and asked_bytes:
        need = asked_bytes + (0 if overlapped else task_bytes or 0)
        if need > limit:
            return TASK
    held = _held(in_use_bytes, task_bytes, stored_bytes)
    if held is not None and in_use_bytes and held * 2 >= in_use_bytes:
        return HELD
    return PRESSURE


def _advice(found: str, *, mode: str, maximum_bytes: int | None, device_total: int | None,
            in_use_bytes: int | None, asked_bytes: int | None, task_bytes: int | None,
            stored_bytes: int | None, overlapped: bool, spilling: bool = False) -> str:
    smaller = "or split the work into smaller partitions"
    raise_maximum = (maximum_bytes is not None and device_total is not None
                     and maximum_bytes < device_total)
    if found == TASK:
        need = asked_bytes + (0 if overlapped else task_bytes or 0)
        limit = _limit(maximum_bytes, device_total)
        text = (f"This task alone needs more than the {format_bytes(limit)} "
                f"{'its pool may grow to' if raise_maximum else 'the device has'} (at least "
                f"{format_bytes(need)}): split the work into smaller partitions")
        if raise_maximum:
            text += ", or raise maximum_pool_size (--gpu-maximum-pool-size)"
        return text + "."
    if found == HELD:
        held = _held(in_use_bytes, task_bytes, stored_bytes)
        mine = f", this task {format_bytes(task_bytes)}" if task_bytes is not None else ""
        whose = "results this worker keeps" + (
            " and the tasks beside it" if overlapped and not stored_bytes else "")
        spill = ("cuDF's spilling is on and could not move them (frames whose device memory "
                 "was handed to another library stay on the device), " if spilling else
                 "let the worker spill them to host memory (spill=True, --gpu-spill), ")
        return (f"Most of it is not this task's: {format_bytes(held)} held by {whose}{mine}. "
                "Release the results you no longer need, write them out as they are made "
                f"instead of persisting them, {spill}or spread the data over more GPUs.")
    at_once = " run fewer tasks at once per GPU," if overlapped else ""
    if mode == "managed":
        return f"Managed memory already oversubscribes the device: free host memory {smaller}."
    if mode == "async":
        cap = "raise maximum_pool_size, " if maximum_bytes is not None else ""
        return (f"Free what the workers hold,{at_once} {cap}{smaller} (managed=True "
                "oversubscribes the device, slower).")
    if maximum_bytes is not None:
        return (f"Raise maximum_pool_size (--gpu-maximum-pool-size),{at_once} use managed=True "
                f"to oversubscribe the device (slower), {smaller}.")
    return (f"Use managed=True (--gpu-managed) to oversubscribe the device (slower),{at_once} "
            f"{smaller}.")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 200 else line[:197] + "..."

"""When each worker of a cluster started, step by step, so that a cluster's start can be
accounted for: its process, its preloads, its GPU memory, its joining the scheduler.

    client = Client(cluster)                       # the cluster started at `since`
    for start in dask_gpu_interop.worker_starts(client, since=since):
        print(start)  # tcp://127.0.0.1:40347: process 0.38 s, preloads 1.52 s, ...

A worker marks its own steps (:func:`mark`): the library's preload as the worker runs it
(``preloads``: the process has started Python, imported distributed and built the worker).
The moment its :class:`GPUMemoryPlugin` had set the memory up (``memory``: RMM imported, the
CUDA context made, the pool reserved; a dask-cuda worker's cuDF may still be importing, in the
background) is the memory state's own record. The process's own start comes from the
operating system, and the moment the scheduler added the worker from the scheduler's events.
A step a worker did not take (no preload, no plugin, no GPU) is left out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: The worker's attribute holding its marks: ``{step: seconds since the epoch}``.
MARKS = "_gpu_interop_start_marks"
#: The steps, in the order a worker takes them.
STEPS = ("process", "preloads", "memory", "joined")


def mark(worker, step: str) -> None:
    """On a worker: ``step`` taken now (the first time only)."""
    marks = getattr(worker, MARKS, None)
    if marks is None:
        marks = {}
        try:
            setattr(worker, MARKS, marks)
        except AttributeError:  # not an object that takes attributes: nothing to keep
            return
    marks.setdefault(step, time.time())


def _marks(client_pid: int, dask_worker=None) -> dict:
    """On a worker: its marks, with its process's start where the process is not the
    client's (``client_pid``)."""
    import os

    from ..memory import state

    marks = dict(getattr(dask_worker, MARKS, None) or {})
    if os.getpid() != client_pid:
        marks["process"] = process_started()
    memory = state.active()
    if memory is not None and memory.installed_at:
        marks.setdefault("memory", memory.installed_at)
    return marks


def process_started() -> float:
    """When this process began, in seconds since the epoch, to the kernel's clock tick: its
    age from the kernel's own count since boot (``psutil``'s creation time adds the boot
    time, which the kernel gives in whole seconds, so it can be up to a second off)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command's name
        ticks = int(fields[19])  # the 22nd field, "starttime": clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        import psutil

        return psutil.Process().create_time()


@dataclass(frozen=True)
class WorkerStart:
    """When one worker took each step of its start, in seconds from ``since`` (as given to
    :func:`worker_starts`), None for a step it did not take. ``str(start)`` says it in one
    line.

    Parameters
    ----------
    address : str
        The worker.
    process : float or None
        Its process began (None for a worker in the client's process).
    preloads : float or None
        It ran the library's preload: Python started, distributed imported, the worker built.
    memory : float or None
        The :class:`GPUMemoryPlugin` had set its memory up: RMM imported, the CUDA context
        made, the pool reserved.
    joined : float or None
        The scheduler added it.

    Examples
    --------
    >>> from dask_gpu_interop import WorkerStart
    >>> print(WorkerStart("tcp://127.0.0.1:4000", process=0.4, preloads=1.5, memory=2.9,
    ...                   joined=3.0))
    tcp://127.0.0.1:4000: process 0.40 s, preloads 1.50 s, memory 2.90 s, joined 3.00 s
    """

    address: str
    process: float | None = None
    preloads: float | None = None
    memory: float | None = None
    joined: float | None = None

    def steps(self) -> dict[str, float]:
        """The steps it took, in order: ``{step: seconds}``."""
        return {step: getattr(self, step) for step in STEPS if getattr(self, step) is not None}

    def __str__(self) -> str:
        steps = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in self.steps().items())
        return f"{self.address}: {steps or 'no step recorded'}"


def worker_starts(client=None, since: float | None = None) -> list[WorkerStart]:
    """When each worker of the cluster took each step of its start (see
    :class:`WorkerStart`), the last to join first.

    Parameters
    ----------
    client : distributed.Client, optional
        By default the current client.
    since : float, optional
        Seconds since the epoch (``time.time()``) that the steps are counted from, such as
        when the cluster's start began; by default the epoch itself.

    Returns
    -------
    list of WorkerStart
        One per worker, by the time it joined, latest first.

    Examples
    --------
    >>> import time
    >>> import dask_gpu_interop
    >>> since = time.time()  # doctest: +SKIP
    >>> with dask_gpu_interop.cluster_client(device="gpu", n_workers=2) as (client, _):  # doctest: +SKIP
    ...     print(dask_gpu_interop.worker_starts(client, since=since)[0])
    tcp://127.0.0.1:40347: process 0.38 s, preloads 1.52 s, memory 2.61 s, joined 2.70 s
    """
    import os

    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
        raise TypeError(f"worker_starts(since={since!r}): give seconds since the epoch, as "
                        "time.time() gives them when the cluster's start begins")
    if client is None:
        from distributed import get_client

        client = get_client()
    origin = since or 0.0
    marks = client.run(_marks, os.getpid(), on_error="return")
    joined = _joined(client)
    starts = []
    for address, found in marks.items():
        found = dict(found) if isinstance(found, dict) else {}
        if address in joined:
            found["joined"] = joined[address]
        starts.append(WorkerStart(address, **{step: found[step] - origin
                                              for step in STEPS if step in found}))
    return sorted(starts, key=lambda s: (s.joined is not None, s.joined or 0.0), reverse=True)


def _joined(client) -> dict[str, float]:
    """When the scheduler last added each worker (its "add-worker" events), by address."""
    try:
        events = client.get_events("all")
    except Exception:  # a scheduler that does not say: the step is left out
        return {}
    joined: dict[str, float] = {}
    for when, event in events:
        if isinstance(event, dict) and event.get("action") == "add-worker":
            address = event.get("worker")
            joined[address] = max(when, joined.get(address, when))
    return joined

"""Where one chunk's time and device memory go, stage by stage.

The ETL marks its stages with ``stage("name")``. Outside a :class:`Profile` that costs one
context-variable lookup; inside one, each stage is timed (after waiting for the device, so
that queued GPU work is charged to the stage that queued it) and, when RMM statistics are on,
the most device memory in use during the stage is recorded. Stages nest: ``read/parse``.

A profile is entered on one thread (``with Profile(device):``), or started for the whole
process with :func:`start_process_profile`: that is how a benchmark profiles the ETL tasks that
a Dask worker runs on its own threads (``client.run(start_process_profile, "gpu")``, then
``client.run(stop_process_profile)``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

_profile: ContextVar[Profile | None] = ContextVar("mortgage_stage_profile", default=None)
_process_profile: Profile | None = None  # every thread's, when no thread has its own


@dataclass
class StageRecord:
    seconds: float = 0.0
    calls: int = 0
    peak_bytes: int | None = None  # most device bytes in use during the stage (all owners)


class Profile:
    """Stage records of the code run inside ``with profile:`` on this thread."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.records: dict[str, StageRecord] = {}
        self._local = threading.local()  # each thread's stack of open stages
        self._lock = threading.Lock()

    def __enter__(self) -> Profile:
        self._token = _profile.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _profile.reset(self._token)

    def _synchronize(self) -> None:
        if self.device == "gpu":
            import cupy

            cupy.cuda.runtime.deviceSynchronize()

    @property
    def _path(self) -> list[str]:
        path = getattr(self._local, "path", None)
        if path is None:
            path = self._local.path = []
        return path

    @contextmanager
    def stage(self, name: str):
        self._path.append(name)
        key = "/".join(self._path)
        with self._lock:
            record = self.records.setdefault(key, StageRecord())  # in the order entered
        self._synchronize()
        before = _push_statistics() if self.device == "gpu" else None
        started = time.perf_counter()
        try:
            yield
        finally:
            self._synchronize()
            seconds = time.perf_counter() - started
            scope = _pop_statistics() if before is not None else None
            self._path.pop()
            with self._lock:
                record.seconds += seconds
                record.calls += 1
                if scope is not None:
                    peak = before.current_bytes + scope.peak_bytes
                    record.peak_bytes = max(record.peak_bytes or 0, peak)

    def as_dict(self) -> dict[str, dict]:
        with self._lock:
            return {name: {"seconds": r.seconds, "calls": r.calls, "peak_bytes": r.peak_bytes}
                    for name, r in self.records.items()}  # fmt: skip


def _push_statistics():
    import rmm.statistics

    return rmm.statistics.push_statistics()  # None when statistics are off


def _pop_statistics():
    import rmm.statistics

    return rmm.statistics.pop_statistics()


@contextmanager
def stage(name: str):
    """Mark a stage of the ETL (free unless a :class:`Profile` is active on this thread)."""
    profile = _profile.get() or _process_profile
    if profile is None:
        yield
        return
    with profile.stage(name):
        yield


def start_process_profile(device: str = "cpu") -> bool:
    """Profile every thread of this process from now on (threads with their own profile keep
    theirs); replaces a process profile already running."""
    global _process_profile
    _process_profile = Profile(device)
    return True


def stop_process_profile() -> dict[str, dict]:
    """Stop the process profile; its records as plain data (empty when none was running)."""
    global _process_profile
    profile, _process_profile = _process_profile, None
    return {} if profile is None else profile.as_dict()

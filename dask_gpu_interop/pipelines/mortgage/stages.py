"""Where one chunk's time and device memory go, stage by stage.

The ETL marks its stages with ``stage("name")``. Outside a :class:`Profile` that costs one
context-variable lookup; inside one, each stage is timed (after waiting for the device, so
that queued GPU work is charged to the stage that queued it) and, when RMM statistics are on,
the most device memory in use during the stage is recorded. Stages nest: ``read/parse``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

_profile: ContextVar[Profile | None] = ContextVar("mortgage_stage_profile", default=None)


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
        self._path: list[str] = []

    def __enter__(self) -> Profile:
        self._token = _profile.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _profile.reset(self._token)

    def _synchronize(self) -> None:
        if self.device == "gpu":
            import cupy

            cupy.cuda.runtime.deviceSynchronize()

    @contextmanager
    def stage(self, name: str):
        self._path.append(name)
        key = "/".join(self._path)
        record = self.records.setdefault(key, StageRecord())  # listed in the order entered
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
            record.seconds += seconds
            record.calls += 1
            if scope is not None:
                peak = before.current_bytes + scope.peak_bytes
                record.peak_bytes = max(record.peak_bytes or 0, peak)


def _push_statistics():
    import rmm.statistics

    return rmm.statistics.push_statistics()  # None when statistics are off


def _pop_statistics():
    import rmm.statistics

    return rmm.statistics.pop_statistics()


@contextmanager
def stage(name: str):
    """Mark a stage of the ETL (free unless a :class:`Profile` is active on this thread)."""
    profile = _profile.get()
    if profile is None:
        yield
        return
    with profile.stage(name):
        yield

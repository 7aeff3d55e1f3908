"""Device memory per task: the bytes each task allocated at peak and what it left allocated.

The worker's state machine says when a task starts and stops executing (``transition``). RMM's
statistics adaptor keeps a stack of counters: a pushed frame starts at zero and its peak is the
most it rose above that. Between two events, one frame is pushed; at each event it is popped
and its rise and net added to every task then running. A task's peak is therefore exact when
it ran alone and, when other tasks ran beside it on the same GPU, includes theirs: such a
record is marked ``overlapped`` rather than pretending to be its own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field

from dask.utils import key_split

RUNNING = ("executing", "long-running")


@dataclass
class TaskRecord:
    """One finished task's device memory."""

    key: str
    prefix: str
    peak_bytes: int  # most bytes allocated above what was allocated when it started
    left_bytes: int  # allocated at the end minus at the start: its result, or a leak
    seconds: float
    overlapped: bool  # another task ran on this GPU meanwhile: the figures include its bytes
    finish: str  # the state it went to: memory, error, ...


@dataclass
class PrefixStats:
    """The tasks of one prefix (``key_split`` of the key, as the dashboard groups them)."""

    count: int = 0
    overlapped: int = 0
    errors: int = 0
    peak_bytes_max: int = 0
    peak_bytes_total: int = 0
    left_bytes_total: int = 0
    seconds_total: float = 0.0
    largest_key: str = ""

    def add(self, record: TaskRecord) -> None:
        self.count += 1
        self.overlapped += record.overlapped
        self.errors += record.finish == "error"
        if record.peak_bytes >= self.peak_bytes_max:
            self.peak_bytes_max = record.peak_bytes
            self.largest_key = record.key
        self.peak_bytes_total += record.peak_bytes
        self.left_bytes_total += record.left_bytes
        self.seconds_total += record.seconds


@dataclass
class _Run:
    started: float
    offset: int = 0  # net bytes allocated since the task started
    peak: int = 0
    overlapped: bool = False


class RMMCounters:
    """Push and pop a statistics adaptor's counters: what ``TaskMemory`` needs from RMM."""

    def __init__(self, adaptor):
        self._adaptor = adaptor

    def push(self) -> None:
        self._adaptor.push_counters()

    def pop(self) -> tuple[int, int]:
        """(net bytes, peak bytes) since the matching push."""
        stats = self._adaptor.pop_counters()
        return int(stats.current_bytes), int(stats.peak_bytes)


@dataclass
class TaskMemory:
    """Per-task device memory of one worker, fed by its task transitions.

    ``counters``: ``push()`` and ``pop() -> (net, peak)``, e.g. :class:`RMMCounters`.
    """

    counters: object
    prefixes: dict = field(default_factory=dict)  # prefix -> PrefixStats
    _running: dict = field(default_factory=dict)  # key -> _Run
    _pushed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def transition(self, key, start: str, finish: str) -> TaskRecord | None:
        """A worker transition; returns the record when a task stopped running."""
        if start not in RUNNING and finish in RUNNING:
            self.started(key)
        elif start in RUNNING and finish not in RUNNING:
            return self.finished(key, finish)
        return None

    def started(self, key) -> None:
        with self._lock:
            self._close_segment()
            run = _Run(started=time.perf_counter())
            if self._running:
                run.overlapped = True
                for other in self._running.values():
                    other.overlapped = True
            self._running[key] = run
            self._open_segment()

    def finished(self, key, finish: str = "memory") -> TaskRecord | None:
        with self._lock:
            if key not in self._running:
                return None  # started before the plugin was set up
            self._close_segment()
            run = self._running.pop(key)
            self._open_segment()
            record = TaskRecord(
                key=str(key), prefix=key_split(key), peak_bytes=run.peak, left_bytes=run.offset,
                seconds=time.perf_counter() - run.started, overlapped=run.overlapped,
                finish=finish,
            )
            self.prefixes.setdefault(record.prefix, PrefixStats()).add(record)
            return record

    def running(self) -> dict:
        """key -> peak bytes so far, of the tasks running now."""
        with self._lock:
            self._close_segment()
            self._open_segment()
            return {str(key): run.peak for key, run in self._running.items()}

    def largest(self, n: int = 3) -> list[tuple[str, int]]:
        """The ``n`` prefixes with the highest peak, (prefix, bytes), highest first; prefixes
        that allocated nothing are left out."""
        with self._lock:
            ranked = sorted(self.prefixes.items(), key=lambda item: -item[1].peak_bytes_max)
            return [(prefix, stats.peak_bytes_max) for prefix, stats in ranked
                    if stats.peak_bytes_max > 0][:n]

    def snapshot(self) -> dict:
        """Plain data for the memory report: per prefix, and the tasks running now."""
        running = self.running()
        with self._lock:
            return {
                "prefixes": {prefix: asdict(stats) for prefix, stats in self.prefixes.items()},
                "running": running,
            }

    def close(self) -> None:
        """Pop the open frame, so the adaptor's own counters are whole again."""
        with self._lock:
            self._close_segment()
            self._running.clear()

    def _close_segment(self) -> None:
        if not self._pushed:
            return
        net, peak = self.counters.pop()
        self._pushed = False
        for run in self._running.values():
            run.peak = max(run.peak, run.offset + peak)
            run.offset += net

    def _open_segment(self) -> None:
        if self._running:
            self.counters.push()
            self._pushed = True

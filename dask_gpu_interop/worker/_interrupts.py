"""What a local cluster's worker processes leave to the process that started them: a
terminal's Ctrl-C, and the scheduler's going away at the cluster's end.

A terminal sends Ctrl-C (SIGINT) to every process of the job in the foreground: each worker
process of a local cluster would stop on it with tracebacks of its own, while the process that
started them stops its work and closes the cluster anyway. The worker processes of the local
clusters this library starts load this module as a preload: each then ignores SIGINT from its
first moments (a Ctrl-C in the second it takes to start still reaches it).

A local cluster's scheduler lives in the process that started it, and closes as the cluster
does: a worker's heartbeat sent in that moment fails, and distributed logs the failure with a
traceback, though the worker is being closed as it should be. In these worker processes that
one message is left out (the process that started the cluster says what went wrong, if
anything did). A worker in the client's own process is left as it is.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading

PRELOAD = __name__
#: The message distributed's worker logs when a heartbeat cannot reach the scheduler.
HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


class _HeartbeatAtTheEnd(logging.Filter):
    """Leaves out the failed heartbeat's record (its message and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(HEARTBEAT_FAILED)


def dask_setup(worker) -> None:
    """In a worker process that a local cluster started: ignore SIGINT, and leave out the
    failed heartbeat's traceback."""
    from . import start as worker_start

    worker_start.mark(worker, "preloads")
    if multiprocessing.parent_process() is None:  # the client's own process
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _HeartbeatAtTheEnd) for f in logger.filters):
        logger.addFilter(_HeartbeatAtTheEnd())

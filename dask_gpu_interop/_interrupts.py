"""A terminal's Ctrl-C is for the process that started a local cluster, not for its workers.

A terminal sends Ctrl-C (SIGINT) to every process of the job in the foreground: each worker
process of a local cluster would stop on it with tracebacks of its own, while the process that
started them stops its work and closes the cluster anyway. The worker processes of the local
clusters this library starts load this module as a preload: each then ignores SIGINT from its
first moments (a Ctrl-C in the second it takes to start still reaches it). A worker in the
client's own process is left as it is.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading

PRELOAD = __name__


def dask_setup(worker) -> None:
    """Ignore SIGINT in a worker process that a local cluster started."""
    from . import worker_start

    worker_start.mark(worker, "preloads")
    if (multiprocessing.parent_process() is not None
            and threading.current_thread() is threading.main_thread()):
        signal.signal(signal.SIGINT, signal.SIG_IGN)

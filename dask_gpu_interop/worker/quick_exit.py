"""A nanny's worker process ends as soon as its worker has closed.

When a cluster closes, each nanny waits for its worker process to end. Once the worker has
closed (tasks finished, data released, its directory removed, the nanny and scheduler told),
what is left is Python's own teardown: every loaded module's finalizers, and the GPU stack's
memory pools and CUDA contexts torn down one object at a time, which on a GPU worker takes
longer than the close itself. The CUDA driver frees all of it when the process ends anyway.

This module is a worker preload (the library's local clusters give it to every worker
process, and :mod:`dask_gpu_interop.preload` calls it): as the worker closes,
:func:`end_process_at_exit` arranges that when the interpreter then starts its teardown, the
process flushes its logs and output and ends, with status 0. Only in a process a nanny started, and only after its worker closed: a worker in
the client's process, or one started without a nanny, is left alone.
``gpu-interop.worker.quick-exit: false`` in dask config keeps Python's full teardown.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import sys

#: The dask config key that turns the quick end off.
CONFIG_KEY = "gpu-interop.worker.quick-exit"
#: The module's name, for a cluster's ``preload`` list.
PRELOAD = __name__

_registered = False


def applies(worker) -> bool:
    """Whether ``worker``'s process ends quickly after it closes: a nanny started the process,
    and dask config does not say otherwise."""
    from .._defaults import flag

    return (flag(CONFIG_KEY, True) and getattr(worker, "nanny", None) is not None
            and multiprocessing.parent_process() is not None)  # fmt: skip


def end_process_at_exit(worker) -> bool:
    """As ``worker`` closes: end its process at the start of the interpreter's teardown (once,
    however many preloads ask). Returns whether it will."""
    global _registered
    if not applies(worker):
        return False
    if not _registered:
        # Registered last, so it runs first among the exit handlers: those registered before
        # it (the GPU libraries', imported since the process started) are what it skips.
        atexit.register(_end_now)
        _registered = True
    return True


def _end_now() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed: nothing more to say
            pass
    os._exit(0)


def dask_teardown(worker) -> None:
    """The preload's hook, run as the worker closes."""
    end_process_at_exit(worker)

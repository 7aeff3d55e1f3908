"""The UCX setup of a process that starts a local GPU cluster over UCX, begun in the background.

A scheduler that listens over UCX first sets UCX up in its process: distributed-ucxx imports
UCX, makes a CUDA context on the first visible GPU and builds UCX's context and worker, which
takes a second or more, and the nannies start the worker processes only after it. :func:`begin` does the
same in a thread of its own, with the configuration dask-cuda's ``LocalCUDACluster`` gives it,
so that it overlaps what the program does before its cluster starts (importing dask-cuda,
reading its input); :func:`finish` waits for it before the cluster starts.
:func:`~dask_gpu_interop.local_cluster` begins it as it starts a GPU cluster over UCX, and
:func:`~dask_gpu_interop.prepare_local_cluster` earlier still.

The setup is distributed-ucxx's own (``init_once``), which the scheduler's then finds done.
Where it fails, nothing of it is kept: the scheduler's setup runs as it would have, and says
what is wrong.
"""

from __future__ import annotations

import importlib.util
import logging
import threading

logger = logging.getLogger(__name__)

#: What the setup needs: distributed's UCX comms, and dask-cuda's configuration of them.
NEEDED = ("distributed_ucxx", "dask_cuda")

_thread: threading.Thread | None = None
_error: BaseException | None = None


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def begin() -> bool:
    """Begin this process's UCX setup in a thread (once per process). Returns whether it was
    begun (now or before); False where distributed-ucxx or dask-cuda is not installed."""
    global _thread
    if _thread is not None:
        return True
    if not all(_installed(name) for name in NEEDED):
        return False
    # not a daemon: a program that ends meanwhile waits for it, rather than tearing UCX and
    # CUDA down under it
    _thread = threading.Thread(target=_set_up, name="dask-gpu-interop-ucx-setup")
    _thread.start()
    return True


def _set_up() -> None:
    """distributed-ucxx's setup with dask-cuda's configuration (what ``LocalCUDACluster``
    sets before its scheduler starts); a failure is kept for :func:`finish`, and undone."""
    global _error
    comm = None
    try:
        import dask.config
        import distributed_ucxx.ucxx as comm
        from dask_cuda.utils import get_ucx_config

        dask.config.set({"distributed-ucxx": get_ucx_config()})
        comm.init_once()
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the scheduler's setup says it
        _error = exc
        if comm is not None:
            comm.ucxx = None  # not set up: the scheduler's setup runs in full


def finish() -> BaseException | None:
    """Wait for the setup that :func:`begin` began (nothing to wait for where none was).
    Returns its error, if it failed (logged; the scheduler's own setup then runs)."""
    if _thread is None:
        return None
    _thread.join()
    if _error is not None:
        logger.debug("the UCX setup begun early failed (%s: %s); the scheduler sets UCX up",
                     type(_error).__name__, _error)
    return _error

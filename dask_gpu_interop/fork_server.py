"""Local GPU worker processes forked from a server that has the GPU libraries imported.

distributed starts each worker process of a local cluster as a new interpreter: every one
imports distributed, dask-cuda, RMM, CuPy, Numba and cuDF before its worker registers, and
the cluster waits for the slowest. Python's ``forkserver`` start method runs one server
process that imports them once; each worker process is then a fork of it, its modules already
loaded. The library starts that server as a local cluster of GPU worker processes over UCX
starts, before the cluster's own imports and scheduler, so that the server's imports overlap
them; a program that will start such a cluster can start the server earlier still, as soon as
it knows (:func:`~dask_gpu_interop.prepare_local_cluster`; the examples' commands call it once
their input is checked), so that the server's imports overlap the program's own work. Over
TCP, where a worker process starts faster, the forks gained nothing that held from one run to
the next (benchmarks/README.md), so workers are spawned there unless the setting says
otherwise.

The server touches no GPU, so that every worker forked from it initializes CUDA itself, on
the device its nanny gives it: cuDF is imported with ``RAPIDS_NO_INITIALIZE=1`` (cuDF's check
of the GPU and driver at import is left out, in the workers too), and none of the modules
creates a CUDA context as it is imported. The server's environment is what the workers need
as they import: this process's, with the GPU workers' settings (:mod:`.gpu_workers`, which the
libraries read at import) and distributed's ``distributed.nanny.pre-spawn-environ`` (the hash
seed, the thread counts of the numeric libraries), as they are when the server starts.

``gpu-interop.worker.fork-server`` in dask config: ``ucx`` (the default) for UCX clusters,
``true`` for every local cluster of GPU worker processes, ``false`` for none (distributed's
way: each worker a new interpreter). Linux only. A worker process that its nanny restarts
later is started the way distributed's config says (a new interpreter by default).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

logger = logging.getLogger(__name__)

#: The dask config key that says where the fork server is used: "ucx", true or false.
CONFIG_KEY = "gpu-interop.worker.fork-server"
#: Its value that uses the server for UCX clusters only (the default).
UCX_ONLY = "ucx"
#: What the server imports (a module that is not installed is left out).
MODULES = ("distributed", "numpy", "pandas", "dask.dataframe", "dask_cuda", "rmm", "cupy",
           "numba", "cudf", "dask_cudf", "dask_gpu_interop", "dask_gpu_interop.preload")
#: The server's environment variable that names :data:`MODULES` for it (removed there once
#: read, so that the workers do not inherit it).
IMPORTS_VARIABLE = "DASK_GPU_INTEROP_FORK_SERVER_IMPORTS"
#: What the server is told to import: a module that imports each of :data:`MODULES` on its own,
#: so that one failing with any error (not only an ImportError) leaves the server up.
PRELOAD = "dask_gpu_interop._fork_server_imports"
#: distributed's config key of a worker process's start method.
METHOD_KEY = "distributed.worker.multiprocessing-method"

_started = False


def wanted(protocol: str) -> bool:
    """Whether a local cluster's GPU worker processes over ``protocol`` are to be forked from
    the server: dask config says so for that protocol (by default for "ucx" only) and the
    platform has the ``forkserver`` start method (Linux)."""
    import dask.config

    from ._defaults import flag

    if not sys.platform.startswith("linux"):
        return False
    value = dask.config.get(CONFIG_KEY, default=UCX_ONLY)
    if isinstance(value, str) and value.strip().lower() == UCX_ONLY:
        return protocol == "ucx"
    return flag(CONFIG_KEY, False)


def server_environ() -> dict[str, str]:
    """The variables the server starts with, beside this process's environment: the GPU
    workers' settings, distributed's pre-spawn variables (a variable set in this process's
    environment wins over both), ``RAPIDS_NO_INITIALIZE`` and the modules to import."""
    import dask.config

    from . import gpu_workers

    pre_spawn = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    chosen = {**gpu_workers.settings(), **{k: str(v) for k, v in pre_spawn.items()}}
    if chosen.get("PYTHONHASHSEED") in (None, "0"):
        chosen["PYTHONHASHSEED"] = "6640"  # distributed's own seed for its worker processes
    out = {k: v for k, v in chosen.items() if k not in os.environ}
    out["RAPIDS_NO_INITIALIZE"] = "1"
    out[IMPORTS_VARIABLE] = ",".join(MODULES)
    return out


def start(protocol: str = "ucx") -> bool:
    """Start the fork server now, in the background (once per process), where it is
    :func:`wanted` for a cluster over ``protocol``; returns whether that cluster's GPU worker
    processes will be forked from it."""
    global _started
    if not wanted(protocol):
        return False
    if _started:
        return True
    import multiprocessing
    from multiprocessing import forkserver

    with _environ(server_environ()):
        multiprocessing.get_context("forkserver").set_forkserver_preload([PRELOAD])
        try:
            forkserver.ensure_running()
        except OSError as exc:  # no server: the workers are spawned as usual
            logger.warning("could not start the fork server for GPU worker processes (%s); "
                           "each starts a new interpreter", exc)
            return False
    _started = True
    return True


@contextlib.contextmanager
def forking(protocol: str):
    """A context in which distributed starts worker processes by forking them from the
    server (started here if it was not), where it is :func:`wanted` for ``protocol``."""
    if not start(protocol):
        yield False
        return
    import dask.config

    with dask.config.set({METHOD_KEY: "forkserver"}):
        yield True


@contextlib.contextmanager
def _environ(added: dict[str, str]):
    """This process's environment with ``added``, taken back at the end."""
    before = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

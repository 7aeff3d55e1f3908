"""Local worker processes forked from a server that has the libraries imported.

distributed starts each worker process of a local cluster as a new interpreter: every one
imports distributed, pandas and dask's dataframes, on GPUs dask-cuda, RMM, CuPy, Numba and cuDF
too, some before its worker registers and the rest during its first tasks. Python's
``forkserver`` start method runs one server process that imports them once; each worker process
is then a fork of it, its modules already loaded. The library starts that server as a local
cluster of worker processes starts, before the cluster's own imports and scheduler, so that the
server's imports overlap them; a program that will start such a cluster can start the server
earlier still, as soon as it knows (:func:`~dask_gpu_interop.prepare_local_cluster`, or
:func:`~dask_gpu_interop.cluster.options.prepare_from_command_line` first in a command's entry
point, as the examples' commands do), so that the server's imports overlap the program's own
imports and work. By default the server serves GPU worker processes over UCX only: GPU worker
processes over TCP, which start faster, and CPU worker processes gained nothing from it
that held from one run to the next (benchmarks/README.md), so they are spawned unless the
setting says otherwise.

The server touches no GPU, so that every worker forked from it initializes CUDA itself, on
the device its nanny gives it: cuDF is imported with ``RAPIDS_NO_INITIALIZE=1`` (cuDF's check
of the GPU and driver at import is left out, in the workers too), and none of the modules
creates a CUDA context as it is imported. The variables that the libraries (and the C
library's allocator) read as a process starts are the server's: the GPU workers' settings
(:mod:`.gpu_workers`) and distributed's ``distributed.nanny.pre-spawn-environ`` (the hash seed,
the thread counts of the numeric libraries, the allocator's thresholds); a cluster that needs
them otherwise than the running server has them gets spawned worker processes (the server
cannot change them, and stopping it would leave the workers already forked from it without
the server that reports their end to their nannies). Every other variable of this process's
environment reaches the workers as it is when the cluster starts, through the nanny (a
variable removed after the server started stays in the workers).

``gpu-interop.worker.fork-server`` in dask config: ``ucx`` (the default: GPU worker processes
over UCX), ``true`` (every local cluster's worker processes, CPU ones included) or ``false``
(none: each worker a new interpreter, distributed's way). Linux only. A forked process ends
without Python's teardown, as the quick exit (:mod:`.quick_exit`) has a worker process end:
with ``gpu-interop.worker.quick-exit`` off, worker processes are new interpreters, whose
teardown runs. A worker process that its nanny
restarts later is started the way distributed's config says (a new interpreter by default).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

logger = logging.getLogger(__name__)

#: The dask config key that says where the fork server is used: "ucx", true or false.
CONFIG_KEY = "gpu-interop.worker.fork-server"
#: Its default: GPU worker processes over UCX only.
UCX_ONLY = "ucx"
#: What the server imports for every worker (a module that is not installed is left out).
COMMON_MODULES = ("distributed", "numpy", "pandas", "pyarrow", "dask.dataframe",
                  "dask_gpu_interop")
#: ... and for GPU workers.
GPU_MODULES = ("dask_cuda", "rmm", "cupy", "numba", "cudf", "dask_cudf",
               "dask_gpu_interop.worker.gpu_start")
#: The server's environment variable that names the modules it imports (removed there once
#: read, so that the workers do not inherit it).
IMPORTS_VARIABLE = "DASK_GPU_INTEROP_FORK_SERVER_IMPORTS"
#: What the server is told to import: a module that imports each of those on its own, so that
#: one failing with any error (not only an ImportError) leaves the server up.
PRELOAD = "dask_gpu_interop.worker._fork_server_imports"
#: distributed's config keys: a worker process's start method; the variables a nanny sets in
#: its worker process.
METHOD_KEY = "distributed.worker.multiprocessing-method"
NANNY_ENVIRON = "distributed.nanny.environ"

#: This process's environment as the running server started with it (None: no server).
_server_environ: dict[str, str] | None = None
#: The variables read as a process starts, as the running server has them.
_server_settings: dict[str, str] | None = None


def wanted(protocol: str, device: str = "gpu") -> bool:
    """Whether a local cluster's worker processes on ``device`` ("gpu" or "cpu") over
    ``protocol`` are to be forked from the server: dask config says so (by default for GPU
    workers over UCX), does not ask for Python's teardown at a worker process's end (the quick
    exit off), and the platform has the ``forkserver`` start method (Linux)."""
    import dask.config

    from .._defaults import flag
    from . import quick_exit

    if not sys.platform.startswith("linux") or not flag(quick_exit.CONFIG_KEY, True):
        return False
    value = dask.config.get(CONFIG_KEY, default=UCX_ONLY)
    if isinstance(value, str) and value.strip().lower() == UCX_ONLY:
        return device == "gpu" and protocol == "ucx"
    return flag(CONFIG_KEY, False)


def modules(device: str) -> tuple[str, ...]:
    """What the server imports for workers on ``device``."""
    return COMMON_MODULES + (GPU_MODULES if device == "gpu" else ())


def server_environ(device: str = "gpu") -> dict[str, str]:
    """The variables the server for workers on ``device`` must start with, as this process
    gives them now: the GPU workers' settings (on GPUs) and distributed's pre-spawn variables
    (a value set in this process's environment wins over both), ``RAPIDS_NO_INITIALIZE`` and
    the modules to import."""
    import dask.config

    from . import gpu_workers

    pre_spawn = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    chosen = {**(gpu_workers.settings() if device == "gpu" else {}),
              **{k: str(v) for k, v in pre_spawn.items()}}
    if chosen.get("PYTHONHASHSEED") in (None, "0"):
        chosen["PYTHONHASHSEED"] = "6640"  # distributed's own seed for its worker processes
    out = {k: os.environ.get(k, v) for k, v in chosen.items()}
    out["RAPIDS_NO_INITIALIZE"] = "1"
    out[IMPORTS_VARIABLE] = ",".join(modules(device))
    return out


def start(protocol: str = "ucx", device: str = "gpu") -> bool:
    """Start the fork server now, in the background, where it is :func:`wanted` for a cluster
    on ``device`` over ``protocol`` (once per process). Returns whether that cluster's worker
    processes will be forked from it: not where the variables read as a process starts
    (:func:`server_environ`) changed since the server started."""
    global _server_environ, _server_settings
    if not wanted(protocol, device):
        return False
    settings = server_environ(device)
    if _server_settings is not None:
        return settings == _server_settings
    import multiprocessing
    from multiprocessing import forkserver

    with _environ(settings):
        multiprocessing.get_context("forkserver").set_forkserver_preload([PRELOAD])
        try:
            forkserver.ensure_running()
        except OSError as exc:  # no server: the workers are spawned as usual
            logger.warning("could not start the fork server for worker processes (%s); each "
                           "starts a new interpreter", exc)
            return False
        _server_environ = dict(os.environ)
    _server_settings = settings
    return True


@contextlib.contextmanager
def forking(protocol: str, device: str = "gpu"):
    """A context in which distributed starts worker processes by forking them from the
    server (started here if it was not), where it is :func:`wanted` for ``device`` and
    ``protocol``; the nannies give each worker the variables of this process's environment
    that differ from the server's."""
    if not start(protocol, device):
        yield False
        return
    import dask.config

    changed = {k: v for k, v in os.environ.items() if (_server_environ or {}).get(k) != v}
    given = dask.config.get(NANNY_ENVIRON, default={}) or {}
    with dask.config.set({METHOD_KEY: "forkserver", NANNY_ENVIRON: {**changed, **given}}):
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

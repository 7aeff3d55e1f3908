"""How GPU workers run tasks: each thread on its own CUDA stream, and two threads where that pays.

A GPU worker that runs one task at a time leaves its GPU idle while the task does host work
(reading a file's bytes, Python between kernels). With two threads, one task's host work
overlaps the other's kernels; each thread then needs a stream of its own, or both threads'
kernels and copies queue behind each other on the default stream. The settings, as
environment variables that the GPU libraries read when they are imported:

==========================================  ================================================
``CUDF_PER_THREAD_STREAM=1``                cuDF's work on each thread's default stream
``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``   CuPy's likewise
``KVIKIO_NTHREADS=8``                       threads reading a file's bytes for libcudf's
                                            readers (one by default)
``CUPY_ACCELERATORS=`` (empty)              CuPy's reductions without CUB, whose kernels
                                            are compiled on a machine's first call, seconds
                                            each, again on every fresh machine or container
==========================================  ================================================

Where they apply (``gpu-interop.worker.environ`` in dask config changes or adds variables; a
variable already set in a worker's environment wins):

- local GPU clusters of :func:`~dask_gpu_interop.cluster_client` and
  :func:`~dask_gpu_interop.local_cluster`: each worker process gets them from its nanny, and a
  worker in this process has them where no GPU library was imported yet (:func:`apply`;
  :func:`environ` for a block that imports GPU libraries before the cluster starts);
- workers of a cluster you start: ``dask cuda worker --preload dask_gpu_interop.preload`` sets
  them when the preload is imported, before the worker imports a GPU library.

The threads are the cluster's: one per GPU worker by default, as dask-cuda starts them
(``gpu-interop.worker.threads`` for local clusters; ``--nthreads 2`` for ``dask cuda
worker``). Two pay where tasks mix host work with kernels (the mortgage example's ETL runs two),
and need every library the tasks use to be safe on two threads: numba-cuda's first launch of a
kernel is not (launch each kernel once first, or keep one thread).

With per-thread streams a task's kernels may still be running when its function returns, and
a task on another thread could read its result half written. The :class:`GPUMemoryPlugin`
therefore runs a GPU worker's tasks in an executor that waits for the thread's stream after
each task (:func:`dask_gpu_interop.device.wait_for_streams`), so that a result is complete
when it is handed on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import dask.config

logger = logging.getLogger("distributed.worker.gpu_interop")

ENVIRON = {
    "CUDF_PER_THREAD_STREAM": "1",
    "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1",
    "KVIKIO_NTHREADS": "8",
    "CUPY_ACCELERATORS": "",
}
THREADS = 1

# The variables that a library reads when it is imported: set after it, they do nothing.
READ_AT_IMPORT = {
    "CUDF_PER_THREAD_STREAM": ("pylibcudf", "cudf"),
    "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": ("cupy",),
    "CUPY_ACCELERATORS": ("cupy",),
    "KVIKIO_NTHREADS": ("kvikio",),
}


def settings() -> dict[str, str]:
    """The variables GPU workers get: :data:`ENVIRON` updated by ``gpu-interop.worker.environ``
    (a variable given there as null is left out)."""
    given = dask.config.get("gpu-interop.worker.environ", default=None) or {}
    merged = {**ENVIRON, **{str(k): v for k, v in given.items()}}
    return {name: str(value) for name, value in merged.items() if value is not None}


def threads() -> int:
    """Threads per GPU worker of a local cluster: ``gpu-interop.worker.threads``."""
    value = dask.config.get("gpu-interop.worker.threads", default=THREADS)
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if count < 1 or str(value).strip() != str(count):
        raise ValueError(f"gpu-interop.worker.threads={value!r}: give a whole number of "
                         "threads, at least 1")
    return count


def apply(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set each of ``environ`` (default: :func:`settings`) in this process's environment
    where it is not set yet; returns what was set. A variable whose library is imported here
    already is left alone (it would do nothing now), and the log says so."""
    wanted = settings() if environ is None else environ
    added, late = {}, []
    for name, value in wanted.items():
        if name in os.environ:
            continue
        if any(module in sys.modules for module in READ_AT_IMPORT.get(name, ())):
            late.append(name)
            continue
        os.environ[name] = value
        added[name] = value
    if late:
        logger.info("GPU worker settings %s not applied: their libraries were imported in this "
                    "process before the worker started", ", ".join(late))
    return added


@contextlib.contextmanager
def environ(environ: dict[str, str] | None = None):
    """A context in which this process's environment has the GPU workers' settings
    (:func:`apply`), taken back at its end. Enter it before GPU libraries are imported and
    keep it while a local cluster's workers start."""
    added = apply(environ)
    try:
        yield added
    finally:
        for name in added:
            os.environ.pop(name, None)

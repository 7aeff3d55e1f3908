"""How the example's local GPU workers run its tasks: two at a time, each on its own stream.

A local GPU worker runs two tasks at once (``GPU_THREADS``), so that one task's host work (its
file's bytes, Python) overlaps the other's kernels. The commands give the workers they start
these settings, through dask's ``distributed.nanny.pre-spawn-environ``:

- each thread its own CUDA stream (cuDF's ``CUDF_PER_THREAD_STREAM``, CuPy's
  ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM``): otherwise both threads' kernels and copies queue on
  one stream. A task then waits for its stream before it returns (:func:`synchronize`), so
  that a task on another thread never reads a result still being written;
- eight threads for a file's bytes in kvikio, which libcudf's reader reads files with
  (``KVIKIO_NTHREADS``, one by default);
- CuPy's reductions without CUB (``CUPY_ACCELERATORS`` empty): with CUB, each reduction's
  first call on a machine compiles a kernel with CUB's headers, seconds each, which a fresh
  machine, container or pod pays in its first ETL; the ETL's few reductions are no slower
  without it.

A variable already set in the environment wins; a running cluster (``--scheduler``) keeps what
its workers were started with: set these where they start.
"""

from __future__ import annotations

import contextlib
import os

import dask

GPU_THREADS = 2
ENVIRON = {
    "CUDF_PER_THREAD_STREAM": "1",
    "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1",
    "KVIKIO_NTHREADS": "8",
    "CUPY_ACCELERATORS": "",
}
_KEY = "distributed.nanny.pre-spawn-environ"


def threads(cluster: dict, device: str) -> dict:
    """``cluster`` (the keyword arguments of ``cluster_client``) with two threads per local GPU
    worker; a --threads-per-worker given wins, a running cluster keeps its own."""
    if cluster.get("scheduler") or device != "gpu" or cluster.get("threads_per_worker"):
        return cluster
    return {**cluster, "threads_per_worker": GPU_THREADS}


def environ(cluster: dict, device: str):
    """A context in which local GPU workers start with ``ENVIRON`` (less what this process's
    environment sets already); nothing changes for CPU workers or a running cluster."""
    if cluster.get("scheduler") or device != "gpu":
        return contextlib.nullcontext()
    given = dict(dask.config.get(_KEY, default={}) or {})
    wanted = {k: v for k, v in ENVIRON.items() if k not in os.environ and k not in given}
    return dask.config.set({_KEY: {**given, **wanted}})


def synchronize() -> None:
    """Wait for the device work this thread queued, on its own stream and on CuPy's current
    one (the legacy default stream where per-thread streams are off)."""
    import cupy

    cupy.cuda.Stream.ptds.synchronize()
    cupy.cuda.get_current_stream().synchronize()

"""How the example's local GPU workers run its tasks: two at a time, each on its own stream.

A local GPU worker runs two tasks at once (``GPU_THREADS``), so that one task's host work (its
file's bytes, Python) overlaps the other's kernels. The commands set these variables in their
own environment while they run, before they import a GPU library: a local worker runs in the
command's process (one GPU) or in a process it starts (several), which inherits them:

- each thread its own CUDA stream (cuDF's ``CUDF_PER_THREAD_STREAM``, CuPy's
  ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM``): otherwise both threads' kernels and copies queue on
  one stream. A task then waits for its stream before it returns (:func:`synchronize`), so
  that a task on another thread never reads a result still being written;
- eight threads for a file's bytes in kvikio, which libcudf's reader reads files with
  (``KVIKIO_NTHREADS``, one by default);
- CuPy's reductions without CUB (``CUPY_ACCELERATORS`` empty): with CUB, a reduction's first
  call on a machine compiles a kernel with CUB's headers, seconds each, which a fresh machine,
  container or pod pays again.

A variable already set in the environment wins; a running cluster (``--scheduler``) keeps what
its workers were started with: set these where they start.
"""

from __future__ import annotations

import contextlib
import os

GPU_THREADS = 2
ENVIRON = {
    "CUDF_PER_THREAD_STREAM": "1",
    "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1",
    "KVIKIO_NTHREADS": "8",
    "CUPY_ACCELERATORS": "",
}


def threads(cluster: dict, device: str) -> dict:
    """``cluster`` (the keyword arguments of ``cluster_client``) with two threads per local GPU
    worker; a --threads-per-worker given wins, a running cluster keeps its own."""
    if cluster.get("scheduler") or device != "gpu" or cluster.get("threads_per_worker"):
        return cluster
    return {**cluster, "threads_per_worker": GPU_THREADS}


@contextlib.contextmanager
def environ(cluster: dict, device: str):
    """A context in which this process's environment has ``ENVIRON`` (less the variables it
    sets already), for local GPU workers; nothing changes for CPU workers or a running
    cluster. Enter it before a GPU library is imported and keep it while the workers run."""
    if cluster.get("scheduler") or device != "gpu":
        yield
        return
    added = {k: v for k, v in ENVIRON.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def synchronize() -> None:
    """Wait for the device work this thread queued, on its own stream and on CuPy's current
    one (the legacy default stream where per-thread streams are off)."""
    import cupy

    cupy.cuda.Stream.ptds.synchronize()
    cupy.cuda.get_current_stream().synchronize()

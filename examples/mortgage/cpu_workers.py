"""How the example's local CPU workers allocate memory: a task's large arrays reuse what the
previous task freed, instead of fresh pages from the kernel.

glibc's malloc gives every allocation above ``MALLOC_MMAP_THRESHOLD_`` a mapping of its own and
unmaps it when freed, and Dask starts its worker processes with ``MALLOC_TRIM_THRESHOLD_`` at
64 KiB, so that freed memory goes back to the system at once. A partition's columns are tens
to hundreds of MB: each task then faults in and zeroes all of its arrays' pages again. With
both thresholds at 256 MiB the heap keeps that memory for the next task; in exchange a worker
returns freed memory to the system less eagerly.

The commands set this for the local CPU cluster they start (Dask's ``pre-spawn-environ``,
which its nanny gives each worker process); a running cluster (``--scheduler``) keeps what its
workers were started with.
"""

from __future__ import annotations

import contextlib
import os

import dask

THRESHOLD = str(256 * 2**20)
ENVIRON = {"MALLOC_MMAP_THRESHOLD_": THRESHOLD, "MALLOC_TRIM_THRESHOLD_": THRESHOLD}
KEY = "distributed.nanny.pre-spawn-environ"


@contextlib.contextmanager
def environ(cluster: dict, device: str):
    """A context in which local CPU worker processes start with ``ENVIRON`` (a value set in
    this process's environment, or in Dask's configuration other than distributed's default,
    wins); nothing changes for GPU workers or a running cluster."""
    if cluster.get("scheduler") or device != "cpu":
        yield
        return
    given = dict(dask.config.get(KEY, default={}) or {})
    defaults = {"MALLOC_TRIM_THRESHOLD_": 65536}  # distributed's own, replaced here
    chosen = {k: v for k, v in ENVIRON.items()
              if k not in os.environ and given.get(k, defaults.get(k)) == defaults.get(k)}
    with dask.config.set({KEY: {**given, **chosen}}):
        yield

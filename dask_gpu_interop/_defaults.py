"""The package's defaults in dask's config, so users override them the dask way.

``gpu-interop.memory.*`` comes from ``MemoryConfig``'s fields; set one in a YAML file or by
environment (``DASK_GPU_INTEROP__MEMORY__POOL_SIZE=0.8``). ``dask-gpu-interop config`` prints
them all with their help. ``gpu-interop.worker.*``: how GPU workers run tasks
(:mod:`dask_gpu_interop.worker.gpu_workers`); ``gpu-interop.shuffle.*``: the library's
all-to-all (:func:`dask_gpu_interop.shuffle`).
"""

from __future__ import annotations

import dask.config

SERIALIZE_DEFAULTS = {
    # A CUDA tensor arriving at a process with no GPU: "error" (say so) or "cpu" (land it there).
    "no-gpu": "error",
}

WORKER_DEFAULTS = {
    # Variables GPU workers get over dask_gpu_interop.worker.gpu_workers.ENVIRON (null: leave
    # one out).
    "environ": {},
    # Threads of each GPU worker of a local cluster (dask_gpu_interop.worker.gpu_workers).
    "threads": 1,
    # A nanny's worker process ends right after its worker closed, without Python's teardown
    # (dask_gpu_interop.worker.quick_exit).
    "quick-exit": True,
    # Local worker processes forked from a server that imported the libraries once:
    # "ucx" (GPU workers over UCX), true (all, CPU workers included) or false
    # (dask_gpu_interop.worker.fork_server).
    "fork-server": "ucx",
}

SHUFFLE_DEFAULTS = {
    # The bytes each split and run of output partitions of the all-to-all works on at once
    # on a worker: "auto" (the whole share while it is small beside the worker's memory, else
    # steps of a part of it) or a size such as "1GiB" (dask_gpu_interop.all_to_all.plan).
    "step-bytes": "auto",
    # How its batches cross between workers: "direct" (each split sends them itself, where a
    # share takes one step; dask_gpu_interop.all_to_all.inbox) or "batches" (tasks of their
    # own, which dask moves as it moves any data; what steps always take).
    "exchange": "direct",
    # The longest a shuffle waits while none of its tasks ends, and a destination may take to
    # take a batch, as a duration; null: no limit (dask_gpu_interop.all_to_all.plan).
    "timeout": "5 minutes",
}


def defaults() -> dict:
    """Everything under ``gpu-interop`` in dask config, with its default."""
    from .memory.config import config_defaults

    return {"gpu-interop": {"memory": config_defaults(), "serialize": dict(SERIALIZE_DEFAULTS),
                            "worker": dict(WORKER_DEFAULTS),
                            "shuffle": dict(SHUFFLE_DEFAULTS)}}


def flag(key: str, default: bool) -> bool:
    """A yes/no setting of dask config; from the environment it arrives as text, where
    "false", "0", "no" and "off" mean no."""
    value = dask.config.get(key, default=default)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)


def load_defaults() -> None:
    """Add the defaults to dask's config (once, as the package is imported)."""
    dask.config.update_defaults(defaults())

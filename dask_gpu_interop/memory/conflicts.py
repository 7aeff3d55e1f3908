"""Other owners of a worker's GPU memory that would fight the plugin, found before it acts.

distributed-ucxx re-initializes RMM when its ``rmm.pool-size`` option is set, and dask-cuda's
``rmm_*`` options install a resource of their own. Two owners of one device's memory means one
silently replaces the other's pool under live allocations, so the plugin refuses (or, with
``force=True``, replaces the other resource knowingly).
"""

from __future__ import annotations

import dask.config

from ..compat import dask_cuda_rmm_settings, pending_worker_plugins

UCXX_KEYS = ("distributed-ucxx.rmm.pool-size", "distributed.rmm.pool-size")


def ucxx_pool_size() -> str | None:
    """The distributed-ucxx RMM pool option, if set in this process's dask config."""
    for key in UCXX_KEYS:
        value = dask.config.get(key, default=None)
        if value is not None:
            return f"{key}={value!r}"
    return None


def ucxx_message(setting: str) -> str:
    return (
        f"dask config {setting} makes distributed-ucxx create its own RMM pool when UCX starts, "
        "replacing (or being replaced by) the GPUMemoryPlugin's resource. Unset it (for example "
        "DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE) and give the size to "
        "GPUMemoryPlugin(pool_size=...) instead, or pass force=True to let the plugin replace it."
    )


def dask_cuda_rmm_options(worker) -> list[str]:
    """dask-cuda RMM options in force on ``worker`` (from its RMMSetup plugin), if any."""
    # Plugins passed at worker creation are added after preloads run: look at those too.
    plugins = [*getattr(worker, "plugins", {}).values(), *pending_worker_plugins(worker)]
    return [f"{option}={value!r}"
            for plugin in plugins for option, value in dask_cuda_rmm_settings(plugin).items()]


def dask_cuda_message(options: list[str]) -> str:
    return (
        f"dask-cuda already set up RMM on this worker ({', '.join(options)}). Two owners of one "
        "GPU's memory fight over it: drop those dask-cuda options and give the sizes to "
        "GPUMemoryPlugin (pool_size=, maximum_pool_size=, managed=, async_alloc=), or pass "
        "force=True to replace dask-cuda's resource."
    )


def foreign_resource(current, ours: tuple = ()) -> str | None:
    """Name the current RMM resource if someone other than the plugin installed it."""
    if current is None or any(current is mine for mine in ours):
        return None
    name = type(current).__name__
    if name == "CudaMemoryResource":  # RMM's default: nobody configured anything
        return None
    return name

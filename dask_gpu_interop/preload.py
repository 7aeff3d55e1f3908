"""Worker preload: set up the GPUMemoryPlugin when the worker starts, before any GPU work.

    dask cuda worker SCHEDULER --preload dask_gpu_interop.preload --gpu-pool-size 0.8 --gpu-managed
    dask worker SCHEDULER --preload dask_gpu_interop.preload --gpu-async --gpu-release-threshold 10GB

Options left out come from dask config (``DASK_GPU_INTEROP__MEMORY__POOL_SIZE=0.8``). A bad
option, or a setup the plugin refuses, stops the worker with the reason: a worker that came up
without its memory setup would be worse than one that did not come up.
"""

from __future__ import annotations

import logging
import re

import click

from .memory.config import CONFIG_KEYS, UNSET
from .memory.plugin import GPUMemoryPlugin

logger = logging.getLogger("distributed.worker.gpu_interop")

OWN_PREFIX = "--gpu-"
# dask-cuda passes these to every preload; they are dask_cuda.initialize's own.
DASK_CUDA_FLAGS = ("--create-cuda-context", "--no-create-cuda-context")


def _unset(value):
    return UNSET if value is None else value


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--gpu-pool-size", help="Initial RMM pool size: bytes, '8GB', or a fraction '0.8'.")
@click.option("--gpu-maximum-pool-size", help="Largest the pool may grow to (same forms).")
@click.option("--gpu-managed/--no-gpu-managed", default=None, help="Managed (unified) memory.")
@click.option("--gpu-async/--no-gpu-async", default=None, help="CUDA's async pool (cudaMallocAsync).")
@click.option("--gpu-release-threshold", help="Async pool: bytes kept when idle.")
@click.option("--gpu-frameworks", help="Comma-separated: cupy,numba,torch,xgboost,jax,cudf.")
@click.option("--gpu-statistics/--no-gpu-statistics", default=None, help="RMM statistics.")
@click.option("--gpu-spill/--no-gpu-spill", default=None, help="cuDF spilling.")
@click.option("--gpu-log-directory", help="Directory for RMM allocation logs.")
@click.option("--gpu-jax-memory-fraction", type=float, help="JAX's cap, in (0, 1].")
@click.option("--gpu-force/--no-gpu-force", default=False, help="Replace another RMM owner.")
@click.option(
    "--create-cuda-context/--no-create-cuda-context",
    default=False,
    help="Passed by dask-cuda to every preload; the plugin creates the context itself.",
)
@click.argument("others", nargs=-1, type=click.UNPROCESSED)
async def dask_setup(
    worker,
    gpu_pool_size,
    gpu_maximum_pool_size,
    gpu_managed,
    gpu_async,
    gpu_release_threshold,
    gpu_frameworks,
    gpu_statistics,
    gpu_spill,
    gpu_log_directory,
    gpu_jax_memory_fraction,
    gpu_force,
    create_cuda_context,
    others,
):
    from distributed import Worker

    if not isinstance(worker, Worker):
        logger.warning("dask_gpu_interop.preload is a worker preload; ignored on %r", worker)
        return
    mistyped = [arg for arg in others if arg.startswith(OWN_PREFIX)]
    if mistyped:
        _stop(f"unknown option(s) {mistyped}; see `python -m dask_gpu_interop.preload --help`")
    try:
        plugin = GPUMemoryPlugin(
            pool_size=_unset(gpu_pool_size),
            maximum_pool_size=_unset(gpu_maximum_pool_size),
            managed=_unset(gpu_managed),
            async_alloc=_unset(gpu_async),
            release_threshold=_unset(gpu_release_threshold),
            frameworks=_unset(gpu_frameworks),
            statistics=_unset(gpu_statistics),
            spill=_unset(gpu_spill),
            log_directory=_unset(gpu_log_directory),
            jax_memory_fraction=_unset(gpu_jax_memory_fraction),
            force=gpu_force,
        )
    except (TypeError, ValueError) as err:
        _stop(f"bad option: {_as_flag_names(str(err))}")
    _keep_dask_cuda_preload_to_its_flags(worker)
    try:
        await worker.plugin_add(plugin=plugin, name=plugin.name, catch_errors=False)
    except Exception as err:
        _stop(str(err))


def argv_for(config) -> list[str]:
    """This preload's flags for a validated ``MemoryConfig`` (for clusters we start)."""
    argv = []
    for option, value in config.options().items():
        flag = f"--gpu-{CONFIG_KEYS[option]}"
        if isinstance(value, bool):
            argv.append(flag if value else flag.replace("--gpu-", "--no-gpu-"))
        elif isinstance(value, list):
            argv += [flag, ",".join(value)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def _as_flag_names(message: str) -> str:
    """Errors name the plugin's options ("pool_size="); say them as this preload's flags."""
    for option, key in CONFIG_KEYS.items():
        message = re.sub(rf"\b{option}=", f"--gpu-{key} ", message)
    return message


def _keep_dask_cuda_preload_to_its_flags(worker) -> None:
    """dask-cuda hands every preload the same argv; its own preload rejects our options."""
    for preload in getattr(worker, "preloads", ()):
        if getattr(preload, "name", "") == "dask_cuda.initialize":
            preload.argv = [arg for arg in preload.argv if arg in DASK_CUDA_FLAGS]


def _stop(message: str):
    """Stop the worker: distributed logs and skips a preload's ordinary exceptions."""
    logger.error("dask_gpu_interop.preload: %s", message)
    raise SystemExit(f"dask_gpu_interop.preload: {message}")


if __name__ == "__main__":  # `python -m dask_gpu_interop.preload --help`
    dask_setup.main(args=["--help"], prog_name="dask_gpu_interop.preload")

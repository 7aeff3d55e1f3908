"""Worker preload: set up the GPUMemoryPlugin when the worker starts, before any GPU work.

    dask cuda worker SCHEDULER --preload dask_gpu_interop.preload --gpu-pool-size 0.8 --gpu-managed
    dask worker SCHEDULER --preload dask_gpu_interop.preload --gpu-async-alloc --gpu-release-threshold 10GB

Each ``--gpu-*`` flag is a ``GPUMemoryPlugin`` option (``python -m dask_gpu_interop.preload``
lists them). Options left out come from dask config, so the preload needs no flags at all:
``DASK_GPU_INTEROP__MEMORY__POOL_SIZE=0.8 dask cuda worker --scheduler-file s.json --preload
dask_gpu_interop.preload``. A bad option, or a setup the plugin refuses, stops the worker with
the reason: a worker that came up without its memory setup would be worse than one that did
not come up.

Importing the preload also gives the worker the GPU workers' settings of
:mod:`dask_gpu_interop.worker.gpu_workers` (each thread its own CUDA stream, kvikio's reader
threads), before any GPU library is imported; with ``--nthreads 2`` on ``dask cuda worker``,
one task's host work overlaps another's kernels. And a dask-cuda worker imports cuDF in the
background instead of before it joins the cluster (:mod:`dask_gpu_interop.worker.cudf_import`).
"""

from __future__ import annotations

import logging

import click

from .cluster.options import given_memory, memory_click_options, with_options
from .compat import (
    DASK_CUDA_PRELOAD,
    DASK_CUDA_PRELOAD_FLAGS,
    add_pending_worker_plugin,
    keep_preload_arguments,
)
from .memory.config import PRELOAD_PREFIX
from .memory.errors import OptionError
from .memory.plugin import GPUMemoryPlugin
from .worker import cudf_import, gpu_workers, quick_exit
from .worker import start as worker_start

logger = logging.getLogger("distributed.worker.gpu_interop")

# The GPU workers' settings (per-thread streams, kvikio's threads:
# dask_gpu_interop.worker.gpu_workers), now: a worker imports its preloads before any GPU
# library, which reads them at import.
gpu_workers.apply()

PREFIX = PRELOAD_PREFIX  # --gpu-pool-size


class _CheckedCommand(click.Command):
    """The preload's command: its options are checked together as soon as they are parsed.

    ``dask worker`` (and ``dask cuda worker``) parse a preload's arguments in their own
    process before any worker process starts: a bad option then stops the command in one
    line, instead of a worker process that fails to start and the nanny's tracebacks."""

    def parse_args(self, ctx, args):
        try:
            rest = super().parse_args(ctx, args)
        except click.UsageError as err:  # said as the worker command's, which parses these
            raise click.UsageError(f"dask_gpu_interop.preload: {err.format_message()}") from None
        params = dict(ctx.params)
        mistyped = [arg for arg in params.get("others", ()) if arg.startswith(f"--{PREFIX}")]
        if mistyped:
            raise click.UsageError(f"dask_gpu_interop.preload: unknown option(s) {mistyped}; "
                                   "see `python -m dask_gpu_interop.preload --help`")
        try:
            GPUMemoryPlugin(force=params.get("gpu_force", False), **given_memory(params))
        except OptionError as err:
            raise click.UsageError(
                f"dask_gpu_interop.preload: bad option: {err.message(flags=PREFIX)}") from None
        except (TypeError, ValueError) as err:
            raise click.UsageError(f"dask_gpu_interop.preload: bad option: {err}") from None
        return rest


@click.command(cls=_CheckedCommand, context_settings={"ignore_unknown_options": True})
@with_options(memory_click_options(PREFIX))
@click.option("--gpu-force/--no-gpu-force", default=False, help="Replace another RMM owner.")
@click.option(
    "--create-cuda-context/--no-create-cuda-context",
    default=False,
    help="Passed by dask-cuda to every preload; the plugin creates the context itself.",
)
@click.argument("others", nargs=-1, type=click.UNPROCESSED)
def dask_setup(worker, gpu_force, create_cuda_context, others, **options):
    from distributed import Worker

    if not isinstance(worker, Worker):
        logger.warning("dask_gpu_interop.preload is a worker preload; ignored on %r", worker)
        return
    worker_start.mark(worker, "preloads")
    mistyped = [arg for arg in others if arg.startswith(f"--{PREFIX}")]
    if mistyped:
        _stop(f"unknown option(s) {mistyped}; see `python -m dask_gpu_interop.preload --help`")
    try:
        plugin = GPUMemoryPlugin(force=gpu_force, **given_memory(options))
    except OptionError as err:
        _stop(f"bad option: {err.message(flags=PREFIX)}")
    except (TypeError, ValueError) as err:
        _stop(f"bad option: {err}")
    # dask-cuda hands every preload the same arguments; its own preload rejects ours.
    keep_preload_arguments(worker, DASK_CUDA_PRELOAD, DASK_CUDA_PRELOAD_FLAGS)
    # After every preload (dask-cuda's creates the CUDA context on the worker's device),
    # before the worker takes any task; a refusal stops the worker.
    add_pending_worker_plugin(worker, plugin)
    # dask-cuda's cuDF options without holding the worker's start for cuDF's import, which
    # runs from now on, beside dask-cuda's CUDA start
    cudf_import.import_beside_start(worker, spill=plugin.config.spill)


def dask_teardown(worker) -> None:
    """As the worker closes: its process ends right after
    (:mod:`dask_gpu_interop.worker.quick_exit`)."""
    quick_exit.end_process_at_exit(worker)


def _stop(message: str):
    """Stop the worker: distributed logs and skips a preload's ordinary exceptions."""
    logger.error("dask_gpu_interop.preload: %s", message)
    raise SystemExit(f"dask_gpu_interop.preload: {message}") from None


if __name__ == "__main__":  # `python -m dask_gpu_interop.preload --help`
    dask_setup.main(args=["--help"], prog_name="dask_gpu_interop.preload")

"""Worker preload: set up the GPUMemoryPlugin when the worker starts, before any GPU work.

    dask cuda worker SCHEDULER --preload dask_gpu_interop.preload --gpu-pool-size 0.8 --gpu-managed
    dask worker SCHEDULER --preload dask_gpu_interop.preload --gpu-async-alloc --gpu-release-threshold 10GB

Each ``--gpu-*`` flag is a ``GPUMemoryPlugin`` option (``python -m dask_gpu_interop.preload``
lists them). Options left out come from dask config, so the preload needs no flags at all:
``DASK_GPU_INTEROP__MEMORY__POOL_SIZE=0.8 dask cuda worker --scheduler-file s.json --preload
dask_gpu_interop.preload``. A bad option, or a setup the plugin refuses, stops the worker with
the reason: a worker that came up without its memory setup would be worse than one that did
not come up.

The flags are parsed once, into the plugin the worker sets up (``dask worker`` checks them
first in its own process, so that a bad one ends the command before any worker process
starts). Importing the preload also gives the worker the GPU workers' settings of
:mod:`dask_gpu_interop.worker.gpu_workers` (each thread its own CUDA stream, kvikio's reader
threads), before any GPU library is imported; with ``--nthreads 2`` on ``dask cuda worker``,
one task's host work overlaps another's kernels. And a dask-cuda worker imports cuDF in the
background instead of before it joins the cluster (:mod:`dask_gpu_interop.worker.gpu_start`).
"""

from __future__ import annotations

import logging

import click

from .cluster.options import given_memory, memory_click_options, with_options
from .memory.config import PRELOAD_PREFIX
from .memory.errors import OptionError
from .memory.plugin import GPUMemoryPlugin
from .worker import gpu_start, gpu_workers, quick_exit

logger = logging.getLogger("distributed.worker.gpu_interop")

# The GPU workers' settings (per-thread streams, kvikio's threads:
# dask_gpu_interop.worker.gpu_workers), now: a worker imports its preloads before any GPU
# library, which reads them at import.
gpu_workers.apply()

PREFIX = PRELOAD_PREFIX  # --gpu-pool-size
NAME = "dask_gpu_interop.preload"


class _CheckedCommand(click.Command):
    """The preload's command: its options are parsed once, into the worker's plugin, as soon
    as they are read (given to ``dask_setup`` as ``plugin``).

    ``dask worker`` (and ``dask cuda worker``) parse a preload's arguments in their own
    process before any worker process starts: a bad option then stops the command in one
    line, instead of a worker process that fails to start and the nanny's tracebacks. In the
    worker, where distributed would log a preload's error and start the worker without its
    memory setup, a bad option stops the worker with the reason."""

    def parse_args(self, ctx, args):
        try:
            rest = super().parse_args(ctx, args)
        except click.UsageError as err:  # said as the worker command's, which parses these
            raise click.UsageError(f"{NAME}: {err.format_message()}") from None
        params = dict(ctx.params)
        mistyped = [arg for arg in params.get("others", ()) if arg.startswith(f"--{PREFIX}")]
        if mistyped:
            raise click.UsageError(f"{NAME}: unknown option(s) {mistyped}; "
                                   f"see `python -m {NAME} --help`")
        try:
            plugin = GPUMemoryPlugin(force=params.get("gpu_force", False), **given_memory(params))
        except OptionError as err:
            raise click.UsageError(f"{NAME}: bad option: {err.message(flags=PREFIX)}") from None
        except (TypeError, ValueError) as err:
            raise click.UsageError(f"{NAME}: bad option: {err}") from None
        ctx.params["plugin"] = plugin
        return rest

    def make_context(self, info_name, args, parent=None, **extra):
        """As a worker starts (distributed reads the preload's arguments so): a bad option
        stops the worker, rather than an error that distributed would log and go on."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            message = err.format_message()
            logger.error("%s", message)
            raise SystemExit(message) from None


@click.command(cls=_CheckedCommand, context_settings={"ignore_unknown_options": True})
@with_options(memory_click_options(PREFIX))
@click.option("--gpu-force/--no-gpu-force", default=False, help="Replace another RMM owner.")
@click.option(
    "--create-cuda-context/--no-create-cuda-context",
    default=False,
    help="Passed by dask-cuda to every preload; the plugin creates the context itself.",
)
@click.argument("others", nargs=-1, type=click.UNPROCESSED)
def dask_setup(worker, plugin, gpu_force, create_cuda_context, others, **options):
    from distributed import Worker

    if not isinstance(worker, Worker):
        logger.warning("%s is a worker preload; ignored on %r", NAME, worker)
        return
    if gpu_start.given_plugin(worker) is not None:
        message = (f"{NAME}: this worker was given its memory plugin already (a local cluster "
                   "of the library's); leave the preload out")
        logger.error("%s", message)
        raise SystemExit(message)
    gpu_start.start(worker, plugin)


def dask_teardown(worker) -> None:
    """As the worker closes: its process ends right after
    (:mod:`dask_gpu_interop.worker.quick_exit`)."""
    quick_exit.end_process_at_exit(worker)


if __name__ == "__main__":  # `python -m dask_gpu_interop.preload --help`
    dask_setup.main(args=["--help"], prog_name=NAME)

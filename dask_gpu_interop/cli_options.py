"""Click options shared by the package's commands: where to run, and the memory setup."""

from __future__ import annotations

import functools

import click

from .backend import DEVICES
from .cluster import PROTOCOLS


def cluster_options(command):
    """Add --scheduler/--device/--protocol/--workers and the memory options.

    The command receives ``cluster``: keyword arguments for ``cluster.cluster_client``.
    """

    @click.option("--scheduler", default=None, metavar="ADDRESS",
                  help="Run on this running cluster instead of starting a local one.")
    @click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
                  help="gpu: cuDF/CuPy on GPUs; cpu: pandas/NumPy; auto: GPUs when present.")
    @click.option("--protocol", type=click.Choice(PROTOCOLS), default="tcp", show_default=True,
                  help="Communication between workers of a local cluster (ucx: NVLink).")
    @click.option("--workers", "n_workers", type=click.IntRange(min=1), default=None,
                  help="Workers of a local cluster (default: one per GPU, or up to 4 on CPUs).")
    @click.option("--pool-size", default=None, help="RMM pool: bytes, '8GB' or fraction '0.8'.")
    @click.option("--maximum-pool-size", default=None, help="Largest the RMM pool may grow to.")
    @click.option("--managed", is_flag=True, default=None, help="Managed memory (oversubscription).")
    @click.option("--async-alloc", is_flag=True, default=None, help="CUDA's async pool.")
    @click.option("--release-threshold", default=None, help="Async pool: bytes kept when idle.")
    @click.option("--memory-plot", type=click.Path(dir_okay=False), default=None, metavar="PNG",
                  help="Plot each worker's device memory over the run into this PNG.")
    @functools.wraps(command)
    def wrapper(*args, scheduler, device, protocol, n_workers, pool_size, maximum_pool_size,
                managed, async_alloc, release_threshold, memory_plot, **kwargs):
        memory = {
            key: value
            for key, value in dict(
                pool_size=pool_size, maximum_pool_size=maximum_pool_size, managed=managed,
                async_alloc=async_alloc, release_threshold=release_threshold,
            ).items()
            if value is not None
        }
        cluster = dict(
            scheduler=scheduler, device=device, protocol=protocol, n_workers=n_workers,
            memory=memory or None, memory_plot=memory_plot,
        )
        return command(*args, cluster=cluster, **kwargs)

    return wrapper

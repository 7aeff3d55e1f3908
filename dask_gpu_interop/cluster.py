"""A client for the package's commands: on a running cluster, or on a local one we start.

With GPUs: a dask-cuda ``LocalCUDACluster`` whose workers start with our preload, so every
framework is bound to the worker's memory resource before its first allocation. Without:
a ``LocalCluster`` of processes.
"""

from __future__ import annotations

import contextlib
import os

from distributed import Client, LocalCluster

from .backend import resolve_device
from .memory.plugin import GPUMemoryPlugin

PROTOCOLS = ("tcp", "ucx", "tls", "inproc")


def _check_protocol(protocol: str, device: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    if protocol == "ucx" and device != "gpu":
        raise ValueError("protocol='ucx' is for GPU clusters (distributed-ucxx); use 'tcp' on CPUs")


@contextlib.contextmanager
def cluster_client(
    scheduler: str | None = None,
    *,
    device: str = "auto",
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    protocol: str = "tcp",
    memory: dict | None = None,
    dashboard: bool = False,
    security=None,
    memory_plot=None,
):
    """Yield ``(client, device)``: a Client and the device ("gpu"/"cpu") its workers use.

    ``memory``: GPUMemoryPlugin options for GPU workers (validated here, before anything
    starts). On a running ``scheduler`` they are registered with ``register_plugin`` when given.
    ``memory_plot``: a PNG path; each worker's memory over the block is plotted there.
    """
    plugin = GPUMemoryPlugin(**(memory or {}))  # validate first, whatever the device
    device = resolve_device(device)
    if device != "gpu":
        plugin = None
    if scheduler is not None:
        with Client(scheduler, security=security) as client:
            if plugin is not None and memory is not None:
                client.register_plugin(plugin)
            with _recording(client, memory_plot):
                yield client, device
        return
    _check_protocol(protocol, device)
    dashboard_address = ":0"  # a free port: a fixed one clashes with other clusters
    if device == "gpu":
        from dask_cuda import LocalCUDACluster

        from .preload import argv_for

        cluster = LocalCUDACluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker or 1,
            protocol=protocol,
            dashboard_address=dashboard_address,
            preload=["dask_gpu_interop.preload"],
            preload_argv=argv_for(plugin.config),
        )
    else:
        workers = n_workers or max(1, min(4, os.cpu_count() or 1))
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=threads_per_worker or max(1, (os.cpu_count() or 1) // workers),
            protocol=protocol,
            dashboard_address=dashboard_address,
            security=security,
        )
    with cluster, Client(cluster, security=security) as client, _recording(client, memory_plot):
        yield client, device


def _recording(client, png):
    if png is None:
        return contextlib.nullcontext()
    from .memory.timeline import record_memory

    return record_memory(client, png=png)

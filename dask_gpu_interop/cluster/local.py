"""A local cluster with the memory plugin on every GPU worker, and what can start before it.

With GPUs, :func:`local_cluster` is a dask-cuda ``LocalCUDACluster`` whose workers start with
the plugin's preload, so every framework is bound to the worker's memory resource before its
first allocation. With one GPU the worker runs in this process instead: a worker process
would start Python and import the GPU stack a second time, seconds that a command waits for
and the work does not need. Without GPUs it is a ``LocalCluster`` of processes.
:func:`prepare_local_cluster` starts early what such a cluster will use (the fork server of its
worker processes, this process's UCX setup).
"""

from __future__ import annotations

import contextlib
import os

import dask.config
from distributed import LocalCluster

from .. import compat
from .. import device as device_mod
from ..memory.config import CheckedOptions
from ..memory.errors import Setting
from ..memory.plugin import GPUMemoryPlugin
from ..worker import _interrupts, fork_server, gpu_start, gpu_workers, quick_exit
from . import ucx_setup
from .checks import ClusterError, _gpu_stack_missing, check_local, resolve_device

NANNY_ENVIRON = "distributed.nanny.environ"


def local_cluster(
    device: str = "auto",
    *,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    protocol: str = "tcp",
    memory: dict | GPUMemoryPlugin | None = None,
    dashboard_address: str | None = ":0",
    security=None,
    processes: bool | None = None,
):
    """A local cluster for ``device``: GPU workers with the memory plugin, or CPU workers.

    Bad options raise here, before any process starts. For dask's own shuffles of cuDF
    frames on a GPU cluster, set ``dask.config.set(shuffle_config())`` in the client's process
    (:func:`cluster_client` does).

    Parameters
    ----------
    device : {"auto", "gpu", "cpu"}
        "gpu": a dask-cuda ``LocalCUDACluster``, each worker given the plugin as it starts
        (every framework bound before its first allocation). "cpu": a
        ``LocalCluster`` of processes. "auto": GPUs when present (:func:`resolve_device`).
    n_workers : int, optional
        Workers: by default one per GPU, or up to 4 processes sharing the cores.
    threads_per_worker : int, optional
        Threads of each worker: on GPUs ``gpu-interop.worker.threads`` (1; with 2, one task's
        host work overlaps another's kernels, each thread on its own CUDA stream, see
        :mod:`dask_gpu_interop.worker.gpu_workers`); on CPUs the cores shared out.
    protocol : {"tcp", "ucx", "tls", "inproc"}
        How the workers talk; "ucx" (NVLink, InfiniBand) is for GPU clusters.
    memory : dict or GPUMemoryPlugin, optional
        :class:`GPUMemoryPlugin` options for every GPU worker, e.g. ``{"pool_size": "0.8"}``,
        or the plugin itself. Checked here, once; each worker is given the plugin configured
        from them.
    dashboard_address : str, optional
        Where the scheduler's dashboard listens (":0": any free port; None: none).
    security : distributed.Security, optional
        Certificates for ``protocol="tls"``; for a local cluster every role's, as
        :func:`dask_gpu_interop.tls.local_security` gives them.
    processes : bool, optional
        GPUs: whether each worker is a process of its own. By default a cluster of one GPU
        worker (one GPU visible, or ``n_workers=1``) over "tcp" or "inproc" runs it in this
        process: it shares the client's imports and memory pool, and spills device memory to
        host as dask-cuda's workers do; ``True`` starts a worker process as dask-cuda does
        (a task that crashes the process then takes only the worker down). Several GPU
        workers are always processes, one per GPU. CPUs: processes unless ``False``.

    Returns
    -------
    distributed.LocalCluster or dask_cuda.LocalCUDACluster
        The started cluster; close it (or use it as a context manager) when done.

    Raises
    ------
    OptionError
        A ``memory`` option is not valid.
    ClusterError
        The device or protocol cannot be had here.

    Examples
    --------
    >>> from distributed import Client
    >>> from dask_gpu_interop import local_cluster
    >>> with local_cluster("cpu", n_workers=2) as cluster, Client(cluster) as client:  # doctest: +SKIP
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    plugin = memory_plugin(memory)  # validate first, whatever the device
    device = check_local(device, protocol, n_workers=n_workers, processes=processes,
                         security=security, threads_per_worker=threads_per_worker)
    return start(device, plugin, n_workers=n_workers, threads_per_worker=threads_per_worker,
                 protocol=protocol, dashboard_address=dashboard_address, security=security,
                 processes=processes)


def memory_plugin(memory: dict | GPUMemoryPlugin | None) -> GPUMemoryPlugin:
    """The memory plugin of ``memory``, a :func:`local_cluster`'s or :func:`cluster_client`'s
    argument: the plugin itself, or made from a dict of its options (one that the commands'
    flags gave, already parsed as they were read, is not parsed again); OptionError."""
    if isinstance(memory, GPUMemoryPlugin):
        return memory
    if memory is not None and not isinstance(memory, dict):
        raise TypeError(f"memory= takes a dict of GPUMemoryPlugin options or a GPUMemoryPlugin, "
                        f"not a {type(memory).__name__}: e.g. memory={{'pool_size': '0.8'}}")
    checked = memory.checked() if isinstance(memory, CheckedOptions) else None
    if checked is not None:
        return GPUMemoryPlugin.from_config(checked)
    return GPUMemoryPlugin(**(memory or {}))


def start(device: str, plugin: GPUMemoryPlugin, *, n_workers: int | None = None,
          threads_per_worker: int | None = None, protocol: str = "tcp",
          dashboard_address: str | None = ":0", security=None, processes: bool | None = None):
    """:func:`local_cluster` on ``device`` ("gpu" or "cpu", as :func:`check_local` gave it),
    its GPU workers given ``plugin``: what was checked is not checked again."""
    if device == "gpu" and in_process(n_workers, protocol, processes):
        # The worker's GPU libraries are this process's: their settings go in its environment
        # (where none of them is imported yet).
        gpu_workers.apply()
        return LocalCluster(
            n_workers=1,
            threads_per_worker=threads_per_worker or gpu_workers.threads(),
            processes=False,
            protocol=protocol,
            dashboard_address=dashboard_address,
            security=security,
            data=device_spilling(),
            preload=[gpu_start.PRELOAD],
            plugins=(plugin,),  # the configured object itself: nothing to parse in the worker
        )
    if device == "gpu":
        # Over UCX this process's UCX setup runs in the background meanwhile (it may have begun
        # already: prepare_local_cluster), and the worker processes are forked from a server
        # that imports the GPU libraries once, started first so that its imports overlap
        # dask-cuda's and the scheduler's start.
        if protocol == "ucx":
            ucx_setup.begin()
        # Each worker process gets the GPU workers' settings from its nanny, at every (re)start;
        # a variable set in this process's environment wins over them.
        with fork_server.forking(protocol, "gpu"):
            import dask_cuda  # noqa: F401 - its import, begun while the server starts

            if protocol == "ucx":
                ucx_setup.finish()
            with dask.config.set({NANNY_ENVIRON: {
                    **gpu_workers.settings(), **dask.config.get(NANNY_ENVIRON, default={})}}):
                # Each worker is given the configured plugin with its other arguments, as
                # dask-cuda gives its own plugins: the worker process parses nothing.
                return compat.local_cuda_cluster(
                    [plugin],
                    n_workers=n_workers,
                    threads_per_worker=threads_per_worker or gpu_workers.threads(),
                    protocol=protocol,
                    dashboard_address=dashboard_address,
                    security=security,
                    preload=[gpu_start.PRELOAD, _interrupts.PRELOAD],
                )
    count = n_workers or max(1, min(4, os.cpu_count() or 1))
    # Worker processes forked from a server with pandas and dask's dataframes imported once,
    # where the setting asks for it (not by default).
    forking = fork_server.forking(protocol, "cpu") if processes is not False \
        else contextlib.nullcontext()  # fmt: skip
    with forking:
        return LocalCluster(
            n_workers=count,
            threads_per_worker=threads_per_worker or max(1, (os.cpu_count() or 1) // count),
            protocol=protocol,
            dashboard_address=dashboard_address,
            security=security,
            processes=processes is not False,
            # a terminal's Ctrl-C is for the client only; a closed worker's process ends at once
            preload=[_interrupts.PRELOAD, quick_exit.PRELOAD],
        )


def in_process(n_workers: int | None, protocol: str, processes: bool | None) -> bool:
    """Whether a local GPU cluster runs its worker in this process (see :func:`local_cluster`):
    one worker, over a protocol that needs no setup of its own, unless ``processes`` says."""
    if processes is not None:
        count = n_workers or device_mod.gpu_count()
        if not processes and count > 1:
            raise ClusterError(
                "{processes:=} runs one GPU worker in this process, but there would be "
                f"{count} (one per GPU): ask for one worker, or leave {{processes}} out",
                Setting("processes", processes))
        return not processes
    if protocol not in ("tcp", "inproc"):
        return False
    return (n_workers or device_mod.gpu_count()) == 1


def device_spilling():
    """The data store of an in-process GPU worker: dask-cuda's, which moves results from
    device to host memory above 80% of the device's (then to disk), as ``LocalCUDACluster``
    gives its workers."""
    from distributed.system import MEMORY_LIMIT

    from ..compat import device_host_file

    return device_host_file(0.8, MEMORY_LIMIT)


def prepare_local_cluster(device: str = "auto", n_workers: int | None = None,
                          protocol: str = "tcp", processes: bool | None = None, scheduler=None,
                          **others) -> bool:
    """Start now what :func:`cluster_client` given the same arguments will use as it starts a
    local cluster, so that it is ready by then: the fork server of its worker processes
    (:mod:`dask_gpu_interop.worker.fork_server`; by default for GPU workers over UCX) and, over UCX,
    this process's UCX setup (:mod:`dask_gpu_interop.cluster.ucx_setup`). Call it as
    early as you know the arguments, and after setting what the workers' processes start with
    (environment, ``distributed.nanny.pre-spawn-environ``): what it starts works in the
    background meanwhile.

    Parameters
    ----------
    device, n_workers, protocol, processes, scheduler
        As :func:`cluster_client` takes them. Nothing starts for a running cluster
        (``scheduler``) or workers in this process.
    **others
        :func:`cluster_client`'s other arguments, left aside.

    Returns
    -------
    bool
        Whether something was started (or already was); False also where the arguments
        cannot start a cluster here, which :func:`cluster_client` then says.

    Examples
    --------
    >>> import dask_gpu_interop
    >>> dask_gpu_interop.prepare_local_cluster(device="gpu", n_workers=4, protocol="ucx")  # doctest: +SKIP
    True
    """
    if scheduler:
        return False
    if (protocol == "ucx" and device in ("auto", "gpu") and processes is not False
            and not device_mod.gpus_hidden() and not _gpu_stack_missing()):
        # GPU worker processes, whatever the count: started without asking CUDA for the GPUs
        # first (its start can take a second); a machine without any is refused later
        started = fork_server.start(protocol, "gpu")
        return ucx_setup.begin() or started
    try:
        device = resolve_device(device)
        here = (in_process(n_workers, protocol, processes) if device == "gpu"
                else processes is False)  # fmt: skip
    except (ClusterError, RuntimeError, ValueError):  # cluster_client says what is wrong
        return False
    return not here and fork_server.start(protocol, device)

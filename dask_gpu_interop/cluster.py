"""A cluster with the memory plugin on every worker: a running one, or a local one we start.

    with cluster_client(device="auto", memory={"pool_size": "0.8"}) as (client, device):
        ...   # device: "gpu" (cuDF/CuPy workers) or "cpu" (pandas/NumPy workers)

With GPUs, :func:`local_cluster` is a dask-cuda ``LocalCUDACluster`` whose workers start with
the plugin's preload, so every framework is bound to the worker's memory resource before its
first allocation. With one GPU the worker runs in this process instead: a worker process
would start Python and import the GPU stack a second time, seconds that a command waits for
and the work does not need. Without GPUs it is a ``LocalCluster`` of processes.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys

import dask.config
from dask.utils import parse_timedelta
from distributed import Client, LocalCluster
from distributed.comm.addressing import parse_address

from . import device as device_mod
from . import ucx_setup
from .memory.config import PRELOAD_PREFIX
from .memory.errors import Setting, Worded
from .memory.plugin import GPUMemoryPlugin
from .scheduler_workers import workers_of
from .serialize import register as register_serializers
from .shuffle_method import shuffle_config
from .worker import _interrupts, fork_server, gpu_workers, quick_exit

PROTOCOLS = ("tcp", "ucx", "tls", "inproc")
NANNY_ENVIRON = "distributed.nanny.environ"
CONNECT_TIMEOUT = "10s"


class ClusterError(Worded, RuntimeError):
    """The cluster asked for cannot be had: no GPU, no scheduler at the address (or something
    else answers there), a protocol the device cannot use, more workers than the machine
    holds, workers that cannot import the program's code.

    Raised before anything starts or any work is sent. The message says what to change:
    ``str(err)`` names the options as keyword arguments (``device='gpu'``),
    ``err.message(flags="")`` as flags (``--device``).

    Examples
    --------
    >>> from dask_gpu_interop import ClusterError, local_cluster
    >>> try:
    ...     local_cluster("cpu", protocol="ucx")
    ... except ClusterError as err:
    ...     print(err.message(flags=""))
    --protocol 'ucx' is for GPU clusters (distributed-ucxx): use --protocol 'tcp' on CPUs
    """


DEVICES = ("auto", "gpu", "cpu")
GPU_STACK = ("cudf", "cupy", "dask_cuda")


def _gpu_stack_missing() -> list[str]:
    return [name for name in GPU_STACK if importlib.util.find_spec(name) is None]


def resolve_device(device: str = "auto") -> str:
    """The device a local cluster would use here: ``"gpu"`` or ``"cpu"``.

    Parameters
    ----------
    device : {"auto", "gpu", "cpu"}
        What is asked for. "auto" is "gpu" when this machine has a CUDA GPU and the GPU
        stack (cuDF, CuPy, dask-cuda), else "cpu".

    Returns
    -------
    str
        ``"gpu"`` or ``"cpu"``.

    Raises
    ------
    ClusterError
        ``device="gpu"`` where no GPU is visible or the GPU stack is not installed; the
        message says what to install or to change.
    ValueError
        ``device`` is none of the three.

    Examples
    --------
    >>> from dask_gpu_interop import resolve_device
    >>> resolve_device("cpu")
    'cpu'
    >>> resolve_device("auto") in ("gpu", "cpu")
    True
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    have_gpu = device_mod.gpu_count() > 0
    missing = _gpu_stack_missing() if have_gpu else []
    if device == "auto":
        return "gpu" if have_gpu and not missing else "cpu"
    if not have_gpu:
        raise ClusterError(
            "{device:=} but no CUDA GPU is visible here (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES), or use {device:'cpu'}", Setting("device", device))
    if missing:
        raise ClusterError(
            f"{{device:=}} needs {', '.join(missing)}: pip install 'dask-gpu-interop[cuda13]' "
            "(or [cuda12]), or use {device:'cpu'}", Setting("device", device))
    return "gpu"


def _check_protocol(protocol: str, device: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    if protocol == "ucx" and device != "gpu":
        raise ClusterError("{protocol:=} is for GPU clusters (distributed-ucxx): use "
                           "{protocol:'tcp'} on CPUs", Setting("protocol", protocol))


def _check_tls(protocol: str, security) -> None:
    """ClusterError unless a local cluster over "tls" has every role's certificates (given,
    or in dask config): without them its scheduler fails to start, in a long traceback."""
    if protocol != "tls":
        return
    from distributed import Security

    security = security or Security()
    if not all((security.tls_ca_file, security.tls_scheduler_cert, security.tls_worker_cert,
                security.tls_client_cert)):
        raise ClusterError(
            "{protocol:=} needs certificates for the scheduler, the workers and the client: "
            "make them (dask-gpu-interop tls make DIR), then give them "
            "(security=dask_gpu_interop.tls.local_security(DIR), or in dask config: eval "
            "\"$(dask-gpu-interop tls env DIR --role ROLE)\" for each of scheduler, worker and "
            "client), or use {protocol:'tcp'}", Setting("protocol", protocol))


WORKER_MEMORY = 256 * 2**20  # what a CPU worker process holds before its data, with room to run
WORKERS_PER_CORE = 4  # beyond, processes only wait for the cores (and take ages to start)


def _check_workers(n_workers: int | None, device: str, processes: bool | None) -> None:
    """ClusterError, before anything starts, for more local workers than this machine can
    hold: one per GPU; CPU worker processes as the cores and the free memory allow."""
    if n_workers is None:
        return
    if n_workers < 1:
        raise ClusterError("{n_workers:=}: give at least 1", Setting("n_workers", n_workers, flag="workers"))
    if device == "gpu":
        gpus = device_mod.gpu_count()
        if n_workers > gpus:
            raise ClusterError(
                f"{{n_workers:=}}: a GPU worker per GPU, and {gpus} GPU(s) are visible here: "
                f"ask for at most {gpus}", Setting("n_workers", n_workers, flag="workers"))
        return
    if processes is False:
        return
    import psutil
    from dask.system import cpu_count
    from dask.utils import format_bytes

    free, cores = psutil.virtual_memory().available, cpu_count()  # as CPU quotas allow
    by_memory, by_cores = free // WORKER_MEMORY, WORKERS_PER_CORE * cores
    if n_workers > min(by_memory, by_cores):
        why = (f"{format_bytes(free)} of memory free, {format_bytes(WORKER_MEMORY)} a worker "
               "process" if by_memory < by_cores else
               f"{cores} cores, {WORKERS_PER_CORE} worker processes a core")
        raise ClusterError(
            f"{{n_workers:=}} is more than this machine holds: at most "
            f"{max(1, min(by_memory, by_cores))} worker processes here ({why}); ask for fewer "
            "(and more threads each, if you want them)", Setting("n_workers", n_workers, flag="workers"))


def check_local(device: str = "auto", protocol: str = "tcp", *, n_workers: int | None = None,
                processes: bool | None = None, security=None) -> str:
    """The device a local cluster would use, after checking that it can (the protocol, its
    certificates, the number of workers); ClusterError."""
    device = resolve_device(device)
    _check_protocol(protocol, device)
    _check_tls(protocol, security)
    _check_workers(n_workers, device, processes)
    return device


def local_cluster(
    device: str = "auto",
    *,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    protocol: str = "tcp",
    memory: dict | None = None,
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
        "gpu": a dask-cuda ``LocalCUDACluster``, each worker starting with the plugin's
        preload (every framework bound before its first allocation). "cpu": a
        ``LocalCluster`` of processes. "auto": GPUs when present (:func:`resolve_device`).
    n_workers : int, optional
        Workers: by default one per GPU, or up to 4 processes sharing the cores.
    threads_per_worker : int, optional
        Threads of each worker: on GPUs ``gpu-interop.worker.threads`` (1; with 2, one task's
        host work overlaps another's kernels, each thread on its own CUDA stream, see
        :mod:`dask_gpu_interop.worker.gpu_workers`); on CPUs the cores shared out.
    protocol : {"tcp", "ucx", "tls", "inproc"}
        How the workers talk; "ucx" (NVLink, InfiniBand) is for GPU clusters.
    memory : dict, optional
        :class:`GPUMemoryPlugin` options for every GPU worker, e.g. ``{"pool_size": "0.8"}``.
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
    plugin = GPUMemoryPlugin(**(memory or {}))  # validate first, whatever the device
    device = check_local(device, protocol, n_workers=n_workers, processes=processes,
                         security=security)
    preload = {"preload": ["dask_gpu_interop.preload"],
               "preload_argv": plugin.config.argv(PRELOAD_PREFIX)}
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
            **preload,
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
            from dask_cuda import LocalCUDACluster

            if protocol == "ucx":
                ucx_setup.finish()
            with dask.config.set({NANNY_ENVIRON: {
                    **gpu_workers.settings(), **dask.config.get(NANNY_ENVIRON, default={})}}):
                return LocalCUDACluster(
                    n_workers=n_workers,
                    threads_per_worker=threads_per_worker or gpu_workers.threads(),
                    protocol=protocol,
                    dashboard_address=dashboard_address,
                    security=security,
                    **{**preload, "preload": [*preload["preload"], _interrupts.PRELOAD]},
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

    from .compat import device_host_file

    return device_host_file(0.8, MEMORY_LIMIT)


def workers_device(client, device: str = "auto") -> str:
    """``"gpu"`` or ``"cpu"``: what the workers of a running cluster can do, checked against
    ``device`` (each worker resolves "auto" for itself; GPUs only if every worker has one)."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: choose one of {', '.join(DEVICES)}")
    found = set(client.run(resolve_device, "auto").values())
    have = "gpu" if found == {"gpu"} else "cpu"
    if device == "gpu" and have != "gpu":
        raise ClusterError(
            "{device:=} but not every worker of the cluster has a GPU and the GPU stack "
            "(cuDF, CuPy, dask-cuda); start GPU workers, or use {device:'cpu'}",
            Setting("device", device))
    return device if device != "auto" else have


def connect(
    scheduler: str | None = None,
    *,
    scheduler_file: str | None = None,
    security=None,
    timeout: str = CONNECT_TIMEOUT,
) -> Client:
    """A Client of the scheduler at the address ``scheduler``, or at the one written in
    ``scheduler_file`` (give one of them); ClusterError when none answers within ``timeout``,
    when what answers is not a Dask scheduler, or when the file is missing or holds no address.

    ``security``: a ``distributed.Security`` (e.g. ``dask_gpu_interop.tls.security(DIR,
    "client")``); None leaves it to dask config.
    """
    if (scheduler is None) == (scheduler_file is None):
        raise ValueError("give one of scheduler= (an address) or scheduler_file=")
    where = scheduler
    if scheduler_file is not None:
        scheduler = _address_in(scheduler_file)
        where = f"{scheduler} (the address in {scheduler_file})"
    _check_scheduler(scheduler, security, parse_timedelta(timeout), where)
    try:
        return Client(scheduler, security=security, timeout=timeout)
    except (OSError, TimeoutError) as err:
        failure = type(err).__name__
    # The half-built Client is garbage now: finalize it here. Left to a later collection, its
    # close can run inside another Client's start and wait forever for the lock that start
    # holds (distributed's LoopRunner lock is one for all clients).
    gc.collect()
    raise ClusterError(
        f"no scheduler answered at {where} within {timeout} ({failure}): "
        "check the address, or start one (python -m dask scheduler)")


def _address_in(scheduler_file: str) -> str:
    """The address a scheduler wrote in ``scheduler_file``; ClusterError when there is none
    (a Client would wait for the file forever)."""
    import json

    try:
        with open(scheduler_file, encoding="utf-8") as f:
            return json.load(f)["address"]
    except FileNotFoundError:
        raise ClusterError(
            f"no scheduler file at {scheduler_file}: start the scheduler with --scheduler-file "
            f"{scheduler_file} (python -m dask scheduler --scheduler-file ...), or check the "
            "path") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ClusterError(
            f"{scheduler_file} holds no scheduler address ({type(err).__name__}: {err}): give "
            "the file `dask scheduler --scheduler-file` wrote") from None


def _check_scheduler(address: str, security, timeout: float, where: str) -> None:
    """ClusterError unless a Dask scheduler answers at ``address`` within ``timeout`` seconds
    (``where``: the address as the messages name it).

    distributed's Client can wait forever where something else listens (an HTTP server, the
    dashboard's port): its handshake reads the reply as frames. Here the whole attempt, on an
    event loop of its own, is bounded."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed import Security
    from distributed.comm import connect as comm_connect

    security = security or Security()
    scheme, location = parse_address(address)
    if scheme == "tls" and not security.tls_client_cert and not security.tls_ca_file:
        raise ClusterError(
            f"{where} is a tls:// address and no TLS settings are given: pass the client's "
            "certificates (the commands' --tls DIR from `dask-gpu-interop tls make`, "
            "DASK_CONFIG=DIR/client.yaml, or security=dask_gpu_interop.tls.security(DIR))")
    if scheme in ("tcp", "tls"):
        _check_listening(where, location, timeout)
    args = security.get_connection_args("client")

    async def identity():
        comm = await comm_connect(address, timeout=timeout, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded():
        return await asyncio.wait_for(identity(), timeout)

    with ThreadPoolExecutor(1, thread_name_prefix="scheduler-check") as pool:
        try:
            answer = pool.submit(asyncio.run, bounded()).result()
        except TimeoutError:
            failure = f"no answer within {timeout:g} s"
        except (OSError, ValueError, TypeError) as err:
            failure = f"{type(err).__name__}: {err}".strip().rstrip(":")
        else:
            kind = answer.get("type") if isinstance(answer, dict) else None
            if kind == "Scheduler":
                return
            failure = f"it answered as {kind or type(answer).__name__}, not a scheduler"
    raise ClusterError(
        f"no Dask scheduler answered at {where} ({failure[:200]}): "
        "check the host and port (the scheduler's, not its dashboard's or a worker's), and the "
        "protocol (tcp:// or tls://, with --tls for a TLS scheduler)")


WORKERS_TIMEOUT = 10  # seconds a running cluster has for its first worker to join


def _check_workers_joined(client, scheduler: str) -> None:
    """ClusterError where no worker joins the running cluster within WORKERS_TIMEOUT: its work
    would wait for one forever."""
    if workers_of(client):
        return
    try:
        client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
    except TimeoutError:
        raise ClusterError(
            f"no worker has joined the scheduler at {scheduler} within {WORKERS_TIMEOUT} s: "
            f"start workers (python -m dask worker {scheduler}), or wait for them first "
            "(dask-gpu-interop wait-for-workers)") from None


def _check_listening(where: str, location: str, timeout: float) -> None:
    """ClusterError, at once, where the host is unknown or nothing listens at the port."""
    import socket

    from distributed.comm.addressing import parse_host_port

    try:
        host, port = parse_host_port(location)
    except ValueError:
        raise ClusterError(f"{where} is not an address: write HOST:PORT, e.g. "
                           "tcp://127.0.0.1:8786") from None
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror:
        raise ClusterError(f"{where}: no host named {host} is known here: check the "
                           "name") from None
    except ConnectionRefusedError:
        raise ClusterError(f"no scheduler answered at {where}: nothing listens there; check "
                           "the address, or start one (python -m dask scheduler)") from None
    except OSError:  # unreachable or filtered: the scheduler check says so within its time
        pass


def prepare_local_cluster(device: str = "auto", n_workers: int | None = None,
                          protocol: str = "tcp", processes: bool | None = None, scheduler=None,
                          **others) -> bool:
    """Start now what :func:`cluster_client` given the same arguments will use as it starts a
    local cluster, so that it is ready by then: the fork server of its worker processes
    (:mod:`dask_gpu_interop.worker.fork_server`; by default for GPU workers over UCX) and, over UCX,
    this process's UCX setup (:mod:`dask_gpu_interop.ucx_setup`). Call it as
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


@contextlib.contextmanager
def cluster_client(
    scheduler: str | None = None,
    *,
    device: str = "auto",
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    protocol: str = "tcp",
    memory: dict | None = None,
    security=None,
    memory_plot=None,
    processes: bool | None = None,
):
    """A Client, and the device its workers use, for the length of a ``with`` block.

    With GPU workers, dask's own ``shuffle``, ``merge`` and ``groupby`` use its task shuffle
    for the block, which keeps cuDF partitions on the devices, instead of its p2p shuffle
    through host memory (:func:`shuffle_config`; a method you set in dask config is kept).

    Parameters
    ----------
    scheduler : str, optional
        A running cluster's scheduler address; its workers decide the device, and
        ``memory`` (when given) is registered on them as a :class:`GPUMemoryPlugin`. Without
        it a :func:`local_cluster` starts, and is closed at the end of the block.
    device, n_workers, threads_per_worker, protocol, memory, security, processes
        As :func:`local_cluster` takes them (``device`` is checked against a running
        cluster's workers too).
    memory_plot : str, optional
        A PNG path: each worker's device memory over the block is plotted there.

    Yields
    ------
    tuple of (distributed.Client, str)
        The client, and ``"gpu"`` or ``"cpu"``.

    Raises
    ------
    OptionError
        A ``memory`` option is not valid (before anything starts or connects).
    ClusterError
        No scheduler answers at ``scheduler``, or the device asked for cannot be had.

    Examples
    --------
    >>> from dask_gpu_interop import cluster_client
    >>> with cluster_client(device="auto", memory={"pool_size": "0.8"}) as (client, device):  # doctest: +SKIP
    ...     print(device)
    gpu
    """
    if scheduler is not None:
        plugin = GPUMemoryPlugin(**(memory or {}))  # validate before connecting
        with connect(scheduler, security=security) as client:
            _check_workers_joined(client, scheduler)
            device = workers_device(client, device)
            if device == "gpu" and memory is not None:
                client.register_plugin(plugin)
            _take_spillable(device == "gpu" and memory is not None and plugin)
            with _recording(client, memory_plot), dask.config.set(shuffle_config(device)):
                yield client, device
        return
    device = check_local(device, protocol, n_workers=n_workers, processes=processes,
                         security=security)
    cluster = local_cluster(
        device, n_workers=n_workers, threads_per_worker=threads_per_worker, protocol=protocol,
        memory=memory, security=security, processes=processes,
    )
    _take_spillable(device == "gpu" and GPUMemoryPlugin(**(memory or {})))
    with cluster, Client(cluster, security=security) as client, _recording(client, memory_plot), \
            dask.config.set(shuffle_config(device)):
        yield client, device


def _take_spillable(plugin) -> None:
    """Where ``plugin`` turns cuDF's spilling on on the workers, turn it on in this process
    too: their cuDF results arrive as spillable buffers, which cuDF builds only where its
    spilling is on (nothing here spills unless this process runs out of device memory). cuDF
    reads the setting when this process makes its first cuDF object; it stays on after. And
    register cuDF's serializers here (:mod:`.serialize.cudf`), as the workers do."""
    if not plugin or plugin.config.spill is not True:
        return
    # and cuDF's serializers, which a dask-cuda imported since may have set aside
    register_serializers(["cudf"])
    if "cudf" in sys.modules:
        sys.modules["cudf"].set_option("spill", True)
    else:  # no import (and no GPU context) until this process uses cuDF
        os.environ["CUDF_SPILL"] = "on"


def _recording(client, png):
    if png is None:
        return contextlib.nullcontext()
    from .memory.timeline import record_memory

    return record_memory(client, png=png)

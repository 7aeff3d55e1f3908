"""What a local cluster asks of this machine, checked before anything starts: the device, the
protocol and its certificates, the number of workers. :class:`ClusterError` says what to change.
"""

from __future__ import annotations

import importlib.util
import numbers

from .. import device as device_mod
from ..memory.errors import Setting, Worded

PROTOCOLS = ("tcp", "ucx", "tls", "inproc")


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


def check_security(security) -> None:
    """TypeError unless ``security`` is None or a ``distributed.Security``: a folder of
    certificates given as it is would fail deep in distributed."""
    if security is None:
        return
    from distributed import Security

    if not isinstance(security, Security):
        raise TypeError(
            f"security= takes a distributed.Security, not a {type(security).__name__}: for the "
            "certificates of `dask-gpu-interop tls make DIR`, dask_gpu_interop.tls.security(DIR) "
            "(a client's) or dask_gpu_interop.tls.local_security(DIR) (a local cluster's)")


def _check_inproc(protocol: str, device: str, n_workers: int | None,
                  processes: bool | None) -> None:
    """ClusterError for "inproc" between workers that are not all in this process: distributed
    fails to start their nannies, in a long traceback."""
    if protocol != "inproc":
        return
    if device == "cpu" and processes is not False:
        raise ClusterError(
            "{protocol:=} connects workers in this process only, and CPU workers are processes "
            "of their own unless told: add {processes:False}, or use {protocol:'tcp'}",
            Setting("protocol", protocol), Setting("processes", processes))
    if device == "gpu" and (processes or (n_workers or device_mod.gpu_count()) > 1):
        raise ClusterError(
            "{protocol:=} connects workers in this process only, where one GPU worker runs "
            "(one worker, processes left out); for worker processes use {protocol:'tcp'} or "
            "{protocol:'ucx'}", Setting("protocol", protocol))


def _check_counts(n_workers, threads_per_worker, processes) -> None:
    """ClusterError for a count that is not a whole number of at least 1, or ``processes``
    that is not True, False or None: said at once, rather than deep in distributed (or, for
    no threads, silently taken as the default)."""
    for name, value, flag in (("n_workers", n_workers, "workers"),
                              ("threads_per_worker", threads_per_worker, "")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ClusterError(f"{{{name}:=}}: give a whole number, such as {{{name}:2}}",
                               Setting(name, value, flag=flag))
        if value < 1:
            raise ClusterError(f"{{{name}:=}}: give at least 1, or leave it out for the "
                               "default", Setting(name, value, flag=flag))
    if processes is not None and not isinstance(processes, bool):
        raise ClusterError("{processes:=}: give True or False, or leave it out",
                           Setting("processes", processes))


WORKER_MEMORY = 256 * 2**20  # what a CPU worker process holds before its data, with room to run
WORKERS_PER_CORE = 4  # beyond, processes only wait for the cores (and take ages to start)


def _check_workers(n_workers: int | None, device: str, processes: bool | None) -> None:
    """ClusterError, before anything starts, for more local workers than this machine can
    hold: one per GPU; CPU worker processes as the cores and the free memory allow."""
    if n_workers is None:
        return
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
                processes: bool | None = None, security=None,
                threads_per_worker: int | None = None) -> str:
    """The device a local cluster would use, after checking that it can (the protocol, its
    certificates, the number of workers and threads); ClusterError."""
    _check_counts(n_workers, threads_per_worker, processes)
    check_security(security)
    device = resolve_device(device)
    _check_protocol(protocol, device)
    _check_inproc(protocol, device, n_workers, processes)
    _check_tls(protocol, security)
    _check_workers(n_workers, device, processes)
    return device

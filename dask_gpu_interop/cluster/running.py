"""A running cluster: a Client of its scheduler, asked first whether a Dask scheduler answers
at the address (something else there, or nothing, is said at once, where a Client could wait
for ever), and what its workers can do.
"""

from __future__ import annotations

import gc

from dask.utils import parse_timedelta
from distributed import Client
from distributed.comm.addressing import parse_address

from .._client import workers_of
from ..memory.errors import Setting
from .checks import DEVICES, ClusterError, check_security, resolve_device

CONNECT_TIMEOUT = "10s"


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
    _check_address(scheduler)
    check_security(security)
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


def _check_address(scheduler) -> None:
    """TypeError unless ``scheduler`` is None or an address (a str): a cluster, a client or a
    port number given for it is said with the fix."""
    if scheduler is None or isinstance(scheduler, str):
        return
    given = type(scheduler).__name__
    if hasattr(scheduler, "scheduler_address"):  # a cluster: LocalCluster, LocalCUDACluster
        raise TypeError(f"scheduler= takes the scheduler's address, not a {given}: pass its "
                        "scheduler_address (a string such as 'tcp://127.0.0.1:8786')")
    if hasattr(scheduler, "scheduler_info"):  # a Client
        raise TypeError(f"scheduler= takes the scheduler's address, not a {given}: use that "
                        "client as it is, or pass client.scheduler.address")
    raise TypeError(f"scheduler={scheduler!r}: give the scheduler's address as a string, such "
                    "as 'tcp://127.0.0.1:8786'")


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
    if address.split("://", 1)[0].lower() in ("http", "https"):
        raise ClusterError(
            f"{where} is a web address: give the scheduler's own, tcp://HOST:PORT (port 8786 "
            "unless it was started with another; the dashboard's web port is not it)")
    scheme, location = parse_address(address)
    if scheme == "tcp" and security.require_encryption:
        raise ClusterError(
            f"{where} is a plain tcp:// address, and the TLS settings given require encryption "
            "(the commands' --tls, security=, or dask config): give the scheduler's tls:// "
            "address, or leave the TLS settings out for a scheduler without TLS")
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
        except MemoryError:  # the reply's first bytes read as a length: not Dask's protocol
            failure = "what answered speaks another protocol, a web server's perhaps"
        except Exception as err:  # whatever the reply made of the handshake: said, not raised
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

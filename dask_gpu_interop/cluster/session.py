"""A Client, and the device its workers use, for the length of a ``with`` block: of a running
cluster, or of a local one started for the block and closed at its end.

    with cluster_client(device="auto", memory={"pool_size": "0.8"}) as (client, device):
        ...   # device: "gpu" (cuDF/CuPy workers) or "cpu" (pandas/NumPy workers)
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import NamedTuple

import dask.config
from distributed import Client

from ..all_to_all.dask_method import shuffle_config
from ..memory.plugin import GPUMemoryPlugin
from ..serialize import register as register_serializers
from .checks import check_local
from .local import memory_plugin, start
from .running import _check_workers_joined, connect, workers_device


class ClientAndDevice(NamedTuple):
    """What :func:`cluster_client` yields: the client, and "gpu" or "cpu". Unpacked as it is
    given (``as (client, device)``); used as the client, it says so."""

    client: Client
    device: str

    def __getattr__(self, name: str):
        raise AttributeError(
            f"cluster_client yields (client, device), and {name!r} is the client's: unpack it, "
            f"`with cluster_client(...) as (client, device):`, then client.{name}")


class LocalOnlyWarning(UserWarning):
    """Options of a local cluster given with a running cluster's address: they are not used."""


#: The options of a local cluster, and the value each has when not given.
LOCAL_ONLY = {"n_workers": None, "threads_per_worker": None, "processes": None,
              "protocol": "tcp"}


@contextlib.contextmanager
def cluster_client(
    scheduler: str | None = None,
    *,
    device: str = "auto",
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    protocol: str = "tcp",
    memory: dict | GPUMemoryPlugin | None = None,
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

    Warns
    -----
    LocalOnlyWarning
        ``n_workers``, ``threads_per_worker``, ``processes`` or ``protocol`` given with
        ``scheduler``: the running cluster keeps its own workers.

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
        plugin = memory_plugin(memory)  # validate before connecting
        given = {"n_workers": n_workers, "threads_per_worker": threads_per_worker,
                 "processes": processes, "protocol": protocol}
        unused = [name for name, value in given.items() if value != LOCAL_ONLY[name]]
        if unused:
            warnings.warn(f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} for a "
                          f"local cluster; the running cluster at {scheduler} keeps the workers "
                          "it has", LocalOnlyWarning, stacklevel=3)
        with connect(scheduler, security=security) as client:
            _check_workers_joined(client, scheduler)
            device = workers_device(client, device)
            if device == "gpu" and memory is not None:
                client.register_plugin(plugin)
            _take_spillable(device == "gpu" and memory is not None and plugin)
            with _recording(client, memory_plot), dask.config.set(shuffle_config(device)):
                yield ClientAndDevice(client, device)
        return
    device = check_local(device, protocol, n_workers=n_workers, processes=processes,
                         security=security, threads_per_worker=threads_per_worker)
    plugin = memory_plugin(memory)  # the one configured object, for the workers and here
    cluster = start(device, plugin, n_workers=n_workers, threads_per_worker=threads_per_worker,
                    protocol=protocol, security=security, processes=processes)
    _take_spillable(device == "gpu" and plugin)
    with cluster, Client(cluster, security=security) as client, _recording(client, memory_plot), \
            dask.config.set(shuffle_config(device)):
        yield ClientAndDevice(client, device)


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
    from ..memory.timeline import record_memory

    return record_memory(client, png=png)

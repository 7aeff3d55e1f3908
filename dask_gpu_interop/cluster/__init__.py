"""The client side of a cluster: start a local one, connect to a running one, and use it.

    with cluster_client(device="auto", memory={"pool_size": "0.8"}) as (client, device):
        ...   # device: "gpu" (cuDF/CuPy workers) or "cpu" (pandas/NumPy workers)

- ``checks``: what a local cluster asks of this machine, checked before anything starts
  (:func:`resolve_device`, :class:`ClusterError`);
- ``local``: a local cluster with the memory plugin on every GPU worker
  (:func:`local_cluster`), and what can start before it (:func:`prepare_local_cluster`);
- ``running``: a Client of a running cluster's scheduler, checked first;
- ``session``: :func:`cluster_client`, either of them for a ``with`` block (it yields a
  :class:`ClientAndDevice`; :class:`LocalOnlyWarning` where a local cluster's options come
  with a running cluster's address);
- ``options``: click options for commands that start or reach a cluster; ``ucx_setup``: this
  process's UCX setup, begun early; ``work_stealing``, ``workers_import``: what a program asks
  of a running cluster.
"""

from .checks import ClusterError, resolve_device
from .local import local_cluster, prepare_local_cluster
from .session import ClientAndDevice, LocalOnlyWarning, cluster_client

__all__ = ["ClientAndDevice", "ClusterError", "LocalOnlyWarning", "cluster_client",
           "local_cluster", "prepare_local_cluster", "resolve_device"]

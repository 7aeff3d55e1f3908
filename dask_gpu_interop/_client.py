"""The client a public function is given: a ``distributed.Client``, said plainly when it is not
(a cluster object is the usual mistake: it has no ``run``, and the error would not say so)."""

from __future__ import annotations


def require_client(client, caller: str):
    """``client`` when it is a ``distributed.Client``; TypeError naming ``caller`` and the fix."""
    from distributed import Client

    if isinstance(client, Client):
        return client
    given = type(client).__name__
    if hasattr(client, "scheduler_address"):  # a cluster: LocalCluster, LocalCUDACluster, ...
        fix = "pass its client: Client(cluster), or the one cluster_client yields"
    else:
        fix = "pass a distributed.Client of the cluster"
    raise TypeError(f"{caller}() takes the cluster's Client, not a {given}: {fix}")

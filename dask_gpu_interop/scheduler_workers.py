"""The cluster's workers as its scheduler knows them at the moment of asking.

``Client.scheduler_info()["workers"]`` is the client's cache, which the client's own periodic
refresh rewrites without the workers (it asks the scheduler for none, to stay light on large
clusters). A call can therefore return before, and read after, that refresh: it then lists
fewer workers than the cluster has, and what is decided from it (how many workers train, where
partitions go, how much memory a shuffle has) is silently wrong. The functions here ask the
scheduler, whose answer lists every worker unless told otherwise, and return that answer.
"""

from __future__ import annotations

from ._client import require_client


def workers_of(client) -> dict[str, dict]:
    """:func:`cluster_workers` for an object known to be a client (no check)."""
    return dict(client.sync(client.scheduler.identity).get("workers") or {})


def cluster_workers(client) -> dict[str, dict]:
    """Every worker of ``client``'s cluster now, asked of the scheduler at each call.

    Use it instead of ``client.scheduler_info()["workers"]``, which can list fewer workers
    than have joined (see the module's description).

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster.

    Returns
    -------
    dict
        Worker address -> the scheduler's description of that worker (``name``,
        ``nthreads``, ``memory_limit``, ``gpu``, ...).

    Raises
    ------
    TypeError
        ``client`` is not a ``distributed.Client`` (a cluster object, say).

    Examples
    --------
    >>> from distributed import Client
    >>> from dask_gpu_interop import cluster_workers, local_cluster
    >>> with local_cluster("cpu", n_workers=2) as cluster, Client(cluster) as client:  # doctest: +SKIP
    ...     client.wait_for_workers(2)
    ...     len(cluster_workers(client))
    2
    """
    return workers_of(require_client(client, "cluster_workers"))

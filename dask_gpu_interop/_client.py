"""What the library asks of the client a public function is given: that it is a
``distributed.Client``, said plainly when it is not (a cluster object is the usual mistake: it
has no ``run``, and the error would not say so), and the cluster's workers as its scheduler
knows them at the moment of asking.

``Client.scheduler_info()["workers"]`` is the client's cache, which the client's own periodic
refresh rewrites without the workers (it asks the scheduler for none, to stay light on large
clusters). A call can therefore return before, and read after, that refresh: it then lists
fewer workers than the cluster has, and what is decided from it (how many workers train, where
partitions go, how much memory a shuffle has) is silently wrong. :func:`cluster_workers` asks
the scheduler, whose answer lists every worker unless told otherwise, and returns that answer.
"""

from __future__ import annotations


def require_client(client, caller: str):
    """``client`` when it is a ``distributed.Client`` that is open; TypeError (not a client) or
    ValueError (a closed one) naming ``caller`` and the fix."""
    from distributed import Client

    if isinstance(client, Client):
        if client.status in ("closing", "closed"):
            raise ValueError(f"{caller}() was given a closed Client: call it while the client "
                             "is open (inside its `with` block), or connect a new one")
        return client
    given = type(client).__name__
    if isinstance(client, tuple) and client and isinstance(client[0], Client):
        raise TypeError(f"{caller}() takes the cluster's Client, not the (client, device) that "
                        "cluster_client yields: unpack it, `with cluster_client(...) as "
                        "(client, device):`")
    if hasattr(client, "scheduler_address"):  # a cluster: LocalCluster, LocalCUDACluster, ...
        fix = "pass its client: Client(cluster), or the one cluster_client yields"
    else:
        fix = "pass a distributed.Client of the cluster"
    raise TypeError(f"{caller}() takes the cluster's Client, not a {given}: {fix}")


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
    ValueError
        ``client`` is closed.

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

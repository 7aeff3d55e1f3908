"""The cluster's workers asked of the scheduler: every one, at every call."""

from __future__ import annotations

import dask
import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import cluster_workers


def test_every_worker_at_every_call_while_the_client_refreshes_its_cache():
    """The client's periodic refresh, made frequent here, rewrites the cache that
    ``scheduler_info`` reads with few workers or none; each answer here is the scheduler's."""
    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}), \
            LocalCluster(n_workers=4, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(4)
        counts = [len(cluster_workers(client)) for _ in range(500)]
    assert counts == [4] * 500


def test_a_cluster_object_is_named_with_its_fix():
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with pytest.raises(TypeError, match=r"cluster_workers\(\) takes the cluster's Client, "
                                            r"not a LocalCluster: pass its client"):
            cluster_workers(cluster)

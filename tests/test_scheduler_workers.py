"""The cluster's workers asked of the scheduler: every one, at every call, on any distributed."""

from __future__ import annotations

import dask
import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import cluster_workers
from dask_gpu_interop.scheduler_workers import workers_of


def test_every_worker_at_every_call_while_the_client_refreshes_its_cache():
    """The client's periodic refresh, made frequent here, rewrites the cache that
    ``scheduler_info`` reads with few workers or none; each answer here is the scheduler's."""
    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}), \
            LocalCluster(n_workers=4, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(4)
        counts = [len(cluster_workers(client)) for _ in range(500)]
    assert counts == [4] * 500


class _Scheduler:
    """distributed's scheduler of ``count`` workers: it lists five unless asked for all."""

    def __init__(self, count: int):
        self.workers = {f"tcp://10.0.0.{i}:1234": {"name": i} for i in range(count)}

    def identity(self, n_workers: int = 5):
        shown = list(self.workers) if n_workers == -1 else list(self.workers)[:n_workers]
        return {"workers": {address: self.workers[address] for address in shown}}


class _OldScheduler(_Scheduler):
    """A scheduler from before the ``n_workers`` argument: it lists every worker."""

    def identity(self):
        return {"workers": dict(self.workers)}


class _Client:
    def __init__(self, scheduler):
        self.scheduler = scheduler

    def sync(self, function, *args, **kwargs):
        return function(*args, **kwargs)


@pytest.mark.parametrize("kind", [_Scheduler, _OldScheduler])
def test_every_worker_of_a_large_cluster_on_every_distributed(kind):
    scheduler = kind(8)
    assert workers_of(_Client(scheduler)) == scheduler.workers


def test_a_cluster_object_is_named_with_its_fix():
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with pytest.raises(TypeError, match=r"cluster_workers\(\) takes the cluster's Client, "
                                            r"not a LocalCluster: pass its client"):
            cluster_workers(cluster)

"""A worker killed in the middle of a real computation: its nanny replaces it, the registered
GPUMemoryPlugin is applied to the new worker, and the result is the same as without the fault
(the lost pieces are recomputed; nothing is lost)."""

from __future__ import annotations

import os
import signal
import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client

from dask_gpu_interop import GPUMemoryPlugin, memory_report

from .clusters import cpu_cluster

pytestmark = pytest.mark.slow  # real processes: several seconds

PARTITIONS = 40


def make_partition(i: int, delay: float = 0.15) -> pd.DataFrame:
    """Deterministic data, slow enough that the job runs for a few seconds."""
    time.sleep(delay)
    rng = np.random.default_rng(i)
    n = 20_000
    return pd.DataFrame({
        "key": rng.integers(0, 64, n),
        "x": rng.random(n),
        "y": rng.integers(0, 1000, n),
    })


def groupby_job():
    frame = dd.from_map(make_partition, range(PARTITIONS))
    return frame.groupby("key").agg({"x": "sum", "y": "mean"})


def _plugin_names(dask_worker):
    return sorted(dask_worker.plugins)


@pytest.fixture
def fresh_client():
    """A client of a cluster of its own: the test kills its workers."""
    with cpu_cluster() as cluster, Client(cluster) as client:
        yield client


def test_killed_worker_is_replaced_with_the_plugin_and_the_result_is_unchanged(fresh_client):
    client = fresh_client
    plugin = GPUMemoryPlugin(pool_size="0.5")
    client.register_plugin(plugin)
    expected = client.compute(groupby_job()).result(timeout=60)
    whole = pd.concat([make_partition(i, delay=0) for i in range(PARTITIONS)])
    pd.testing.assert_frame_equal(
        expected.sort_index(), whole.groupby("key").agg({"x": "sum", "y": "mean"}).sort_index()
    )

    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    future = client.compute(groupby_job())
    # kill it once the run is under way and the victim holds pieces of it
    deadline = time.monotonic() + 30
    while len(client.has_what().get(victim, ())) < 3:
        assert time.monotonic() < deadline, "the job never got going on the victim"
        time.sleep(0.05)
    assert not future.done(), "the job finished before the fault: make it longer"
    os.kill(pids[victim], signal.SIGKILL)

    result = future.result(timeout=120)
    pd.testing.assert_frame_equal(result.sort_index(), expected.sort_index())
    assert len(result) == 64

    # the nanny started a new worker process, and the scheduler gave it the plugin
    client.wait_for_workers(2, timeout=60)
    deadline = time.monotonic() + 30
    while pids[victim] in client.run(os.getpid).values() or len(client.run(os.getpid)) < 2:
        assert time.monotonic() < deadline, "the killed worker was not replaced"
        time.sleep(0.2)
    new_pids = client.run(os.getpid)
    assert pids[victim] not in new_pids.values()
    replaced = [w for w, pid in new_pids.items() if pid not in pids.values()]
    assert len(replaced) == 1
    plugins = client.run(_plugin_names)
    assert all(plugin.name in names for names in plugins.values()), plugins
    report = memory_report(client)
    assert set(report) == set(new_pids)
    assert report[replaced[0]]["status"] == "no-gpu"

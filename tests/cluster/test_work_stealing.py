"""Work stealing paused for a block: tasks stay next to their data; stealing comes back after,
also when the client that paused it is killed."""

from __future__ import annotations

import subprocess
import sys
import time

import dask
import pytest
from distributed import Client, LocalCluster, wait

from dask_gpu_interop import without_work_stealing


@pytest.fixture
def cluster():
    """Workers in this process; a scheduler that clients in other processes reach too."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=None) as cluster:
        yield cluster


def _stealing(cluster) -> bool:
    return "stealing" in cluster.scheduler.periodic_callbacks


def _where_they_run(client, first, name: str) -> set[str]:
    """Where tasks on data held by the busy worker ``first`` run: data placed there, the
    worker given a task that takes a while, then one task on each piece of the data (named
    ``name``: a name whose tasks' duration the scheduler does not know yet)."""
    pieces = [client.submit(list, range(i), workers=[first], pure=False) for i in range(8)]
    wait(pieces)
    busy = client.submit(time.sleep, 1, workers=[first], allow_other_workers=False,
                         pure=False)
    done = [client.submit(len, piece, key=f"{name}-{i}") for i, piece in enumerate(pieces)]
    wait(done + [busy])
    return {worker for holders in client.who_has(done).values() for worker in holders}


def test_tasks_stay_on_their_data_s_busy_worker_within_the_block(cluster):
    with Client(cluster) as client:
        client.wait_for_workers(2)
        first = sorted(cluster.scheduler.workers)[0]
        with without_work_stealing(client):
            assert not _stealing(cluster)
            assert _where_they_run(client, first, "within") == {first}
        assert _stealing(cluster)
        # outside the block the idle worker takes some of them: what the block prevents
        assert len(_where_they_run(client, first, "after")) == 2


def test_stealing_comes_back_when_the_block_fails(cluster):
    with Client(cluster) as client:
        with pytest.raises(ZeroDivisionError):
            with without_work_stealing(client):
                raise ZeroDivisionError("the block fails")
        assert _stealing(cluster)


def test_stealing_comes_back_when_the_last_of_two_clients_blocks_ends(cluster):
    with Client(cluster) as one, Client(cluster) as two:
        with without_work_stealing(one):
            with without_work_stealing(two):
                assert not _stealing(cluster)
            assert not _stealing(cluster)  # the first block still holds it
        assert _stealing(cluster)


def test_a_scheduler_without_stealing_stays_without():
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with without_work_stealing(client):
            pass
        assert not _stealing(cluster)


def test_a_scheduler_that_blocks_functions_keeps_its_stealing_and_the_block_runs():
    with dask.config.set({"distributed.scheduler.blocked-handlers": ["run_function"]}), \
            LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        ran = []
        with without_work_stealing(client):
            ran.append(_stealing(cluster))
        assert ran == [True] and _stealing(cluster)


def test_a_cluster_object_is_named_with_its_fix(cluster):
    with pytest.raises(TypeError, match=r"without_work_stealing\(\) takes the cluster's "
                                        r"Client, not a LocalCluster: pass its client"):
        with without_work_stealing(cluster):
            pass


HOLDER = """
import sys, time
from distributed import Client
from dask_gpu_interop import without_work_stealing

with Client(sys.argv[1], timeout=60) as client, without_work_stealing(client):
    print("paused", flush=True)
    time.sleep(600)
"""


def _holding_process(address: str) -> subprocess.Popen:
    """A client in a process of its own, inside a block, until it is killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, address], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline()
    assert line.strip() == "paused", line + process.stdout.read()
    return process


def _until(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_a_killed_clients_block_ends_with_it(cluster):
    process = _holding_process(cluster.scheduler_address)
    assert not _stealing(cluster)
    process.kill()  # kill -9: the block's end never runs
    process.wait(30)
    assert _until(lambda: _stealing(cluster))
    assert not cluster.scheduler._dask_gpu_interop_stealing_holders


def test_a_killed_client_leaves_the_pause_to_another_clients_block(cluster):
    with Client(cluster) as client, without_work_stealing(client):
        process = _holding_process(cluster.scheduler_address)
        process.kill()
        process.wait(30)
        assert _until(lambda: list(cluster.scheduler._dask_gpu_interop_stealing_holders)
                      == [client.id])
        assert not _stealing(cluster)  # this block still holds it
    assert _stealing(cluster)

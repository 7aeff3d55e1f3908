"""The public functions that take the cluster's client say so when given the cluster instead
(the usual mistake), in a TypeError that names the fix, and when given a closed client."""

import pytest
from distributed import Client

from dask_gpu_interop import (
    MemoryTimeline,
    check_workers_import,
    cluster_workers,
    memory_report,
    without_work_stealing,
    xgboost_config,
)


@pytest.mark.parametrize("call, name", [
    (memory_report, "memory_report"), (xgboost_config, "xgboost_config"),
    (MemoryTimeline, "MemoryTimeline"), (check_workers_import, "check_workers_import")])
def test_a_cluster_given_for_the_client_is_named_with_the_fix(cpu_cluster, call, name):
    with pytest.raises(TypeError) as info:
        call(cpu_cluster)
    assert str(info.value) == (
        f"{name}() takes the cluster's Client, not a LocalCluster: pass its client: "
        "Client(cluster), or the one cluster_client yields")


def test_the_client_itself_is_taken(cpu_cluster, cpu_client):
    assert set(memory_report(cpu_client)) == set(cpu_cluster.scheduler_info["workers"])
    check_workers_import(cpu_client, "json")


def test_something_else_is_named_too():
    with pytest.raises(TypeError, match=r"not a str: pass a distributed.Client of the cluster"):
        memory_report("tcp://127.0.0.1:8786")


@pytest.mark.parametrize("call, name", [
    (memory_report, "memory_report"), (xgboost_config, "xgboost_config"),
    (MemoryTimeline, "MemoryTimeline"), (check_workers_import, "check_workers_import"),
    (cluster_workers, "cluster_workers"), (without_work_stealing, "without_work_stealing")])
def test_a_closed_client_is_named_with_the_fix(cpu_cluster, call, name):
    client = Client(cpu_cluster)
    client.close()
    with pytest.raises(ValueError) as info:
        call(client).__enter__()  # a with block's function is called as the block begins
    assert str(info.value) == (
        f"{name}() was given a closed Client: call it while the client is open (inside its "
        "`with` block), or connect a new one")


def test_modules_given_as_a_list_are_named_with_the_fix(cpu_client):
    with pytest.raises(TypeError, match=r"check_workers_import\(\) takes the names of modules as "
                       r"arguments of their own, check_workers_import\(client, 'pkg.tasks', "
                       r"'pkg.io'\), not a list"):
        check_workers_import(cpu_client, ["json", "os"])


def test_the_client_given_for_the_modules_is_named_with_the_fix(cpu_client):
    from dask_gpu_interop import import_in_background

    with pytest.raises(TypeError, match=r"import_in_background\(\) takes the names of modules, "
                       r"then client= for a cluster's workers: import_in_background\('cudf', "
                       r"client=client\), not a Client"):
        import_in_background(cpu_client)


def test_a_start_counted_from_a_text_is_named_with_the_fix(cpu_client):
    from dask_gpu_interop import worker_starts

    with pytest.raises(TypeError, match=r"worker_starts\(since='yesterday'\): give seconds since "
                       r"the epoch, as time.time\(\) gives them"):
        worker_starts(cpu_client, since="yesterday")


def test_a_module_the_workers_miss_is_said_once_without_their_tracebacks(caplog):
    """The workers answer with the error instead of failing the run: no 'Run Failed' and its
    traceback from each worker in the user's terminal, only the one ClusterError."""
    import logging

    from distributed import LocalCluster

    from dask_gpu_interop import ClusterError

    with LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client, caplog.at_level(logging.WARNING):  # fmt: skip
        with pytest.raises(ClusterError, match=r"2 of 2 worker\(s\) of the cluster cannot import "
                           r"json, no_such_module_xyz \(.*ModuleNotFoundError: No module named "
                           r"'no_such_module_xyz'\)"):
            check_workers_import(client, "json", "no_such_module_xyz")
        check_workers_import(client, "json")
    assert "Run Failed" not in caplog.text

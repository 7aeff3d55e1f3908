"""Local worker processes forked from a server with the libraries imported
(dask_gpu_interop.worker.fork_server): what the server starts with, when it is used, and workers
forked from it (on CPU workers in a child interpreter, and on two GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import dask
import pytest

from dask_gpu_interop import prepare_local_cluster
from dask_gpu_interop.worker import fork_server

# A child interpreter (its fork server is its own): a local cluster of two worker processes
# started inside fork_server.forking(), or without it; each worker's parent process, a marker
# variable changed after the server started, and whether the server's modules are loaded.
PROBE = textwrap.dedent("""
    import json, multiprocessing, os, sys
    import dask
    from distributed import Client, LocalCluster
    from dask_gpu_interop.worker import fork_server

    def seen():
        imports = sys.modules.get("dask_gpu_interop.worker._fork_server_imports")
        return [os.getppid(), os.environ.get("PROBE_MARK"),
                os.environ.get("RAPIDS_NO_INITIALIZE"), os.environ.get("PYTHONHASHSEED"),
                "dask.dataframe" in sys.modules,
                imports.FAILED if imports else None,
                os.environ.get(fork_server.IMPORTS_VARIABLE)]

    if os.environ.get("PROBE_BROKEN"):  # a module that fails to import, before the others
        fork_server.COMMON_MODULES = ("probe_broken", *fork_server.COMMON_MODULES)
    protocol, device = sys.argv[1:3]
    os.environ["PROBE_MARK"] = "at the server's start"
    fork_server.start(protocol, device)
    os.environ["PROBE_MARK"] = "changed after"
    with fork_server.forking(protocol, device) as forked:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            workers = list(client.run(seen).values())
    server = multiprocessing.forkserver._forkserver._forkserver_pid if forked else None
    print("PROBE", json.dumps({"forked": forked, "server": server, "client": os.getpid(),
                               "workers": workers}))
""")


def probe(protocol: str = "tcp", device: str = "cpu", **env) -> dict:
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [env.get("PYTHONPATH"),
                                                             os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", PROBE, protocol, device], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **env})
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("PROBE "))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver: Linux")
def test_worker_processes_are_forked_from_the_server_with_its_environment_and_modules():
    got = probe(DASK_GPU_INTEROP__WORKER__FORK_SERVER="true")  # CPU workers: when asked
    assert got["forked"] is True and got["server"] not in (None, got["client"])
    assert len(got["workers"]) == 2
    for parent, mark, no_init, seed, preloaded, failed, listed in got["workers"]:
        assert parent == got["server"]  # a fork of the server, not a child of the client
        assert mark == "changed after"  # this process's environment at the cluster's start
        # (through the nanny: the server itself kept the value it started with)
        assert no_init == "1" and seed == "6640"
        assert preloaded  # imported once, in the server
        assert listed is None  # the list of modules stayed with the server
        assert all(line.split(":")[0] not in ("distributed", "dask.dataframe") for line in failed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver: Linux")
def test_a_module_that_fails_to_import_leaves_the_server_up_and_the_rest_imported(tmp_path):
    (tmp_path / "probe_broken.py").write_text("raise RuntimeError('broken at import')\n")
    got = probe(PROBE_BROKEN="1", PYTHONPATH=str(tmp_path),
                DASK_GPU_INTEROP__WORKER__FORK_SERVER="true")
    assert got["forked"] is True and len(got["workers"]) == 2
    for parent, _, _, _, preloaded, failed, _ in got["workers"]:
        assert parent == got["server"] and preloaded  # the modules after it imported too
        assert failed[0] == "probe_broken: RuntimeError: broken at import"


@pytest.mark.parametrize("protocol, device, env", [
    ("ucx", "gpu", {"DASK_GPU_INTEROP__WORKER__FORK_SERVER": "false"}),  # the setting off
    ("tcp", "gpu", {}),  # by default, GPU workers over UCX only
    ("tcp", "cpu", {}),
])
def test_otherwise_worker_processes_start_as_distributed_starts_them(protocol, device, env):
    got = probe(protocol, device, **env)
    assert got["forked"] is False and got["server"] is None
    for parent, mark, no_init, _, preloaded, _, _ in got["workers"]:
        assert parent == got["client"] and mark == "changed after"
        assert no_init is None and not preloaded


# Three clusters one after the other, a variable of distributed's pre-spawn-environ (read as a
# process starts) added before the third: the server cannot give it, its workers are spawned.
RESTART = textwrap.dedent("""
    import json, multiprocessing, os
    import dask
    from distributed import Client, LocalCluster
    from dask_gpu_interop.worker import fork_server

    def seen():
        return [os.getppid(), os.environ.get("PROBE_SETTING")]

    dask.config.set({"gpu-interop.worker.fork-server": True})  # CPU workers: when asked
    servers, workers = [], []
    for added in ({}, {}, {"PROBE_SETTING": "x"}):
        with dask.config.set({"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1,
                                                                      **added}}):
            with fork_server.forking("tcp", "cpu"):
                with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, Client(cluster) as client:
                    workers += list(client.run(seen).values())
        servers.append(multiprocessing.forkserver._forkserver._forkserver_pid)
    print("PROBE", json.dumps({"servers": servers, "workers": workers, "client": os.getpid()}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver: Linux")
def test_after_a_setting_read_at_process_start_changed_workers_are_spawned_with_it():
    done = subprocess.run([sys.executable, "-c", RESTART], capture_output=True, text=True,
                          timeout=180)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    got = json.loads(lines[-1].removeprefix("PROBE "))
    server = got["servers"][0]
    assert got["servers"] == [server] * 3  # the server runs on, untouched
    assert [parent for parent, _ in got["workers"]] == [server, server, got["client"]]
    assert [value for _, value in got["workers"]] == [None, None, "x"]


def test_the_server_environment_has_the_gpu_settings_and_distributeds_pre_spawn_variables(
        monkeypatch):
    from dask_gpu_interop.worker import gpu_workers

    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a nanny may have set it here
    monkeypatch.setenv("KVIKIO_NTHREADS", "3")  # set here: this process's value wins
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1}}):
        env = fork_server.server_environ()
    assert env["RAPIDS_NO_INITIALIZE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONHASHSEED"] == "6640"
    assert env[fork_server.IMPORTS_VARIABLE].split(",") == list(fork_server.modules("gpu"))
    assert env["KVIKIO_NTHREADS"] == "3"
    for name, value in gpu_workers.settings().items():
        assert env[name] == os.environ.get(name, value)
    cpu = fork_server.server_environ("cpu")  # no GPU settings, no GPU module for CPU workers
    assert "KVIKIO_NTHREADS" not in cpu
    assert cpu[fork_server.IMPORTS_VARIABLE].split(",") == list(fork_server.COMMON_MODULES)


@pytest.mark.parametrize("value, protocol, device, expected", [
    ("ucx", "ucx", "gpu", True), ("UCX", "tcp", "gpu", False), ("ucx", "tcp", "cpu", False),
    (True, "tcp", "gpu", True), ("true", "tcp", "cpu", True),
    (False, "ucx", "gpu", False), ("false", "tcp", "cpu", False), ("off", "ucx", "gpu", False)])
def test_the_setting_says_for_which_clusters_the_server_is_used(value, protocol, device,
                                                                 expected):
    with dask.config.set({fork_server.CONFIG_KEY: value}):
        assert fork_server.wanted(protocol, device) is (
            expected and sys.platform.startswith("linux"))


def test_with_the_quick_exit_off_worker_processes_are_spawned_so_their_teardown_runs():
    from dask_gpu_interop.worker import quick_exit

    with dask.config.set({fork_server.CONFIG_KEY: True, quick_exit.CONFIG_KEY: False}):
        assert fork_server.wanted("ucx", "gpu") is False
        assert fork_server.wanted("tcp", "cpu") is False


def test_by_default_the_server_is_for_gpu_workers_over_ucx():
    assert dask.config.get(fork_server.CONFIG_KEY) == fork_server.UCX_ONLY


@pytest.mark.parametrize("arguments, asked", [
    ({"device": "gpu", "n_workers": 2}, [("tcp", "gpu")]),
    ({"device": "gpu", "n_workers": 1, "protocol": "ucx"}, [("ucx", "gpu")]),  # a process
    ({"device": "gpu", "n_workers": 1}, []),  # one worker, in this process
    ({"device": "gpu", "n_workers": 2, "scheduler": "tcp://h:8786"}, []),  # a running cluster
    ({"device": "cpu", "n_workers": 4}, [("tcp", "cpu")]),
    ({"device": "cpu", "n_workers": 1, "processes": False}, []),  # threads of this process
])
def test_preparing_asks_for_the_server_only_where_worker_processes_will_start(
        monkeypatch, arguments, asked):
    from dask_gpu_interop.cluster import local

    started = []
    monkeypatch.setattr(fork_server, "start",
                        lambda protocol, device: started.append((protocol, device)) or True)
    monkeypatch.setattr(local, "resolve_device", lambda device: device)  # as on a GPU machine
    monkeypatch.setattr(local.ucx_setup, "begin", lambda: False)  # tests/cluster/test_ucx_setup.py
    assert prepare_local_cluster(**arguments, memory={"pool_size": "1GiB"}) is bool(asked)
    assert started == asked


@pytest.mark.multi_gpu
def test_gpu_workers_forked_from_the_server_each_have_their_own_gpu():
    from dask_gpu_interop import cluster_client

    def where():
        import cupy

        return (os.getppid(), bytes(cupy.cuda.runtime.getDeviceProperties(0)["uuid"]).hex(),
                float(cupy.arange(10).sum()))

    with dask.config.set({fork_server.CONFIG_KEY: True}), \
            cluster_client(device="gpu", n_workers=2) as (client, _):
        seen = list(client.run(where).values())
        import multiprocessing.forkserver as server

        pid = server._forkserver._forkserver_pid
    assert [parent for parent, _, _ in seen] == [pid, pid]
    assert len({gpu for _, gpu, _ in seen}) == 2  # one GPU each (by its UUID)
    assert [total for _, _, total in seen] == [45.0, 45.0]


def test_preparing_a_cluster_that_cannot_start_here_starts_nothing_and_leaves_the_error(
        monkeypatch):
    started = []
    monkeypatch.setattr(fork_server, "start",
                        lambda protocol, device: started.append((protocol, device)) or True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: cluster_client will say so
    assert prepare_local_cluster(device="gpu", n_workers=2, protocol="ucx") is False
    assert prepare_local_cluster(device="tpu", n_workers=2) is False
    assert started == []

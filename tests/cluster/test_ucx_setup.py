"""The UCX setup of a process that starts a local GPU cluster over UCX, begun in the
background (dask_gpu_interop.cluster.ucx_setup): distributed-ucxx's and dask-cuda's modules stand in
here where they are not installed; the real setup runs in the GPU test below."""

from __future__ import annotations

import sys
import threading
import types

import dask
import pytest

from dask_gpu_interop.cluster import local, ucx_setup


@pytest.fixture
def fresh(monkeypatch):
    """ucx_setup as in a process where nothing began, with stand-ins for distributed-ucxx
    (``init_once`` records its thread and the config it saw) and dask-cuda's config."""
    monkeypatch.setattr(ucx_setup, "_thread", None)
    monkeypatch.setattr(ucx_setup, "_error", None)
    monkeypatch.setattr(ucx_setup, "_installed", lambda name: True)
    calls, release = [], threading.Event()
    comm = types.ModuleType("distributed_ucxx.ucxx")
    comm.ucxx = None

    def init_once():
        release.wait(10)
        calls.append((threading.current_thread().name, dask.config.get("distributed-ucxx")))
        if comm.fail:
            comm.ucxx = "half set up"
            raise RuntimeError("no UCX here")
        comm.ucxx = "set up"

    comm.init_once, comm.fail = init_once, False
    package = types.ModuleType("distributed_ucxx")
    package.ucxx = comm
    utils = types.ModuleType("dask_cuda.utils")
    utils.get_ucx_config = lambda: {"create-cuda-context": True, "nvlink": None}
    for name, module in {"distributed_ucxx": package, "distributed_ucxx.ucxx": comm,
                         "dask_cuda": types.ModuleType("dask_cuda"),
                         "dask_cuda.utils": utils}.items():
        monkeypatch.setitem(sys.modules, name, module)
    with dask.config.set({"distributed-ucxx": None}):
        yield types.SimpleNamespace(calls=calls, release=release, comm=comm)


def test_the_setup_runs_once_in_a_thread_of_its_own_with_dask_cudas_config(fresh):
    assert ucx_setup.begin() is True
    assert ucx_setup.begin() is True  # begun already: not a second time
    assert fresh.calls == []  # still setting up: begin does not wait for it
    fresh.release.set()
    assert ucx_setup.finish() is None
    assert fresh.calls == [("dask-gpu-interop-ucx-setup",
                            {"create-cuda-context": True, "nvlink": None})]
    assert fresh.comm.ucxx == "set up"


def test_a_failed_setup_is_undone_so_that_the_schedulers_own_runs_and_says_why(fresh):
    fresh.comm.fail = True
    fresh.release.set()
    ucx_setup.begin()
    error = ucx_setup.finish()
    assert isinstance(error, RuntimeError) and str(error) == "no UCX here"
    assert fresh.comm.ucxx is None  # distributed-ucxx sets UCX up again when asked


def test_nothing_begins_without_distributed_ucxx_or_dask_cuda(monkeypatch):
    monkeypatch.setattr(ucx_setup, "_thread", None)
    monkeypatch.setattr(ucx_setup, "_installed", lambda name: name != "distributed_ucxx")
    assert ucx_setup.begin() is False
    assert ucx_setup.finish() is None  # nothing to wait for


@pytest.mark.parametrize("arguments, begun", [
    ({"device": "gpu", "n_workers": 2, "protocol": "ucx"}, True),
    ({"device": "gpu", "n_workers": 1, "protocol": "ucx"}, True),  # a worker process
    ({"device": "gpu", "n_workers": 2, "protocol": "tcp"}, False),
    ({"device": "gpu", "n_workers": 1, "protocol": "ucx", "processes": False}, False),
    ({"device": "gpu", "n_workers": 2, "protocol": "ucx", "scheduler": "ucx://h:8786"}, False),
])
def test_preparing_a_local_gpu_cluster_over_ucx_begins_the_setup(monkeypatch, arguments,
                                                                 begun):
    asked, resolved = [], []
    monkeypatch.setattr(local.ucx_setup, "begin", lambda: asked.append(True) or True)
    monkeypatch.setattr(local.fork_server, "start", lambda protocol, device: False)
    monkeypatch.setattr(local, "resolve_device",  # as on a GPU machine
                        lambda device: resolved.append(device) or device)
    monkeypatch.setattr(local, "_gpu_stack_missing", lambda: [])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local.prepare_local_cluster(**arguments) is begun
    assert asked == ([True] if begun else [])
    if begun:  # over UCX CUDA is not asked for the GPUs first (its start takes time)
        assert resolved == []


def test_preparing_over_ucx_starts_the_server_for_gpu_workers_on_auto(monkeypatch):
    started = []
    monkeypatch.setattr(local.ucx_setup, "begin", lambda: False)
    monkeypatch.setattr(local.fork_server, "start",
                        lambda protocol, device: started.append((protocol, device)) or True)
    monkeypatch.setattr(local, "_gpu_stack_missing", lambda: [])  # as on a GPU machine
    monkeypatch.setattr(local, "resolve_device", lambda device: device)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local.prepare_local_cluster(device="auto", protocol="ucx") is True
    assert started == [("ucx", "gpu")]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible: asked as before
    monkeypatch.setattr(local, "resolve_device", lambda device: "cpu")
    local.prepare_local_cluster(device="auto", protocol="ucx")
    assert started == [("ucx", "gpu"), ("ucx", "cpu")]
    assert local.fork_server.wanted("ucx", "cpu") is False  # so the real start does nothing


@pytest.mark.multi_gpu
def test_a_gpu_cluster_over_ucx_starts_on_the_setup_begun_before_it():
    """On two GPUs: the cluster's scheduler listens over the UCX that the setup made (no
    error kept), and the workers answer."""
    from dask_gpu_interop import cluster_client

    assert local.prepare_local_cluster(device="gpu", n_workers=2, protocol="ucx") is True
    with cluster_client(device="gpu", n_workers=2, protocol="ucx") as (client, _):
        assert ucx_setup.finish() is None
        assert client.scheduler.address.startswith("ucx://")
        assert sorted(client.run(lambda: 1).values()) == [1, 1]

"""Where a local cluster's workers run: one GPU's worker in this process, several GPUs' in
processes of their own, and what --processes/--no-processes change."""

from __future__ import annotations

import os
import sys

import click
import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu_interop import ClusterError, GPUMemoryPlugin, device
from dask_gpu_interop.cluster import local, session
from dask_gpu_interop.cluster.options import cluster_options


@pytest.fixture
def gpus(monkeypatch):
    def visible(count: int):
        monkeypatch.setattr(device, "gpu_count", lambda: count)

    return visible


def test_one_gpus_worker_runs_in_this_process_by_default(gpus):
    gpus(1)
    assert local.in_process(None, "tcp", None)
    assert local.in_process(1, "inproc", None)
    assert not local.in_process(None, "ucx", None)  # UCX sets up each worker process
    assert not local.in_process(None, "tls", None)
    assert not local.in_process(None, "tcp", True)


def test_several_gpus_keep_a_worker_process_each_unless_one_worker_is_asked_for(gpus):
    gpus(4)
    assert not local.in_process(None, "tcp", None)
    assert not local.in_process(2, "tcp", None)
    assert local.in_process(1, "tcp", None)
    assert local.in_process(1, "tcp", False)


def test_no_processes_for_several_gpu_workers_is_refused_in_the_users_words(gpus):
    gpus(2)
    with pytest.raises(ClusterError) as refused:
        local.in_process(None, "tcp", False)
    assert str(refused.value) == ("processes=False runs one GPU worker in this process, but "
                                  "there would be 2 (one per GPU): ask for one worker, or "
                                  "leave processes out")
    assert refused.value.message(flags="").startswith("--no-processes runs one GPU worker")


@pytest.mark.parametrize("flags, processes", [([], None), (["--processes"], True),
                                              (["--no-processes"], False)])
def test_the_commands_processes_flag_reaches_the_cluster(flags, processes):
    seen = {}

    @click.command()
    @cluster_options
    def command(cluster):
        seen.update(cluster)

    result = CliRunner().invoke(command, ["--device", "cpu", *flags], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen["processes"] is processes


def test_cpu_workers_are_processes_unless_told():
    with local.local_cluster("cpu", n_workers=1, threads_per_worker=1,
                               dashboard_address=None, processes=False) as threads, \
            Client(threads) as client:
        assert set(client.run(os.getpid).values()) == {os.getpid()}
    with local.local_cluster("cpu", n_workers=1, threads_per_worker=1,
                               dashboard_address=None) as processes, Client(processes) as client:
        assert os.getpid() not in set(client.run(os.getpid).values())


# ------------------------------------------------------------------ cuDF's spilling, client side


class _FakeCudf:
    def __init__(self):
        self.options = {"spill": False}

    def set_option(self, name, value):
        self.options[name] = value


@pytest.mark.parametrize("spill", [None, False])
def test_a_client_leaves_cudfs_spilling_alone_unless_the_workers_spill(monkeypatch, spill):
    _without_cudf_spill(monkeypatch)
    fake = _FakeCudf()
    monkeypatch.setitem(sys.modules, "cudf", fake)
    session._take_spillable(GPUMemoryPlugin(spill=spill))
    session._take_spillable(False)  # CPU workers: no plugin
    assert fake.options["spill"] is False
    assert "CUDF_SPILL" not in os.environ


def test_a_client_of_spilling_workers_turns_cudfs_spilling_on_before_cudf_is_imported(
        monkeypatch):
    _without_cudf_spill(monkeypatch)
    monkeypatch.delitem(sys.modules, "cudf", raising=False)
    session._take_spillable(GPUMemoryPlugin(spill=True))
    assert os.environ["CUDF_SPILL"] == "on"
    assert "cudf" not in sys.modules  # nothing imported for it


def test_a_client_of_spilling_workers_turns_cudfs_spilling_on_where_cudf_is_imported(
        monkeypatch):
    _without_cudf_spill(monkeypatch)
    fake = _FakeCudf()
    monkeypatch.setitem(sys.modules, "cudf", fake)
    session._take_spillable(GPUMemoryPlugin(spill=True))
    assert fake.options["spill"] is True


def _without_cudf_spill(monkeypatch):
    """CUDF_SPILL unset for the test, and as it was after it (set first: monkeypatch restores
    only what it changed)."""
    monkeypatch.setenv("CUDF_SPILL", "off")
    monkeypatch.delenv("CUDF_SPILL")

"""The memory options of a local cluster are parsed once, on the client, into one configured
plugin that every GPU worker is given as it starts (as dask-cuda gives its own plugins): a pool
size typed on the command line is read once, and no worker parses a flag."""

from __future__ import annotations

import sys
import types

import click
import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu_interop import GPUMemoryPlugin, MemoryConfig
from dask_gpu_interop.cluster import local, session
from dask_gpu_interop.cluster.options import cluster_options
from dask_gpu_interop.memory.config import CheckedOptions
from dask_gpu_interop.worker import gpu_start
from tests.dask_cuda_stand_ins import LocalCUDACluster, RMMSetup


@pytest.fixture
def parses(monkeypatch):
    """Each parse of memory options, as the options it was given."""
    seen = []
    parse = MemoryConfig.from_options.__func__

    def counted(cls, **options):
        seen.append(options)
        return parse(cls, **options)

    monkeypatch.setattr(MemoryConfig, "from_options", classmethod(counted))
    return seen


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine of two GPUs as the client sees it, dask-cuda's cluster a stand-in."""
    fake = types.ModuleType("dask_cuda")
    fake.LocalCUDACluster = LocalCUDACluster
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(local, "check_local", lambda device, protocol, **checks: "gpu")
    monkeypatch.setattr(local.device_mod, "gpu_count", lambda: 2)


class _Started(Exception):
    pass


def test_a_pool_size_on_the_command_line_is_parsed_once_into_the_workers_plugin(
        monkeypatch, parses):
    started = []

    def start(device, plugin, **options):
        started.append(plugin)
        raise _Started

    monkeypatch.setattr(session, "start", start)

    @click.command()
    @cluster_options
    def command(cluster):
        with session.cluster_client(**cluster):
            pass

    with pytest.raises(_Started):
        CliRunner().invoke(command, ["--device", "cpu", "--pool-size", "0.5"],
                           catch_exceptions=False)
    (plugin,) = started
    assert parses == [{"pool_size": "0.5"}]
    assert plugin.name == GPUMemoryPlugin(pool_size=0.5).name


def test_each_gpu_worker_process_is_given_the_configured_plugin_and_no_memory_flag(
        gpu_machine, parses):
    cluster = local.local_cluster("gpu", n_workers=2, memory={"pool_size": "0.5"})
    assert len(parses) == 1
    assert len(cluster.worker_spec) == 2
    for spec in cluster.worker_spec.values():
        *theirs, ours = spec["options"]["plugins"]  # after dask-cuda's own
        assert [type(p) for p in theirs] == [RMMSetup]
        assert isinstance(ours, GPUMemoryPlugin) and ours.config.pool_size.value == 0.5
    assert cluster.kwargs["preload"][0] == gpu_start.PRELOAD
    assert not any(arg.startswith("--gpu-") for arg in cluster.kwargs.get("preload_argv", []))


def test_an_in_process_gpu_worker_sets_up_the_configured_plugin_without_a_parse(
        monkeypatch, parses):
    monkeypatch.setattr(local, "check_local", lambda device, protocol, **checks: "gpu")
    monkeypatch.setattr(local, "device_spilling", lambda: None)  # dask-cuda's store
    plugin = GPUMemoryPlugin(pool_size="0.5")
    parses.clear()
    with local.local_cluster("gpu", n_workers=1, memory=plugin,
                             dashboard_address=None) as cluster, Client(cluster) as client:
        names = client.run(lambda dask_worker: sorted(dask_worker.plugins))
    assert parses == []
    assert [plugin.name in found for found in names.values()] == [True]


def test_options_changed_after_their_parse_are_parsed_again(parses):
    checked = CheckedOptions({"pool_size": "0.5"}, MemoryConfig.from_options(pool_size="0.5"))
    expected = GPUMemoryPlugin(pool_size=0.5).name
    parses.clear()
    assert local.memory_plugin(checked).name == expected
    assert parses == []
    amended = {**checked, "async_alloc": True}  # what an application adds to the flags
    assert type(amended) is dict
    assert local.memory_plugin(amended).config.async_alloc is True
    checked["pool_size"] = "0.25"  # changed where it stands
    assert local.memory_plugin(checked).config.pool_size.value == 0.25
    assert len(parses) == 2


def test_memory_given_as_something_else_is_named_with_the_fix():
    with pytest.raises(TypeError, match=r"memory= takes a dict of GPUMemoryPlugin options or a "
                                        r"GPUMemoryPlugin, not a str: e\.g\. memory="):
        local.local_cluster("cpu", memory="0.8")


def test_a_plugin_from_a_parsed_configuration_is_the_plugin_of_its_options():
    config = MemoryConfig.from_options(managed=True, pool_size="1GiB")
    assert GPUMemoryPlugin.from_config(config).name == \
        GPUMemoryPlugin(managed=True, pool_size="1GiB").name
    with pytest.raises(TypeError, match="from_config\\(\\) takes a MemoryConfig, not a dict"):
        GPUMemoryPlugin.from_config({"managed": True})

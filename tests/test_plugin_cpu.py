"""The plugin on real (CPU) clusters: what happens without a GPU, registration semantics, and
how a worker-side failure travels back to the caller."""

import logging

import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import GPUMemoryPlugin, GPUMemorySetupError, cluster_workers, memory_report
from dask_gpu_interop.memory import state


def scheduler_plugins(client):
    return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.worker_plugins))


def test_no_gpu_worker_is_left_alone_and_says_so(cpu_client):
    plugin = GPUMemoryPlugin(pool_size="0.8")
    cpu_client.register_plugin(plugin)
    report = memory_report(cpu_client)
    assert set(report) == set(cluster_workers(cpu_client))
    assert all(snap["status"] == "no-gpu" for snap in report.values())
    assert str(report).count("no GPU: the plugin does nothing here") == 2
    on_workers = cpu_client.run(lambda dask_worker: sorted(dask_worker.plugins))
    assert all(plugin.name in names for names in on_workers.values())
    cpu_client.unregister_worker_plugin(plugin.name)


def test_registering_the_same_configuration_twice_is_a_no_op(cpu_client):
    cpu_client.register_plugin(GPUMemoryPlugin(pool_size="0.5", frameworks=["cupy"]))
    before = scheduler_plugins(cpu_client)
    # A second, equal plugin: the scheduler skips it, no worker sees a second setup.
    assert cpu_client.register_plugin(GPUMemoryPlugin(pool_size=0.5, frameworks="cupy")) == {}
    assert scheduler_plugins(cpu_client) == before
    # A different configuration is a different registration.
    other = GPUMemoryPlugin(pool_size="0.4", frameworks=["cupy"])
    cpu_client.register_plugin(other)
    assert other.name in scheduler_plugins(cpu_client)
    for name in scheduler_plugins(cpu_client):
        if name.startswith("gpu-interop-memory-"):
            cpu_client.unregister_worker_plugin(name)


def test_no_gpu_is_logged_once_per_worker(cpu_client):
    cpu_client.register_plugin(GPUMemoryPlugin(pool_size="0.3"))
    cpu_client.register_plugin(GPUMemoryPlugin(pool_size="0.2"))
    logs = cpu_client.get_worker_logs()
    for lines in logs.values():
        said = [msg for _, msg in lines if "no GPU visible" in msg]
        assert len(said) == 1
    for name in scheduler_plugins(cpu_client):
        if name.startswith("gpu-interop-memory-"):
            cpu_client.unregister_worker_plugin(name)


@pytest.mark.skipif(
    hasattr(Client, "register_worker_plugin") is False,
    reason="this distributed has no Client.register_worker_plugin (removed in 2026.6)",
)
def test_older_spelling_register_worker_plugin(cpu_client):
    plugin = GPUMemoryPlugin(managed=True)
    cpu_client.register_worker_plugin(plugin)
    assert plugin.name in scheduler_plugins(cpu_client)
    assert all(s["status"] == "no-gpu" for s in memory_report(cpu_client).values())
    cpu_client.unregister_worker_plugin(plugin.name)


def test_worker_side_failure_reaches_the_caller_and_can_be_retried(monkeypatch):
    """A worker that sees a GPU but lacks RMM: setup fails there, the error comes back to
    ``register_plugin``, and the scheduler forgets the registration so a retry is not skipped."""
    import importlib.util

    if importlib.util.find_spec("rmm") is not None:
        pytest.skip("RMM is installed here: this checks the message for workers without it")
    monkeypatch.setattr("dask_gpu_interop.device.gpu_count", lambda: 1)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            plugin = GPUMemoryPlugin(pool_size="0.5")
            with pytest.raises(GPUMemorySetupError, match="sees a GPU but RMM is not installed"):
                c.register_plugin(plugin)
            assert plugin.name not in scheduler_plugins(c)
            with pytest.raises(GPUMemorySetupError):
                c.register_plugin(plugin)  # not silently skipped
    assert state.active() is None


def test_teardown_without_install_is_harmless():
    plugin = GPUMemoryPlugin()
    plugin.teardown(worker=None)
    assert state.active() is None


def test_log_names_the_plugin(caplog):
    with caplog.at_level(logging.INFO, logger="distributed.worker.gpu_interop"):
        state._no_gpu_logged = False
        GPUMemoryPlugin().install(type("W", (), {"address": "tcp://x:1"})())
    assert "tcp://x:1" in caplog.text and "no GPU visible" in caplog.text

"""Finding other owners of a worker's GPU memory, before the plugin acts."""

import types

import dask

from dask_gpu_interop.memory import conflicts
from tests.dask_cuda_stand_ins import RMMSetup


def test_dask_cuda_without_rmm_options_is_no_conflict():
    worker = types.SimpleNamespace(plugins={"rmm": RMMSetup()}, _pending_plugins=())
    assert conflicts.dask_cuda_rmm_options(worker) == []


def test_dask_cuda_rmm_options_are_named():
    worker = types.SimpleNamespace(
        plugins={}, _pending_plugins=(RMMSetup(initial_pool_size="1GB", managed_memory=True),)
    )
    found = conflicts.dask_cuda_rmm_options(worker)
    assert found == ["rmm_pool_size / --rmm-pool-size='1GB'", "rmm_managed_memory / --rmm-managed-memory=True"]
    message = conflicts.dask_cuda_message(found)
    assert "drop those dask-cuda options" in message and "force=True" in message


def test_dask_cudas_plugin_is_found_among_the_workers_plugins():
    imposter = type("RMMSetup", (), {"__module__": "my_project"})()
    imposter.initial_pool_size = "1GB"
    worker = types.SimpleNamespace(plugins={"x": imposter, "rmm": RMMSetup(async_alloc=True)})
    assert conflicts.dask_cuda_rmm_options(worker) == ["rmm_async / --rmm-async=True"]


def test_distributed_ucxx_pool_size_in_either_namespace():
    assert conflicts.ucxx_pool_size() is None
    with dask.config.set({"distributed-ucxx.rmm.pool-size": "1GB"}):
        assert conflicts.ucxx_pool_size() == "distributed-ucxx.rmm.pool-size='1GB'"
    with dask.config.set({"distributed.rmm.pool-size": "2GB"}):
        assert conflicts.ucxx_pool_size() == "distributed.rmm.pool-size='2GB'"


def test_foreign_resource_is_anything_but_rmms_default_or_ours():
    cuda_default = type("CudaMemoryResource", (), {})()
    pool = type("PoolMemoryResource", (), {})()
    assert conflicts.foreign_resource(cuda_default) is None
    assert conflicts.foreign_resource(pool) == "PoolMemoryResource"
    assert conflicts.foreign_resource(pool, ours=(pool,)) is None

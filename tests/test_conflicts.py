"""Finding other owners of a worker's GPU memory, before the plugin acts."""

import types

import dask

from dask_gpu_interop.memory import conflicts


def dask_cuda_rmm_setup(**attrs):
    """An object with dask-cuda RMMSetup's class name, module and attributes (dask_cuda/plugins.py)."""
    cls = type("RMMSetup", (), {"__module__": "dask_cuda.plugins"})
    plugin = cls()
    defaults = dict(initial_pool_size=None, maximum_pool_size=None, managed_memory=False,
                    async_alloc=False, release_threshold=None, logging=False,
                    rmm_track_allocations=False, external_lib_list=None)
    for key, value in {**defaults, **attrs}.items():
        setattr(plugin, key, value)
    return plugin


def test_dask_cuda_without_rmm_options_is_no_conflict():
    worker = types.SimpleNamespace(plugins={"rmm": dask_cuda_rmm_setup()}, _pending_plugins=())
    assert conflicts.dask_cuda_rmm_options(worker) == []


def test_dask_cuda_rmm_options_are_named():
    worker = types.SimpleNamespace(
        plugins={}, _pending_plugins=(dask_cuda_rmm_setup(initial_pool_size="1GB", managed_memory=True),)
    )
    found = conflicts.dask_cuda_rmm_options(worker)
    assert found == ["rmm_pool_size / --rmm-pool-size='1GB'", "rmm_managed_memory / --rmm-managed-memory=True"]
    message = conflicts.dask_cuda_message(found)
    assert "drop those dask-cuda options" in message and "force=True" in message


def test_other_plugins_named_rmmsetup_are_not_dask_cudas():
    imposter = type("RMMSetup", (), {"__module__": "my_project"})()
    imposter.initial_pool_size = "1GB"
    worker = types.SimpleNamespace(plugins={"x": imposter})
    assert conflicts.dask_cuda_rmm_options(worker) == []


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

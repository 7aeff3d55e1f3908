import subprocess
import sys

import dask
import pytest

from dask_gpu_interop import GPUMemoryPlugin, MemoryConfig
from dask_gpu_interop.memory.sizes import Size


def test_defaults_come_from_dask_config():
    with dask.config.set({"gpu-interop.memory.pool-size": "0.8", "gpu-interop.memory.managed": True}):
        config = MemoryConfig.from_options()
    assert config.pool_size == Size(0.8, True)
    assert config.managed and config.mode == "managed"


def test_explicit_options_beat_dask_config():
    with dask.config.set({"gpu-interop.memory.pool-size": "0.8"}):
        config = MemoryConfig.from_options(pool_size="4GB")
    assert config.pool_size == Size(4_000_000_000, False)


def test_environment_variable_sets_the_default():
    code = (
        "from dask_gpu_interop import GPUMemoryPlugin;"
        "p = GPUMemoryPlugin(); print(p.config.pool_size.value, p.config.pool_size.is_fraction)"
    )
    env = {"DASK_GPU_INTEROP__MEMORY__POOL_SIZE": "0.8", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.8", "True"]


@pytest.mark.parametrize(
    "options, error, words",
    [
        ({"pool_size": "eight gigs"}, ValueError, "pool_size='eight gigs'"),
        ({"pool_size": -1}, ValueError, "more than zero"),
        ({"maximum_pool_size": "2.5"}, ValueError, "maximum_pool_size"),
        ({"pool_size": 1.2}, ValueError, "(0, 1]"),
        ({"pool_size": "8GB", "maximum_pool_size": "4GB"}, ValueError, "smaller than pool_size"),
        ({"pool_size": 0.8, "maximum_pool_size": 0.5}, ValueError, "smaller than pool_size"),
        ({"managed": True, "async_alloc": True}, ValueError, "cannot be combined"),
        ({"release_threshold": "1GB"}, ValueError, "async_alloc=True"),
        ({"managed": True, "maximum_pool_size": "8GB"}, ValueError, "needs a pool"),
        ({"frameworks": ["cupy", "tensorflow"]}, ValueError, "unknown framework 'tensorflow'"),
        ({"frameworks": 3}, TypeError, "frameworks=3"),
        ({"frameworks": ["cupy", 3]}, TypeError, "3 is not a name"),
        ({"managed": "yes"}, TypeError, "managed='yes'"),
        ({"async_alloc": 1}, TypeError, "async_alloc=1"),
        ({"statistics": None}, TypeError, "statistics=None"),
        ({"spill": "on"}, TypeError, "spill='on'"),
        ({"log_directory": 5}, TypeError, "log_directory=5"),
        ({"log_directory": ""}, ValueError, "log_directory=''"),
        ({"jax_memory_fraction": 2}, ValueError, "jax_memory_fraction=2"),
        ({"jax_memory_fraction": "half"}, TypeError, "jax_memory_fraction='half'"),
        ({"force": "yes"}, TypeError, "force='yes'"),
        ({"pool": False, "pool_size": "8GB"}, ValueError, "pool=False (cudaMalloc for every"),
        ({"pool": False, "managed": True}, ValueError, "drop managed"),
        ({"pool": "no"}, TypeError, "pool='no'"),
    ],
)
def test_invalid_options_raise_on_the_client_naming_option_and_fix(options, error, words):
    with pytest.raises(error) as info:
        GPUMemoryPlugin(**options)
    assert words in str(info.value)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="unknown option.*'pools'"):
        GPUMemoryPlugin(pools=1)
    with pytest.raises(TypeError, match="unknown option"):
        MemoryConfig.from_options(poolsize=1)


def test_modes():
    assert GPUMemoryPlugin().config.mode == "pool"
    assert GPUMemoryPlugin(managed=True).config.mode == "managed"
    assert GPUMemoryPlugin(async_alloc=True, release_threshold="10GB").config.mode == "async"


def test_frameworks_are_normalized():
    config = MemoryConfig.from_options(frameworks="CuPy, pytorch,cupy, numba-cuda")
    assert config.frameworks == ("cupy", "torch", "numba")
    assert MemoryConfig.from_options(frameworks=[]).frameworks == ()
    assert MemoryConfig.from_options(frameworks=None).frameworks is None


def test_equal_configs_share_a_stable_name_and_different_ones_do_not():
    a = GPUMemoryPlugin(pool_size="0.8", frameworks=["torch", "cupy"])
    b = GPUMemoryPlugin(pool_size=0.8, frameworks="torch,cupy")
    c = GPUMemoryPlugin(pool_size="0.7", frameworks=["torch", "cupy"])
    assert a.name == b.name
    assert a.name != c.name
    assert a.name.startswith("gpu-interop-memory-")
    assert GPUMemoryPlugin.idempotent is True
    # stable across processes: the name must not depend on hash seeds or object ids
    code = "from dask_gpu_interop import GPUMemoryPlugin as P; print(P(pool_size='0.8', frameworks=['torch','cupy']).name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == a.name


def test_distributed_ucxx_pool_option_is_refused_on_the_client():
    with dask.config.set({"distributed-ucxx.rmm.pool-size": "10GB"}):
        with pytest.raises(ValueError, match="distributed-ucxx.rmm.pool-size"):
            GPUMemoryPlugin()
        assert GPUMemoryPlugin(force=True).force
    with dask.config.set({"distributed.rmm.pool-size": "10GB"}):
        with pytest.raises(ValueError, match="distributed.rmm.pool-size"):
            GPUMemoryPlugin()


def test_repr_shows_what_was_given():
    text = repr(GPUMemoryPlugin(pool_size="0.8", managed=True))
    assert "pool_size=0.8" in text and "managed=True" in text

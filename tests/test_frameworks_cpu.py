"""Framework binders whose logic runs without a GPU: environment settings and names."""

import os
import types

import pytest

from dask_gpu_interop import frameworks as fw
from dask_gpu_interop.frameworks import jax as jax_binder
from dask_gpu_interop.frameworks import torch as torch_binder
from dask_gpu_interop.frameworks.xgboost import config_for
from dask_gpu_interop.memory import MemoryConfig


def fake_state(**options):
    config = MemoryConfig.from_options(**options)
    return types.SimpleNamespace(config=config, mode=config.mode, plan=types.SimpleNamespace(mode=config.mode))


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                 "XLA_CLIENT_MEM_FRACTION", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    yield
    jax_binder.unbind()
    torch_binder.unbind()


def test_jax_is_kept_from_preallocating_and_capped_then_restored(clean_env):
    binding = jax_binder.bind(None, None, fake_state(jax_memory_fraction=0.25))
    assert binding.state == fw.OUTSIDE and "25%" in binding.detail
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"
    # never both names: newer JAX refuses to start with both set
    assert "XLA_CLIENT_MEM_FRACTION" not in os.environ
    jax_binder.unbind()
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ


def test_jax_respects_a_users_own_fraction(clean_env, monkeypatch):
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.5")
    binding = jax_binder.bind(None, None, fake_state(jax_memory_fraction=0.25))
    assert "XLA_CLIENT_MEM_FRACTION=0.5" in binding.detail
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ


def test_torch_async_mode_chooses_the_cuda_async_backend_before_import(clean_env, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    torch_binder.prepare(fake_state(async_alloc=True))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,backend:cudaMallocAsync"
    torch_binder.unbind()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"


def test_torch_pool_mode_and_user_backends_are_left_alone(clean_env, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    torch_binder.prepare(fake_state(pool_size="0.5"))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "backend:native")
    torch_binder.prepare(fake_state(async_alloc=True))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ


def test_xgboost_config_per_mode():
    assert config_for("async", built_with_rmm=False) == {"use_cuda_async_pool": True}
    assert config_for("pool", built_with_rmm=False) == {}
    assert config_for("pool", built_with_rmm=True) == {"use_rmm": True}
    assert config_for(None, built_with_rmm=False) == {}


def test_installed_check_does_not_import(monkeypatch):
    import sys

    before = set(sys.modules)
    for name in fw.KNOWN:
        fw.is_installed(name)
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "numba", "xgboost")}

"""Shared test setup: GPU tests are skipped where there is no GPU (CI has none); the running CPU
cluster that the tests of a running cluster use."""

from __future__ import annotations

import importlib.util

import pytest
from distributed import Client

from dask_gpu_interop import device

from .clusters import cpu_cluster as start_cpu_cluster


def _gpu_ready() -> tuple[bool, str]:
    if device.gpu_count() == 0:
        return False, "no CUDA GPU visible"
    if importlib.util.find_spec("rmm") is None:
        return False, "RMM is not installed"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ready, why = _gpu_ready()
    count = device.gpu_count() if ready else 0
    for item in items:
        if "gpu" in item.keywords and not ready:
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {why}"))
        elif "multi_gpu" in item.keywords and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, {count} visible"))


def needs(module: str):
    """Skip unless ``module`` can be imported (for optional frameworks)."""
    return pytest.mark.skipif(
        importlib.util.find_spec(module.split(".")[0]) is None, reason=f"{module} not installed"
    )


@pytest.fixture(scope="module")
def cpu_cluster():
    """A running cluster of two worker processes that see no GPU, one thread each (one start
    per test module, so that what a module registers on it stays in that module)."""
    with start_cpu_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cpu_client(cpu_cluster):
    """A client of :func:`cpu_cluster`, once both its workers have joined."""
    with Client(cpu_cluster) as client:
        client.wait_for_workers(2)
        yield client

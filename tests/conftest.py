"""Shared test setup: GPU tests are skipped where there is no GPU (CI has none)."""

from __future__ import annotations

import importlib.util

import pytest

from dask_gpu_interop import device


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

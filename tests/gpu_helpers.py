"""Helpers for GPU tests: run on workers, measure what an allocation did to the statistics."""

from __future__ import annotations

import contextlib
import importlib

import pytest

MiB = 1 << 20


def importable(module: str) -> bool:
    """Importable for real (cuDF's Python package can be present without libcudf)."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def require(module: str):
    if not importable(module):
        pytest.skip(f"{module} cannot be imported here")


def allocate(framework: str, nbytes: int):
    """Allocate ``nbytes`` on the current GPU through ``framework``; return the owner."""
    if framework == "cupy":
        import cupy

        out = cupy.empty(nbytes, dtype=cupy.uint8)
        cupy.cuda.runtime.deviceSynchronize()
        return out
    if framework == "numba":
        from numba import cuda

        return cuda.device_array(nbytes, dtype="uint8")
    if framework == "torch":
        import torch

        out = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return out
    if framework == "cudf":
        import cudf
        import numpy as np

        return cudf.Series(np.zeros(nbytes // 8, dtype="float64"))
    raise ValueError(framework)


def measure_allocation(framework: str, nbytes: int) -> dict:
    """On a worker: the report before and after an allocation of ``nbytes`` by ``framework``."""
    from dask_gpu_interop.memory.report import worker_snapshot

    before = worker_snapshot()
    owner = allocate(framework, nbytes)
    after = worker_snapshot()
    del owner
    return {"before": before, "after": after}


def plugin_names(client) -> list[str]:
    return client.run_on_scheduler(
        lambda dask_scheduler: [n for n in dask_scheduler.worker_plugins if n.startswith("gpu-interop-memory-")]
    )


@contextlib.contextmanager
def cuda_cluster(**kwargs):
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    kwargs.setdefault("n_workers", 1)
    kwargs.setdefault("dashboard_address", None)
    with LocalCUDACluster(**kwargs) as cluster, Client(cluster) as client:
        yield client

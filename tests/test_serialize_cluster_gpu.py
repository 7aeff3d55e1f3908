"""CUDA torch tensors moving between two GPU workers over UCX and TCP (needs 2 GPUs).

With distributed 2026.7 alone this fails ("Could not serialize object of type Tensor"). The
tensor is made on worker 0 and used on worker 1, so it really crosses between processes.
"""

from __future__ import annotations

import importlib.util

import pytest

from dask_gpu_interop import cluster_workers
from dask_gpu_interop.device import gpu_count

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.multi_gpu,
    pytest.mark.slow,
    pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs"),
    pytest.mark.skipif(importlib.util.find_spec("dask_cuda") is None, reason="needs dask-cuda"),
]

torch = pytest.importorskip("torch")

import dask_gpu_interop.serialize as ser  # noqa: E402

ser.register()  # this process is the client: it receives in test_gather_to_the_client

PROTOCOLS = [
    "tcp",
    pytest.param(
        "ucx",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("distributed_ucxx") is None, reason="needs distributed-ucxx"
        ),
    ),
]


def make(dtype_name: str, view: str):
    import torch

    import dask_gpu_interop.serialize as ser

    ser.register()
    dtype = getattr(torch, dtype_name)
    x = torch.arange(64 * 48, device="cuda").reshape(64, 48).to(torch.float32)
    if dtype_name.startswith("float8") or dtype is torch.bfloat16:
        x = (x % 7).to(dtype)
    else:
        x = (x % 2 if dtype is torch.bool else x % 100).to(dtype)
    if view == "transposed":
        x = x.t()
    elif view == "sliced":
        x = x[::3, 1::2]
    if view == "requires_grad":
        x = x.float().requires_grad_(True)
        x.grad = torch.ones_like(x)
    return x


def describe(x):
    import torch

    same = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    raw = x.detach().view(same).contiguous().reshape(-1).view(torch.uint8)
    return {
        "device": str(x.device),
        "current": torch.cuda.current_device(),
        "dtype": str(x.dtype),
        "shape": tuple(x.shape),
        "requires_grad": x.requires_grad,
        "grad": None if x.grad is None else float(x.grad.float().sum()),
        "bytes": bytes(raw.cpu().numpy()),
    }


@pytest.fixture(scope="module", params=PROTOCOLS)
def client(request):
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    cluster = LocalCUDACluster(
        n_workers=2,
        CUDA_VISIBLE_DEVICES="0,1",
        protocol=request.param,
        threads_per_worker=1,
        dashboard_address=None,
    )
    with cluster, Client(cluster) as client:
        client.run(lambda: __import__("dask_gpu_interop.serialize").serialize.register())
        client.protocol = request.param  # for the tests that only mean something over UCX
        yield client


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "bool", "int64",
                                   "uint16", "complex64", "float16"])  # fmt: skip
@pytest.mark.parametrize("view", ["contiguous", "transposed", "sliced"])
def test_worker_to_worker(client, dtype, view):
    w0, w1 = sorted(cluster_workers(client))
    x = client.submit(make, dtype, view, workers=[w0], pure=False)
    on_w1 = client.submit(describe, x, workers=[w1]).result()
    on_w0 = client.submit(describe, x, workers=[w0]).result()
    assert on_w1["device"] == "cuda:0"  # worker 1's own GPU, seen as its device 0
    assert on_w1 == on_w0


def test_requires_grad_and_grad_cross(client):
    w0, w1 = sorted(cluster_workers(client))
    x = client.submit(make, "float32", "requires_grad", workers=[w0], pure=False)
    on_w1 = client.submit(describe, x, workers=[w1]).result()
    assert on_w1["requires_grad"] and on_w1["grad"] == 64 * 48


def test_gather_to_the_client(client):
    w0, _ = sorted(cluster_workers(client))
    x = client.submit(make, "bfloat16", "transposed", workers=[w0], pure=False).result()
    assert x.is_cuda and x.dtype is torch.bfloat16 and x.shape == (48, 64)


def rmm_total_bytes() -> int:
    import rmm.statistics

    rmm.statistics.enable_statistics()  # no-op where the plugin already counts
    return rmm.statistics.get_statistics().total_bytes


def make_other(kind: str):
    import cupy

    if kind == "cupy":
        return cupy.arange(1 << 22, dtype=cupy.float32)
    import cudf

    return cudf.DataFrame({"a": cupy.arange(1 << 20, dtype=cupy.float64), "b": 1.5})


@pytest.mark.parametrize("kind", ["cupy", "cudf", "torch"])
def test_ucx_receives_into_the_receivers_rmm_memory(client, kind):
    """Over UCX, received device frames are rmm.DeviceBuffers: counted by the receiver's RMM."""
    if client.protocol != "ucx":
        pytest.skip("TCP receives into host memory")
    pytest.importorskip("rmm")
    if kind == "cudf":
        pytest.importorskip("cudf")
    w0, w1 = sorted(cluster_workers(client))
    before = client.submit(rmm_total_bytes, workers=[w1], pure=False).result()
    if kind == "torch":
        x = client.submit(make, "float32", "contiguous", workers=[w0], pure=False)
        nbytes = 64 * 48 * 4
    else:
        x = client.submit(make_other, kind, workers=[w0], pure=False)
        nbytes = (1 << 22) * 4 if kind == "cupy" else (1 << 20) * 16
    client.submit(lambda v: None, x, workers=[w1], pure=False).result()
    after = client.submit(rmm_total_bytes, workers=[w1], pure=False).result()
    assert after - before >= nbytes

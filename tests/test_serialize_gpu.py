"""Our serializers with CUDA data (gpu-marked: skipped where there is no GPU).

Both families for every dtype, shape and view; that the "cuda" family's frames are device
memory and the receiver's buffer (an ``rmm.DeviceBuffer``, as distributed-ucxx allocates)
becomes the tensor without a copy; that tensors land on the receiver's current device; and
distributed's own protocol tests with our serializers registered.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dask_gpu_interop.device import gpu_count

GPUS = gpu_count()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU"),
]

torch = pytest.importorskip("torch")
if GPUS and not torch.cuda.is_available():  # pragma: no cover - a CPU build on a GPU machine
    pytest.skip("this PyTorch build has no CUDA", allow_module_level=True)

from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize  # noqa: E402

import dask_gpu_interop.serialize as ser  # noqa: E402
from dask_gpu_interop.serialize import dtypes  # noqa: E402

from . import torch_cases  # noqa: E402
from .torch_cases import SHAPES, VIEWS, same_bytes  # noqa: E402

ser.register()

DTYPES = [getattr(torch, n) for n in sorted(dtypes.TORCH) if hasattr(torch, n)]
FAMILIES = {"cuda": ("cuda", "dask", "pickle"), "dask": ("dask", "pickle")}


def sample(dtype, shape, device="cuda"):
    return torch_cases.sample(dtype, shape, device)


def in_place(obj):
    """A uint8 tensor over ``obj``'s device memory (an explicit index: "cuda" alone may copy)."""
    return torch.as_tensor(obj, device=torch.device("cuda", torch.cuda.current_device()))


def as_received(frames):
    """Device frames copied into rmm.DeviceBuffers, as distributed-ucxx receives them."""
    rmm = pytest.importorskip("rmm")
    out = []
    for frame in frames:
        if not hasattr(frame, "__cuda_array_interface__"):
            out.append(frame)
            continue
        buf = rmm.DeviceBuffer(size=frame.nbytes)
        if frame.nbytes:
            in_place(buf).copy_(frame)
        out.append(buf)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_dtype_and_shape(family, dtype, shape):
    x = sample(dtype, shape)
    header, frames = serialize(x, serializers=FAMILIES[family])
    assert header["serializer"] == family
    if family == "cuda":
        assert all(hasattr(f, "__cuda_array_interface__") for f in frames)
    else:
        assert all(isinstance(f, memoryview) for f in frames)
    y = deserialize(header, as_received(frames))
    assert y.device == torch.device("cuda", torch.cuda.current_device())
    assert same_bytes(x, y)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_every_view(family, dtype, view):
    x = VIEWS[view](sample(dtype, (4, 3, 2)))
    header, frames = serialize(x, serializers=FAMILIES[family])
    y = deserialize(header, as_received(frames))
    assert same_bytes(x, y)


def test_wire_format_in_both_families():
    x = sample(torch.bfloat16, (64, 32)).t()
    for family in FAMILIES.values():
        msg = loads(dumps({"x": to_serialize(x)}, serializers=family), deserializers=family)
        assert same_bytes(x, msg["x"])


def test_received_buffer_becomes_the_tensor_without_a_copy():
    rmm = pytest.importorskip("rmm")
    x = torch.randn(1024, 256, device="cuda")
    header, frames = serialize(x, serializers=("cuda",))
    received = as_received(frames)
    assert isinstance(received[0], rmm.DeviceBuffer)
    y = deserialize(header, received)
    assert y.data_ptr() == received[0].ptr  # the receiver's RMM buffer, viewed in place
    assert torch.equal(x, y)


def test_received_buffers_come_from_the_receivers_rmm_resource():
    rmm = pytest.importorskip("rmm")
    statistics = pytest.importorskip("rmm.statistics")
    x = torch.randn(1 << 20, device="cuda")
    header, frames = serialize(x, serializers=("cuda",))
    with statistics.statistics():
        before = statistics.get_statistics().current_bytes
        received = as_received(frames)  # rmm.DeviceBuffer(size=n), as distributed-ucxx does
        y = deserialize(header, received)
        assert statistics.get_statistics().current_bytes - before >= x.nbytes
    assert isinstance(received[0], rmm.DeviceBuffer)
    assert y.data_ptr() == received[0].ptr


def test_dense_views_are_framed_without_a_copy():
    x = torch.randn(256, 128, device="cuda").t()
    header, frames = serialize(x, serializers=("cuda",))
    assert frames[0].__cuda_array_interface__["data"][0] == x.data_ptr()


def test_views_send_only_the_bytes_they_need():
    x = torch.zeros(2048, 2048, device="cuda")[::16, ::16]
    _, frames = serialize(x, serializers=("cuda",))
    assert sum(f.nbytes for f in frames) == x.numel() * 4


def test_requires_grad_grad_and_parameters_on_the_gpu():
    p = torch.nn.Parameter(torch.randn(8, 4, device="cuda"))
    p.grad = torch.ones_like(p)
    t = torch.randn(3, device="cuda", requires_grad=True)
    t.grad = torch.full_like(t, 3.0)
    for family in FAMILIES.values():
        q = deserialize(*serialize(p, serializers=family))
        assert isinstance(q, torch.nn.Parameter) and q.is_cuda
        assert torch.equal(q, p) and torch.equal(q.grad, p.grad)
        u = deserialize(*serialize(t, serializers=family))
        assert u.requires_grad and u.is_leaf and torch.equal(u.grad, t.grad)


def test_side_stream_writes_are_finished_before_sending():
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.ones(1 << 24, device="cuda")
        for _ in range(20):
            x = x * 1.0001
        header, frames = serialize(x, serializers=("cuda",))
        received = as_received(frames)
    expected = torch.full((1 << 24,), 1.0001**20, device="cuda")
    assert torch.allclose(deserialize(header, received), expected)


@pytest.mark.skipif(GPUS < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_lands_on_the_receivers_current_device_not_the_senders(family):
    x = sample(torch.float32, (128, 64), device="cuda:1")
    header, frames = serialize(x, serializers=FAMILIES[family])
    with torch.cuda.device(0):
        y = deserialize(header, frames)
    assert y.device == torch.device("cuda", 0)
    assert same_bytes(x, y)


def test_jax_arrays_on_the_gpu():
    jax = pytest.importorskip("jax")
    rmm = pytest.importorskip("rmm")
    if jax.devices()[0].platform == "cpu":
        pytest.skip("this JAX has no GPU backend")
    import jax.numpy as jnp

    for name in ("float32", "bfloat16", "bool", "int8", "float8_e4m3fn", "uint16"):
        x = jnp.arange(24).reshape(4, 6).astype(name)
        for family, serializers in FAMILIES.items():
            header, frames = serialize(x, serializers=serializers)
            assert header["serializer"] == family
            received = frames
            if family == "cuda":
                received = []
                for frame in frames:
                    buf = rmm.DeviceBuffer(size=frame.nbytes)
                    in_place(buf).copy_(in_place(frame))
                    received.append(buf)
                torch.cuda.synchronize()
            y = deserialize(header, received)
            assert y.dtype == x.dtype and (y == x).all()
            assert list(y.devices())[0].platform != "cpu"
            if family == "cuda":
                assert y.unsafe_buffer_pointer() == received[0].ptr  # imported in place


# --- distributed's own protocol tests, with ours registered -----------------------------------

UPSTREAM = ("test_cupy", "test_numba", "test_rmm", "test_torch")
UPSTREAM_ENV = "DASK_GPU_INTEROP_UPSTREAM_TESTS"
# Inconsistent upstream: it calls .numpy() on a CUDA tensor; distributed's own serializer fails
# before that (it cannot send CUDA tensors). test_every_dtype_and_shape covers the case.
UPSTREAM_DESELECT = {
    "test_torch": ["test_grad_gpu"],
    # The copies of these tests that could be had are older than distributed 2026.7 and fail
    # for reasons outside our serializers (seen on a 2xH200 run): scipy refuses big-endian
    # sparse matrices before anything is serialized; the "cuda_host" family no longer
    # exists; RMM's deserializer asserts a DeviceBuffer frame that only a real transfer makes.
    "test_cupy": ["test_serialize_cupy_sparse and dtype1", "test_serialize_cupy_sparse and dtype3"],
    "test_numba": ["test_serialize_numba_host"],
    "test_rmm": ["test_serialize_rmm_device_buffer_from_numba_array"],
}


def _upstream_target(name: str) -> list[str] | None:
    where = os.environ.get(UPSTREAM_ENV)
    if where:
        root = Path(where)
        for candidate in (root / f"{name}.py", root / "distributed/protocol/tests" / f"{name}.py"):
            if candidate.exists():
                return [str(candidate)]
        return None
    if importlib.util.find_spec("distributed.protocol.tests") is not None:
        return ["--pyargs", f"distributed.protocol.tests.{name}"]
    return None


@pytest.mark.parametrize("name", UPSTREAM)
def test_distributeds_protocol_tests_pass_with_ours_registered(name):
    target = _upstream_target(name)
    if target is None:
        pytest.skip(
            "distributed's wheel and sdist ship no protocol tests: set "
            f"{UPSTREAM_ENV} to a directory holding distributed/protocol/tests/{name}.py "
            "from the matching distributed release"
        )
    skipped = UPSTREAM_DESELECT.get(name, [])
    deselect = ["-k", " and ".join(f"not ({test})" for test in skipped)] if skipped else []
    code = textwrap.dedent(
        f"""
        import sys
        import dask_gpu_interop.serialize as ser
        ser.register()
        import pytest
        sys.exit(pytest.main({target + deselect + ["-q", "-p", "no:cacheprovider"]!r}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode in (0, 5), result.stdout[-4000:] + result.stderr[-2000:]


def _make_awkward_tensors():
    import torch

    return {
        "float8": torch.arange(8, device="cuda", dtype=torch.float32).to(torch.float8_e4m3fn),
        "grad": torch.ones(4, device="cuda", requires_grad=True),
    }


def test_dask_cuda_worker_keeps_float8_and_requires_grad_tensors():
    """A dask-cuda worker stores results by asking whether they are device objects; for these
    tensors torch's __cuda_array_interface__ raised, and the task failed (seen on 2xH200)."""
    pytest.importorskip("dask_cuda")
    import torch
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    import dask_gpu_interop  # noqa: F401  (registers on the client)

    with LocalCUDACluster(n_workers=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        client.register_plugin(dask_gpu_interop.GPUMemoryPlugin(pool_size="1GiB"))
        got = client.submit(_make_awkward_tensors, pure=False).result()
    assert got["float8"].dtype == torch.float8_e4m3fn and got["float8"].is_cuda
    assert got["float8"].float().cpu().tolist() == list(range(8))
    assert got["grad"].requires_grad and got["grad"].is_cuda

"""Our torch serializers on the CPU: every dtype, shape and view, both families' shared code,
tampered headers end to end, and lazy registration over distributed's own serializer.

The CUDA paths are in test_serialize_gpu.py; what both families share (export, rebuild, the
header, the framing) runs here with CPU tensors.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import dask  # noqa: E402
from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize  # noqa: E402

import dask_gpu_interop.serialize as ser  # noqa: E402
from dask_gpu_interop.serialize import dtypes  # noqa: E402
from dask_gpu_interop.serialize.header import HeaderError  # noqa: E402

ser.register()
from dask_gpu_interop.serialize import torch as st_torch  # noqa: E402

from .torch_cases import SHAPES, VIEWS, raw_bytes, same_bytes, sample  # noqa: E402

DTYPES = [getattr(torch, name) for name in sorted(dtypes.TORCH) if hasattr(torch, name)]




# --- the dtype table -------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
def test_every_torch_dtype_is_sent_or_refused_with_a_reason():
    """Whatever this PyTorch's dtypes are (newer releases add some), each is either sent by
    our serializers or refused with a reason naming it, and then travels by pickle."""
    all_dtypes = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert all_dtypes
    for dtype in sorted(all_dtypes, key=str):
        name = str(dtype).removeprefix("torch.")
        try:
            x = torch.zeros(3, dtype=dtype)
        except (RuntimeError, TypeError):  # a dtype PyTorch itself cannot make a tensor of
            continue
        if name in dtypes.TORCH:
            header, flat = st_torch.export(x)
            assert header["dtype"] == name and flat.numel() == 3 * x.element_size()
            continue
        with pytest.raises(NotImplementedError, match=rf"^torch\.{name}: \w"):
            st_torch.export(x)
        header, frames = serialize(x)
        assert header["serializer"] == "pickle", name


def test_a_dtype_we_do_not_know_is_refused_saying_so(monkeypatch):
    monkeypatch.delitem(dtypes.TORCH, "int16")
    with pytest.raises(NotImplementedError, match="torch.int16: .*dask-gpu-interop.*pickle"):
        st_torch.export(torch.zeros(2, dtype=torch.int16))


@pytest.mark.parametrize("name", sorted(dtypes.TORCH))
def test_table_itemsize_matches_torch(name):
    dtype = getattr(torch, name, None)
    if dtype is None:
        pytest.skip(f"this torch has no {name}")
    assert dtype.itemsize == dtypes.TORCH[name].itemsize


@pytest.mark.parametrize("name", sorted(dtypes.COMMON))
def test_numpy_typestrs_match_numpy(name):
    entry = dtypes.COMMON[name]
    if entry.typestr is not None:
        assert np.dtype(entry.typestr).itemsize == entry.itemsize
        assert np.dtype(entry.typestr).name == name


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_dtype_and_shape_round_trips(dtype, shape):
    x = sample(dtype, shape)
    header, frames = serialize(x)
    assert header["serializer"] == "dask"
    y = deserialize(header, frames)
    assert y.device.type == "cpu"
    assert same_bytes(x, y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_views_round_trip_through_the_wire_format(dtype, view):
    x = VIEWS[view](sample(dtype, (4, 3, 2)))
    msg = loads(dumps({"x": to_serialize(x)}))  # msgpack header, frames as on a comm
    assert same_bytes(x, msg["x"])


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_cuda_family_framing_on_the_cpu(view):
    """The "cuda" family's framing (device frames kept as tensors) with CPU tensors."""
    x = VIEWS[view](sample(torch.bfloat16, (4, 3, 2)))
    header, frames = st_torch._dumps(x, st_torch._device_frame)
    assert all(isinstance(f, torch.Tensor) and f.dtype is torch.uint8 for f in frames)
    y = st_torch._loads(header, frames, st_torch._flat_from_device_frame)
    assert same_bytes(x, y)


def test_cuda_family_leaves_host_tensors_to_the_dask_family():
    x = torch.arange(4.0)
    header, frames = serialize(x, serializers=("cuda", "dask", "pickle"))
    assert header["serializer"] == "dask"
    assert torch.equal(deserialize(header, frames), x)


def test_dense_views_are_sent_without_a_copy():
    x = torch.arange(12.0).reshape(3, 4).t()  # transposed: dense, not contiguous
    header, frames = serialize(x)
    (frame,) = frames
    assert np.frombuffer(frame, np.uint8).ctypes.data == x.data_ptr()
    assert header["sub-header"]["array"]["strides"] == (1, 4)
    y = deserialize(header, frames)
    assert y.stride() == x.stride()


def test_channels_last_keeps_its_layout():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    y = deserialize(*serialize(x))
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x, y)


def test_views_send_only_the_bytes_they_need():
    base = torch.zeros(1000, 1000)
    x = base[::10, ::10]
    _, frames = serialize(x)
    assert sum(memoryview(f).nbytes for f in frames) == x.numel() * 4


def test_storage_offset_is_not_sent():
    base = torch.arange(100.0)
    x = base[40:50]
    _, frames = serialize(x)
    assert memoryview(frames[0]).nbytes == 40
    assert torch.equal(deserialize(*serialize(x)), x)


def test_conjugate_and_negative_views():
    z = torch.randn(3, 4, dtype=torch.complex64)
    for x in (z.conj(), z.conj().imag, torch._neg_view(z)):
        assert torch.equal(deserialize(*serialize(x)), x.resolve_conj().resolve_neg())


@pytest.mark.parametrize("requires_grad", [True, False])
def test_requires_grad_and_grad_are_kept(requires_grad):
    x = torch.randn(3, 2, requires_grad=requires_grad)
    if requires_grad:
        x.grad = torch.full_like(x, 2.0)
    y = deserialize(*serialize(x))
    assert y.requires_grad is requires_grad
    assert y.is_leaf
    if requires_grad:
        assert torch.equal(y.grad, x.grad)


def test_non_leaf_tensors_keep_requires_grad():
    a = torch.randn(3, requires_grad=True)
    y = deserialize(*serialize(a * 2))
    assert y.requires_grad and y.is_leaf


def test_parameters_stay_parameters():
    p = torch.nn.Parameter(torch.randn(4, 2))
    p.grad = torch.ones(4, 2)
    for family in (("dask",), ("cuda", "dask")):
        q = deserialize(*serialize(p, serializers=family))
        assert isinstance(q, torch.nn.Parameter)
        assert q.requires_grad and torch.equal(q.grad, p.grad) and torch.equal(q, p)


def test_modules_still_use_distributeds_generic_serializer():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    copy = deserialize(*serialize(model))
    assert str(copy) == str(model)
    assert torch.equal(copy[0].weight, model[0].weight)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),
        lambda: torch.randn(4, 4).to_sparse(),
    ],
    ids=["quantized", "sparse"],
)
def test_what_bytes_cannot_carry_falls_back_to_pickle(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = make()
        header, frames = serialize(x)
        assert header["serializer"] == "pickle"
        y = deserialize(header, frames)
    assert torch.equal(y.dequantize() if x.is_quantized else y.to_dense(),
                       x.dequantize() if x.is_quantized else x.to_dense())  # fmt: skip


def test_received_tensors_are_writable_and_never_alias_read_only_frames():
    x = torch.arange(6, dtype=torch.int32)
    header, frames = serialize(x)
    frozen = [bytes(memoryview(f)) for f in frames]
    y = deserialize(header, frozen)
    y += 1  # writable
    assert bytes(memoryview(frozen[0])) == bytes(memoryview(frames[0]))


def test_misaligned_host_frames_are_realigned():
    x = torch.arange(10, dtype=torch.float64)
    header, frames = serialize(x)
    buffer = bytearray(1 + 80)
    buffer[1:] = bytes(memoryview(frames[0]))
    y = deserialize(header, [memoryview(buffer)[1:]])
    assert torch.equal(x, y)
    assert y.data_ptr() % 8 == 0


def test_multi_frame_host_input_from_split_frames():
    """distributed may split large frames; merge_and_deserialize hands us one buffer."""
    x = torch.randn(1000, 300)
    y = loads(dumps({"x": to_serialize(x)}, frame_split_size=1 << 16))["x"]
    assert torch.equal(x, y)


# --- CUDA data where there is no GPU -------------------------------------------------------


def _as_if_cuda(x):
    header, frames = serialize(x)
    header["sub-header"]["device"] = "cuda"
    return header, frames


def test_cuda_tensor_on_a_machine_without_gpu_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"no usable CUDA GPU.*x\.cpu\(\)"):
        deserialize(*_as_if_cuda(torch.arange(3)))


def test_cuda_tensor_on_a_machine_without_gpu_can_land_on_the_cpu():
    with dask.config.set({"gpu-interop.serialize.no-gpu": "cpu"}):
        with pytest.warns(RuntimeWarning, match="host memory"):
            y = deserialize(*_as_if_cuda(torch.arange(3)))
    assert torch.equal(y, torch.arange(3))


def test_bad_no_gpu_setting_is_refused():
    with dask.config.set({"gpu-interop.serialize.no-gpu": "maybe"}):
        with pytest.raises(ValueError, match="choose 'error' or 'cpu'"):
            deserialize(*_as_if_cuda(torch.arange(3)))


# --- tampered headers, end to end ------------------------------------------------------------

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2**63), st.text(max_size=6),
    st.sampled_from(["cpu", "cuda", "float32", "bool"]),
    st.lists(st.integers(-1, 64), max_size=4).map(tuple),
    st.dictionaries(st.sampled_from(["version", "dtype", "shape"]), st.integers(0, 3)),
)  # fmt: skip


@st.composite
def tampered_messages(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    x = sample(dtype, shape)
    if dtype.is_floating_point and draw(st.booleans()):
        x.requires_grad_(True)
        x.grad = sample(dtype, shape)
    header, frames = st_torch._dumps(x, st_torch._host_frame)
    frames = [bytes(f) for f in frames]
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["torch", "array", "grad", "frames"]))
        if target == "frames":
            edit = draw(st.sampled_from(["truncate", "extend", "drop", "add"]))
            i = draw(st.integers(0, max(len(frames) - 1, 0)))
            if edit == "truncate" and frames and frames[i]:
                frames[i] = frames[i][: draw(st.integers(0, len(frames[i]) - 1))]
            elif edit == "extend" and frames:
                frames[i] = frames[i] + b"\x00" * draw(st.integers(1, 16))
            elif edit == "drop" and frames:
                frames.pop(i)
            elif edit == "add":
                frames.append(b"\x01" * draw(st.integers(0, 16)))
            continue
        where = header if target == "torch" else header.get(target)
        if not isinstance(where, dict):
            continue
        key = draw(st.sampled_from(sorted(where) + ["extra"]))
        if draw(st.booleans()):
            where.pop(key, None)
        else:
            where[key] = draw(junk)
    return header, frames


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tampered_messages(), st.sampled_from(["dask", "cuda"]))
def test_tampered_torch_headers_are_refused_or_consistent(message, family):
    header, frames = message
    load = (
        st_torch.dask_deserialize_tensor if family == "dask" else st_torch.cuda_deserialize_tensor
    )
    try:
        y = load(header, frames)
    except HeaderError as err:
        assert str(err)
        return
    except RuntimeError as err:  # a header that says "cuda", on this GPU-less machine
        assert "no usable CUDA GPU" in str(err)
        return
    # Accepted: the tensor is exactly the first frame's bytes, nothing more, nothing less.
    assert y.numel() * y.element_size() == len(frames[0])
    if y.numel() and y.is_contiguous():
        assert bytes(raw_bytes(y.detach()).numpy()) == frames[0]


# --- registration --------------------------------------------------------------------------


def test_register_is_idempotent():
    ser.register()
    ser.register()
    assert ser.registered("torch")
    header, _ = serialize(torch.ones(2))
    assert "array" in header["sub-header"]


def test_register_rejects_unknown_frameworks():
    with pytest.raises(ValueError, match="no serializers for"):
        ser.register(["tensorflow"])


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_registration_imports_no_torch_until_a_tensor_is_serialized():
    out = _run(
        """
        import sys
        import dask_gpu_interop.serialize as ser
        ser.register()
        import numpy as np
        from distributed.protocol import serialize, deserialize
        deserialize(*serialize(np.arange(3)))
        deserialize(*serialize({"a": 1}))
        assert "torch" not in sys.modules, "torch imported early"
        assert "jax" not in sys.modules, "jax imported early"
        assert "dask_gpu_interop.serialize.torch" not in sys.modules
        import torch
        h, f = serialize(torch.ones(2, dtype=torch.bfloat16))
        assert "array" in h["sub-header"], h
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_registration_wins_after_distributeds_own_ran():
    """torch used before register(): distributed's serializer was already in place."""
    out = _run(
        """
        import torch
        from distributed.protocol import serialize, deserialize
        h, f = serialize(torch.ones(2))
        assert "array" not in h["sub-header"]      # distributed's own
        import dask_gpu_interop.serialize as ser
        ser.register()
        h, f = serialize(torch.ones(2, dtype=torch.bfloat16))
        assert "array" in h["sub-header"], h        # ours now
        class Sub(torch.Tensor):
            pass
        h, f = serialize(torch.ones(2).as_subclass(Sub))
        assert "array" in h["sub-header"], h
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_registration_chains_onto_distributeds_lazy_entry():
    """register() before torch is used: distributed's lazy registration still runs first."""
    out = _run(
        """
        import dask_gpu_interop.serialize as ser
        ser.register()
        import torch
        from distributed.protocol import serialize, deserialize
        from distributed.protocol.serialize import dask_serialize
        h, f = serialize(torch.nn.Linear(2, 2))     # distributed's nn.Module support
        deserialize(h, f)
        import distributed.protocol.torch          # was imported by the chain
        h, f = serialize(torch.ones(2))
        assert "array" in h["sub-header"], h
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_dask_cuda_learns_which_tensors_are_on_the_device(monkeypatch):
    """dask-cuda's default test (hasattr __cuda_array_interface__) raises for float8 and
    requires-grad CUDA tensors; we register the tensor's own answer (module stand-in: the real
    Dispatch, with dask-cuda's default, as in dask_cuda/is_device_object.py)."""
    import sys
    import types

    from dask.utils import Dispatch

    from dask_gpu_interop.serialize import dask_cuda as teach

    dispatch = Dispatch(name="is_device_object")
    dispatch.register(object)(lambda o: hasattr(o, "__cuda_array_interface__"))
    module = types.ModuleType("dask_cuda.is_device_object")
    module.is_device_object = dispatch
    monkeypatch.setitem(sys.modules, "dask_cuda.is_device_object", module)
    teach.register()
    teach.register()  # idempotent
    t = torch.zeros(3, requires_grad=True)
    assert dispatch(t) is False
    assert dispatch(torch.nn.Parameter(torch.zeros(2))) is False
    assert dispatch(object()) is False

"""DLPackView on the CPU: typed views over raw memory for NumPy, PyTorch and JAX consumers.

The same ctypes structures carry device memory on the GPU (only the device type differs), so
these tests check the layout, the type codes, the strides and the release of every capsule.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from dask_gpu_interop.serialize import dtypes
from dask_gpu_interop.serialize.dlpack import CPU, DLPackView, host_pointer, live_exports


def aligned(nbytes: int, align: int = 64):
    """(pointer, owner) of ``nbytes`` zeroed bytes at an ``align``-byte boundary."""
    raw = np.zeros(nbytes + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    view = raw[offset : offset + nbytes]
    return view.ctypes.data, view


def view_of(array: np.ndarray, name: str, shape=None, strides=None) -> DLPackView:
    ptr, owner = host_pointer(memoryview(array).cast("B"))
    return DLPackView(ptr, dtypes.COMMON[name], shape or array.shape, strides, (CPU, 0), owner)


@pytest.fixture(autouse=True)
def no_leaks():
    gc.collect()
    before = live_exports()
    yield
    gc.collect()
    assert live_exports() == before, "a DLPack capsule was never released"


NUMPY_NAMES = [n for n, d in dtypes.COMMON.items() if d.typestr is not None]


@pytest.mark.parametrize("name", NUMPY_NAMES)
def test_numpy_reads_every_numpy_type(name):
    source = (np.arange(12) % 2).astype(name).reshape(3, 4)
    out = np.from_dlpack(view_of(source, name))
    assert out.dtype == np.dtype(name)
    assert np.array_equal(out, source)
    assert out.ctypes.data == source.ctypes.data  # a view, not a copy


def test_strides_are_in_elements():
    source = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.from_dlpack(view_of(source, "float32", shape=(4, 3), strides=(1, 4)))
    assert np.array_equal(out, source.T)


def test_zero_dim_and_empty():
    scalar = np.array(7, dtype=np.int64)
    assert np.from_dlpack(view_of(scalar, "int64", shape=(), strides=())) == 7
    out = np.from_dlpack(DLPackView(0, dtypes.COMMON["float32"], (0, 3), None, (CPU, 0), None))
    assert out.shape == (0, 3)


def test_owner_outlives_the_view():
    ptr, owner = aligned(32)
    owner[:] = 5
    out = np.from_dlpack(DLPackView(ptr, dtypes.COMMON["uint8"], (32,), None, (CPU, 0), owner))
    del owner
    gc.collect()
    assert (out == 5).all()


def test_an_unused_capsule_is_released():
    ptr, owner = aligned(8)
    capsule = DLPackView(ptr, dtypes.COMMON["uint8"], (8,), None, (CPU, 0), owner).__dlpack__()
    assert live_exports() >= 1
    del capsule


def test_refuses_copies_and_other_devices():
    ptr, owner = aligned(8)
    view = DLPackView(ptr, dtypes.COMMON["uint8"], (8,), None, (CPU, 0), owner)
    with pytest.raises(BufferError, match="views only"):
        view.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not"):
        view.__dlpack__(dl_device=(2, 0))


def test_types_without_a_dlpack_code_are_refused():
    with pytest.raises(TypeError, match="no type code"):
        DLPackView(0, dtypes.TORCH["bits8"], (1,), None, (CPU, 0), None)


@pytest.mark.parametrize("name", [n for n in sorted(dtypes.TORCH) if dtypes.TORCH[n].dlpack])
def test_torch_reads_every_type_it_has(name):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, name):
        pytest.skip(f"this torch has no {name}")
    entry = dtypes.TORCH[name]
    ptr, owner = aligned(6 * entry.itemsize)
    out = torch.from_dlpack(DLPackView(ptr, entry, (2, 3), (1, 2), (CPU, 0), owner))
    assert out.dtype == getattr(torch, name)
    assert out.shape == (2, 3) and out.stride() == (1, 2)
    assert out.data_ptr() == ptr


@pytest.mark.parametrize("name", sorted(dtypes.JAX))
def test_jax_reads_every_type_in_place(name):
    jax = pytest.importorskip("jax")
    entry = dtypes.JAX[name]
    if name in ("int64", "uint64", "float64", "complex128") and not jax.config.jax_enable_x64:
        pytest.skip("JAX's 64-bit types are disabled")
    ptr, owner = aligned(12 * entry.itemsize)
    out = jax.dlpack.from_dlpack(DLPackView(ptr, entry, (3, 4), None, (CPU, 0), owner))
    assert np.dtype(out.dtype).name == name
    assert out.unsafe_buffer_pointer() == ptr  # JAX took it in place (64-byte aligned)
    del out

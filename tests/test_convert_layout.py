"""The array layouts that the converters and the serializers share (dask_gpu_interop.layout):
strides, contiguity, and views through ``__cuda_array_interface__``. Plain Python: no GPU and
no framework needed.
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_gpu_interop import layout
from dask_gpu_interop.serialize import placement
from dask_gpu_interop.serialize.header import HeaderError


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 0, 3), (1, 4, 1), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("itemsize", [1, 2, 8])
def test_c_strides_are_numpys(shape, itemsize):
    expected = np.empty(shape, dtype=f"u{itemsize}").strides
    if 0 not in shape:  # NumPy gives a zero-length array's dims any stride
        assert layout.c_strides(shape, itemsize) == expected
    assert layout.c_strides(shape) == tuple(
        s // itemsize for s in layout.c_strides(shape, itemsize)
    )


def test_c_strides_count_a_zero_extent_as_one():
    assert layout.c_strides((2, 0, 3)) == (3, 3, 1)


@pytest.mark.parametrize(
    "array, c, f",
    [
        (np.zeros((3, 4)), True, False),
        (np.zeros((3, 4), order="F"), False, True),
        (np.zeros((3, 4))[:, ::2], False, False),
        (np.zeros((1, 4)), True, True),  # a dim of size 1 takes any stride
        (np.zeros((4, 1))[:, ::3], True, True),
        (np.zeros((0, 4)).T, True, True),
        (np.zeros(5), True, True),
    ],
)
def test_contiguity_agrees_with_numpy(array, c, f):
    args = (array.shape, array.strides, array.itemsize)
    assert layout.is_c_contiguous(*args) is c is array.flags.c_contiguous
    assert layout.is_f_contiguous(*args) is f is array.flags.f_contiguous


def test_same_layout_ignores_dims_of_size_one():
    assert layout.same_layout((1, 3), (99, 8), (24, 8))
    assert not layout.same_layout((2, 3), (99, 8), (24, 8))


def test_dense_takes_any_dimension_order():
    assert layout.is_dense((3, 4), (1, 3))  # transposed
    assert not layout.is_dense((3, 4), (8, 2))  # every other element


class Interface:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = {"version": 3, **cai}


def test_interface_layout_fills_in_row_major_strides():
    got = layout.interface_layout(Interface(data=(4096, False), shape=(2, 3), typestr="<f4"))
    assert got == layout.Layout(4096, (2, 3), (12, 4), 4)
    strided = Interface(data=(4096, False), shape=(2, 3), typestr="<f8", strides=(8, 16))
    assert layout.interface_layout(strided).strides == (8, 16)


def test_cuda_interface_is_none_without_one():
    assert layout.cuda_interface(object()) is None
    assert layout.cuda_interface(Interface(shape=(1,)))["shape"] == (1,)


def test_a_view_describes_its_memory_and_keeps_its_owner():
    owner = object()
    view = layout.CAIView(4096, [2, 3], [4, 8], "<f4", owner)
    assert view.owner is owner
    assert view.__cuda_array_interface__ == {
        "data": (4096, False),
        "shape": (2, 3),
        "strides": (4, 8),
        "typestr": "<f4",
        "version": 3,
        "stream": None,
    }
    assert layout.CAIView(0, (0,), None, "|u1", owner).__cuda_array_interface__["strides"] is None


# --- the serializers' frames, read through the same strides -----------------------------------


@pytest.mark.parametrize(
    "shape, strides, nbytes",
    [((6,), None, 24), ((2, 3), (12, 4), 24), ((2, 3), None, 24), ((0, 3), (4, 8), 0)],
)
def test_contiguous_device_frames_are_measured(shape, strides, nbytes):
    frame = layout.CAIView(4096, shape, strides, "<f4", None)
    assert placement.frame_nbytes(frame) == nbytes


def test_strided_device_frames_are_refused():
    frame = layout.CAIView(4096, (2, 3), (4, 8), "<f4", None)
    with pytest.raises(HeaderError, match="not contiguous"):
        placement.frame_nbytes(frame)

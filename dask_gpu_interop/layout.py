"""Array layouts, in library-neutral terms: strides, contiguity, ``__cuda_array_interface__``.

One place for what the converters (:mod:`.convert`) and the serializers (:mod:`.serialize`)
both need to know of an array's memory: row-major strides, whether strides are C- or
F-contiguous or dense, the layout an interface describes, and a view that describes device
memory through the interface. Strides are counted in bytes where an ``itemsize`` is given,
like ``__cuda_array_interface__``, and in elements where it is not, like PyTorch and our
serialized headers. Nothing here imports a GPU library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Where an array's data starts, and how its elements are laid out from there."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    itemsize: int


def c_strides(shape: Sequence[int], itemsize: int = 1) -> tuple[int, ...]:
    """Row-major strides of ``shape``: in bytes for an ``itemsize``, else in elements."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape, strides, itemsize) -> bool:
    """Whether ``strides`` (bytes) lay ``shape`` out row-major, with no gaps."""
    return same_layout(shape, strides, c_strides(shape, itemsize))


def is_f_contiguous(shape, strides, itemsize) -> bool:
    """Whether ``strides`` (bytes) lay ``shape`` out column-major, with no gaps."""
    return same_layout(shape, strides, c_strides(shape[::-1], itemsize)[::-1])


def same_layout(shape, strides, expected) -> bool:
    """Strides agree wherever they matter (dims of size 1 have any stride)."""
    if 0 in shape:
        return True
    return all(s == e for d, s, e in zip(shape, strides, expected, strict=True) if d > 1)


def is_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether the elements fill ``numel`` consecutive slots, each once, in some dim order."""
    if any(d == 0 for d in shape):
        return True
    dims = sorted((s, d) for d, s in zip(shape, strides, strict=True) if d != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def cuda_interface(obj) -> dict | None:
    """``obj.__cuda_array_interface__``, or None where it has none."""
    try:
        return obj.__cuda_array_interface__
    except AttributeError:
        return None


def interface_layout(obj) -> Layout:
    """The layout that ``obj.__cuda_array_interface__`` describes (strides in bytes)."""
    cai = obj.__cuda_array_interface__
    itemsize = int(cai["typestr"][2:])
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = c_strides(shape, itemsize) if strides is None else tuple(strides)
    return Layout(int(cai["data"][0]), shape, strides, itemsize)


class CAIView:
    """Device memory described by ``__cuda_array_interface__``, keeping its owner alive.

    ``strides`` are in bytes, or None for row-major. The interface names no stream: the
    memory must be ready (its producer waited for) before the view is made.
    """

    def __init__(self, ptr, shape, strides, typestr, owner):
        self._cai = {
            "data": (int(ptr), False),
            "shape": tuple(shape),
            "strides": None if strides is None else tuple(strides),
            "typestr": typestr,
            "version": 3,
            "stream": None,  # the producer was waited for before this view was made
        }
        self.owner = owner

    @property
    def __cuda_array_interface__(self) -> dict:
        return self._cai

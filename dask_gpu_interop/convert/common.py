"""What every conversion shares, whatever the libraries: the source record, the adapters'
table, and the checks that hold a result to ``copy`` and ``order``.

A conversion reads its source into a :class:`Source` (library-neutral: dtype, shape, byte
strides, pointer, device), through the source library's :class:`Adapter` or its
``__cuda_array_interface__``; the target library's adapter builds its object over that
memory, and :func:`check_view` and :func:`finish` hold it to what was asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..layout import Layout, c_strides, is_c_contiguous, is_f_contiguous
from ..serialize import dlpack
from ..serialize.dtypes import COMMON, DType
from .devices import current_cuda_device, sync_stream


class ZeroCopyError(ValueError):
    """``copy=False`` was asked, and this conversion cannot be done without a copy.

    A ``ValueError``. The message says why: nulls, mixed dtypes, a layout the target cannot
    express, or a library that copied on import (caught by comparing the data pointers).

    Examples
    --------
    >>> from dask_gpu_interop.convert import ZeroCopyError, to_cupy
    >>> try:
    ...     array = to_cupy(series_with_nulls, copy=False)
    ... except ZeroCopyError as err:
    ...     print(err)  # the Series has 3 nulls, which a device array cannot hold: ...
    """


ZeroCopyError.__module__ = "dask_gpu_interop.convert"  # where it is imported from


@dataclass
class Source:
    """What we know about the data being converted, in library-neutral terms."""

    obj: object  # what to hand a consumer: has __dlpack__ and/or __cuda_array_interface__
    library: str  # "torch", "cupy", "numba", "jax", "cudf", or "other"
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    ptr: int
    device: tuple[int, int]  # DLPack (type, id)
    copied: bool = False
    stream: int | None = None  # the producer's stream, from __cuda_array_interface__
    origin: object = None  # the caller's object, returned as is when no conversion is needed

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Adapter:
    """One library as the converter sees it: how its objects are built, read and waited for."""

    #: ``(Source, copy, order)`` -> an object of the library over the source's memory.
    build: Callable
    #: ``(obj, copy, order)`` -> :class:`Source`; None: read ``__cuda_array_interface__``.
    read: Callable | None = None
    #: ``(Source)``: wait for the producer's pending writes; None: for the interface's stream.
    wait: Callable | None = None
    #: ``(Source, order)`` -> a C- or F-order copy as a :class:`Source`; None: CuPy makes it.
    copy: Callable | None = None


#: The adapter of each library, by :func:`library_of`'s name (filled in by the package).
ADAPTERS: dict[str, Adapter] = {}


def library_of(obj) -> str:
    """Which of the converted libraries ``obj`` belongs to, by its type's module.

    Imports nothing: an object's library is already imported.

    Parameters
    ----------
    obj : object
        Anything.

    Returns
    -------
    str
        ``"torch"``, ``"cupy"``, ``"numba"``, ``"jax"``, ``"cudf"``, or ``"other"``.

    Examples
    --------
    >>> import numpy
    >>> from dask_gpu_interop.convert import library_of
    >>> library_of(numpy.zeros(3))
    'other'
    """
    top = type(obj).__module__.partition(".")[0]
    if top == "jaxlib":
        return "jax"
    if top in ("torch", "cupy", "numba", "jax", "cudf"):
        return top
    return "other"


def dtype_from_typestr(typestr: str) -> DType:
    for entry in COMMON.values():
        if entry.typestr == typestr or (
            entry.typestr and typestr[1:] == entry.typestr[1:] and typestr[0] in "<|="
        ):
            return entry
    raise TypeError(f"element type {typestr!r} is not one we convert")


def cai_source(obj, cai: dict, library: str, *, copied: bool = False) -> Source:
    if cai.get("mask") is not None:
        raise ZeroCopyError("the array has a null mask: fill the nulls first")
    dtype = dtype_from_typestr(cai["typestr"])
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = c_strides(shape, dtype.itemsize) if strides is None else tuple(strides)
    ptr = int(cai["data"][0])
    device = dlpack.device_of_pointer(ptr) if ptr else (dlpack.CUDA, current_cuda_device())
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    stream = stream if isinstance(stream, int) and not isinstance(stream, bool) else None
    return Source(obj, library, dtype, shape, strides, ptr, device, copied, stream)


def sync_producer(src: Source) -> None:
    """Wait for the producer's pending writes, for a consumer that is given no stream."""
    if src.device[0] == dlpack.CPU:
        return
    adapter = ADAPTERS.get(src.library)
    if adapter is not None and adapter.wait is not None:
        adapter.wait(src)
    elif src.stream is not None:
        sync_stream(src.stream)


def check_view(src: Source, layout: Layout, out, copy, target: str):
    """``out`` must view ``src``'s memory unless a copy was already made or allowed."""
    if src.copied or src.nbytes == 0 or layout.ptr == src.ptr:
        return out
    if copy is False:
        raise ZeroCopyError(
            f"{target} copied the data on import (the source's layout or alignment is not one "
            "it takes in place)"
        )
    src.copied = True
    return out


def finish(src: Source, out, copy, order, layout_of, copier):
    """Apply ``order`` and ``copy=True`` to a view ``out``."""
    layout = layout_of(out)
    wanted = {"C": is_c_contiguous, "F": is_f_contiguous}.get(order)
    if wanted is not None and not wanted(layout.shape, layout.strides, layout.itemsize):
        if copy is False:
            raise ZeroCopyError(
                f"{_ORDER_NAMES[order]} array from {_order_name(layout)} source needs a copy"
            )
        return copier(out)
    if copy and not src.copied:
        return copier(out)
    return out


_ORDER_NAMES = {"C": "a C-order (row-major)", "F": "an F-order (column-major)"}


def _order_name(layout: Layout) -> str:
    if is_c_contiguous(layout.shape, layout.strides, layout.itemsize):
        return "a C-order"
    if is_f_contiguous(layout.shape, layout.strides, layout.itemsize):
        return "an F-order"
    return "a strided"


def contiguous_copy(src: Source, order: str = "C") -> Source:
    """A C- or F-order copy, made by the source's own library (on its device and stream)."""
    adapter = ADAPTERS.get(src.library)
    if adapter is not None and adapter.copy is not None:
        return mark(adapter.copy(src, order))
    cupy = cuda_library("cupy", src)
    sync_producer(src)
    array = cupy.array(src.obj, order=order, copy=True)
    return mark(cai_source(array, array.__cuda_array_interface__, "cupy"))


def mark(src: Source) -> Source:
    src.copied = True
    return src


def cuda_library(name: str, src: Source):
    if src.device[0] == dlpack.CPU:
        raise TypeError(
            f"{name.partition('.')[0]} arrays live on the GPU, this data is in host memory: "
            "move it to the GPU first"
        )
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(f"converting to {name} needs it installed: {err}") from err

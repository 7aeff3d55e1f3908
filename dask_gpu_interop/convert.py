"""Zero-copy conversions between cuDF, CuPy, Numba, PyTorch and JAX.

Going between GPU libraries through host memory (``.cpu()``, ``to_pandas()``, ``np.asarray``)
costs two PCIe copies each way, and it is easy to do without noticing. Every library here can
describe its device memory to another (DLPack or ``__cuda_array_interface__``), so most
conversions need no copy at all; :func:`convert` takes that path and says when it cannot.

``copy``:
  - ``False``: never copy. Returns a view of the same memory, or raises
    :class:`ZeroCopyError` saying why a copy is unavoidable (nulls, mixed dtypes, a layout
    the target cannot express, ...). A view that the target library copied behind our back is
    caught too (the pointers are compared), and raises.
  - ``None`` (default): copy only when needed.
  - ``True``: always return new memory.

Streams: the consumer never reads what the producer's stream has not finished writing.
DLPack hand-offs pass the consumer's stream to the producer (the protocol's ``stream``
argument), so the producer orders the two without blocking the host. Hand-offs through
``__cuda_array_interface__`` (Numba, cuDF, and any target without DLPack) first synchronize
the producer's stream (PyTorch's and CuPy's current stream, the interface's ``stream``, JAX's
readiness, the default stream for cuDF).

Nothing is imported until used: each library is imported only when an object of it is given
or asked for. Which paths are zero-copy is in docs/zero-copy.md.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from dataclasses import dataclass

from .serialize import dlpack
from .serialize.dtypes import COMMON, JAX, TORCH, DType

TARGETS = ("cupy", "torch", "numba", "jax", "cudf")
ORDERS = ("K", "C", "F")
COPIES = (False, None, True)

# dtypes cuDF columns hold as plain device arrays.
_CUDF_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float32", "float64"}  # fmt: skip
_X64 = {"int64", "uint64", "float64", "complex128"}


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


@dataclass
class _Source:
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


def convert(obj, to: str, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a ``to`` object, sharing its memory where possible.

    The hand-off goes through DLPack or ``__cuda_array_interface__``, so device data makes no
    trip through host memory, and the consumer never reads what the producer's stream has not
    finished writing. Each library is imported only when one of its objects is given or asked for.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    to : {"cupy", "torch", "numba", "jax", "cudf"}
        The library of the result.
    copy : bool or None
        False: never copy: a view of the same memory, or :class:`ZeroCopyError` saying why a
        copy is unavoidable (a result that the target library copied behind our back is
        caught too, by comparing the data pointers). None: copy only when needed. True:
        always return new memory.
    order : {"K", "C", "F"}
        "K" keeps the source's layout; "C" or "F" asks for that memory order. JAX arrays are
        always "C"; a 2-D cuDF DataFrame is column-major ("F").

    Returns
    -------
    object
        A CuPy array, torch tensor, Numba device array, JAX array, or cuDF Series (1-D) or
        DataFrame (2-D).

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy.
    ValueError
        An unknown ``to``, ``copy`` or ``order``, or an array cuDF cannot take (more than two
        dimensions, nulls in a column without NaN).
    TypeError
        ``obj`` is not something this module converts, its data is in host memory and the
        target lives on the GPU, or the target cannot hold its element type.
    ImportError
        The target library is not installed.

    Examples
    --------
    >>> import cupy
    >>> from dask_gpu_interop.convert import convert
    >>> a = cupy.asfortranarray(cupy.arange(6, dtype="float32").reshape(3, 2))
    >>> frame = convert(a, "cudf", copy=False)  # two columns viewing the array's columns
    >>> tensor = convert(frame, "torch", copy=False, order="F")
    """
    if to not in TARGETS:
        raise ValueError(f"to={to!r}: choose one of {', '.join(TARGETS)}")
    if copy not in COPIES:
        raise ValueError(f"copy={copy!r}: choose False (never copy), None (when needed) or True")
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: choose 'K' (keep), 'C' or 'F'")
    src = _source(obj, copy, order)
    if src.origin is None:
        src.origin = obj
    with _device_context(src):
        return _TARGET_BUILDERS[to](src, copy, order)


def to_cupy(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a CuPy array, sharing its memory where possible.

    The same as ``convert(obj, "cupy", ...)``.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    copy : bool or None
        False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
        only when needed; True: always return new memory.
    order : {"K", "C", "F"}
        "K" keeps the source's layout; "C" or "F" asks for that memory order (a copy when the
        source has another one).

    Returns
    -------
    object
        A CuPy array.

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy; the message says why.
    TypeError
        ``obj`` is not something this module converts, or the target cannot hold its
        element type.
    ImportError
        The target library is not installed.

    See Also
    --------
    convert : the general form, with the rules for ``copy`` and ``order``.

    Examples
    --------
    >>> from dask_gpu_interop.convert import to_cupy
    >>> array = to_cupy(series, copy=False)  # a view of the Series' column
    """
    return convert(obj, "cupy", copy=copy, order=order)


def to_torch(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a torch tensor, sharing its memory where possible.

    The same as ``convert(obj, "torch", ...)``.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    copy : bool or None
        False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
        only when needed; True: always return new memory.
    order : {"K", "C", "F"}
        "K" keeps the source's layout; "C" or "F" asks for that memory order (a copy when the
        source has another one).

    Returns
    -------
    object
        A torch tensor.

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy; the message says why.
    TypeError
        ``obj`` is not something this module converts, or the target cannot hold its
        element type.
    ImportError
        The target library is not installed.

    See Also
    --------
    convert : the general form, with the rules for ``copy`` and ``order``.

    Examples
    --------
    >>> from dask_gpu_interop.convert import to_torch
    >>> tensor = to_torch(series, copy=False)  # a view, or ZeroCopyError saying why not
    """
    return convert(obj, "torch", copy=copy, order=order)


def to_numba(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a Numba device array, sharing its memory where possible.

    The same as ``convert(obj, "numba", ...)``.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    copy : bool or None
        False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
        only when needed; True: always return new memory.
    order : {"K", "C", "F"}
        "K" keeps the source's layout; "C" or "F" asks for that memory order (a copy when the
        source has another one).

    Returns
    -------
    object
        A Numba device array.

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy; the message says why.
    TypeError
        ``obj`` is not something this module converts, or the target cannot hold its
        element type.
    ImportError
        The target library is not installed.

    See Also
    --------
    convert : the general form, with the rules for ``copy`` and ``order``.

    Examples
    --------
    >>> from dask_gpu_interop.convert import to_numba
    >>> device_array = to_numba(tensor, copy=False)  # for a Numba CUDA kernel
    """
    return convert(obj, "numba", copy=copy, order=order)


def to_jax(obj, *, copy: bool | None = None):
    """``obj`` as a JAX array, sharing its memory where possible.

    The same as ``convert(obj, "jax", ...)`` with ``order="C"``: JAX arrays are always
    row-major.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    copy : bool or None
        False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
        only when needed; True: always return new memory.

    Returns
    -------
    object
        A JAX array.

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy; the message says why.
    TypeError
        ``obj`` is not something this module converts, or the target cannot hold its
        element type.
    ImportError
        The target library is not installed.

    See Also
    --------
    convert : the general form, with the rules for ``copy`` and ``order``.

    Examples
    --------
    >>> from dask_gpu_interop.convert import to_jax
    >>> x = to_jax(tensor)  # copies only if the tensor is not row-major
    """
    return convert(obj, "jax", copy=copy, order="C")


def to_cudf(obj, *, copy: bool | None = None):
    """``obj`` as a cuDF Series (1-D) or DataFrame (2-D), sharing its memory where possible.

    The same as ``convert(obj, "cudf", ...)``. cuDF columns are contiguous, so a zero-copy
    DataFrame needs a column-major (F-order) array.

    Parameters
    ----------
    obj : object
        A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
        any object with ``__cuda_array_interface__``.
    copy : bool or None
        False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
        only when needed; True: always return new memory.

    Returns
    -------
    object
        A cuDF Series (1-D) or DataFrame (2-D).

    Raises
    ------
    ZeroCopyError
        ``copy=False`` and the conversion needs a copy; the message says why.
    TypeError
        ``obj`` is not something this module converts, or the target cannot hold its
        element type.
    ImportError
        The target library is not installed.

    See Also
    --------
    convert : the general form, with the rules for ``copy`` and ``order``.

    Examples
    --------
    >>> import cupy
    >>> from dask_gpu_interop.convert import to_cudf
    >>> frame = to_cudf(cupy.asfortranarray(array), copy=False)  # columns viewing the array
    """
    return convert(obj, "cudf", copy=copy, order="K")


# --- sources ---------------------------------------------------------------------------------


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


def _source(obj, copy, order) -> _Source:
    library = library_of(obj)
    if library == "cudf":
        return _cudf_source(obj, copy, order)
    if library == "torch":
        return _torch_source(obj, copy)
    if library == "jax":
        return _jax_source(obj)
    cai = _cai(obj)
    if cai is None:
        raise TypeError(
            f"cannot convert {type(obj).__module__}.{type(obj).__name__}: expected a cuDF "
            "Series/DataFrame, CuPy or Numba array, torch tensor, JAX array, or an object "
            "with __cuda_array_interface__"
        )
    return _cai_source(obj, cai, library)


def _cai(obj) -> dict | None:
    try:
        return obj.__cuda_array_interface__
    except AttributeError:
        return None


def _dtype_from_typestr(typestr: str) -> DType:
    for entry in COMMON.values():
        if entry.typestr == typestr or (
            entry.typestr and typestr[1:] == entry.typestr[1:] and typestr[0] in "<|="
        ):
            return entry
    raise TypeError(f"element type {typestr!r} is not one we convert")


def _cai_source(obj, cai: dict, library: str, *, copied: bool = False) -> _Source:
    if cai.get("mask") is not None:
        raise ZeroCopyError("the array has a null mask: fill the nulls first")
    dtype = _dtype_from_typestr(cai["typestr"])
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = _c_strides(shape, dtype.itemsize) if strides is None else tuple(strides)
    ptr = int(cai["data"][0])
    device = dlpack.device_of_pointer(ptr) if ptr else (dlpack.CUDA, _current_cuda_device())
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    stream = stream if isinstance(stream, int) and not isinstance(stream, bool) else None
    return _Source(obj, library, dtype, shape, strides, ptr, device, copied, stream)


def _torch_source(t, copy) -> _Source:
    import torch

    t = t.detach()
    if t.layout is not torch.strided:
        raise TypeError(f"{t.layout} tensors have no single buffer: use to_dense() first")
    copied = False
    for bit, resolve in (("conjugate", "resolve_conj"), ("negative", "resolve_neg")):
        if getattr(t, "is_conj" if bit == "conjugate" else "is_neg")():
            if copy is False:
                raise ZeroCopyError(
                    f"the tensor has its {bit} bit set (a lazy view): materializing it copies; "
                    f"call {resolve}() or pass copy=None"
                )
            t, copied = getattr(t, resolve)(), True
    name = str(t.dtype).removeprefix("torch.")
    if name not in TORCH:
        raise TypeError(f"torch.{name} tensors are not converted (no plain element type)")
    itemsize = t.element_size()
    return _Source(
        t,
        "torch",
        TORCH[name],
        tuple(t.shape),
        tuple(s * itemsize for s in t.stride()),
        t.data_ptr() if t.numel() else 0,
        _torch_device(t),
        copied,
    )


def _torch_device(t) -> tuple[int, int]:
    if t.device.type == "cuda":
        return dlpack.CUDA, t.device.index
    if t.device.type == "cpu":
        return dlpack.CPU, 0
    raise TypeError(f"tensors on {t.device.type} are not converted")


def _jax_source(x) -> _Source:
    import numpy as np

    devices = x.devices()
    if len(devices) != 1:
        raise ZeroCopyError("a sharded JAX array has no single buffer: gather it first")
    (device,) = devices
    name = np.dtype(x.dtype).name
    if name not in JAX:
        raise TypeError(f"JAX dtype {name} is not converted")
    x.block_until_ready()  # consumers given no stream (CAI) read it right away
    dtype = JAX[name]
    platform = device.platform
    dev = (dlpack.CPU, 0) if platform == "cpu" else (dlpack.CUDA, device.local_hardware_id)
    return _Source(
        x,
        "jax",
        dtype,
        tuple(x.shape),
        _c_strides(tuple(x.shape), dtype.itemsize),
        x.unsafe_buffer_pointer() if x.size else 0,
        dev,
    )


def _cudf_source(obj, copy, order) -> _Source:
    cudf = importlib.import_module("cudf")
    if isinstance(obj, cudf.DataFrame):
        return _cudf_frame_source(obj, copy, order)
    series = obj if isinstance(obj, cudf.Series) else None
    if series is None and isinstance(obj, cudf.Index):
        series = cudf.Series(obj)
    if series is None:
        raise TypeError(f"cannot convert a {type(obj).__name__}: a Series or DataFrame is needed")
    if not _cudf_numeric(series.dtype):
        if copy is False:
            raise ZeroCopyError(
                f"a cuDF column of dtype {series.dtype} is not one plain device array"
            )
        series = _cudf_plain(series)
    elif series.null_count:
        if copy is False:
            raise ZeroCopyError(
                f"the Series has {series.null_count} nulls, which a device array cannot hold: "
                "fill them first (fillna) or pass copy=None (floats get NaN)"
            )
        series = _cudf_fill_nulls(series)
    if library_of(series) != "cudf":  # a CuPy copy
        return _cai_source(series, series.__cuda_array_interface__, "cupy", copied=True)
    if len(series) == 0:
        cupy = importlib.import_module("cupy")
        array = cupy.empty(0, dtype=series.dtype)
        return _cai_source(array, array.__cuda_array_interface__, "cupy")
    cai = series.__cuda_array_interface__
    # Hand consumers a plain interface (not the Series, which some treat as a sequence).
    view = _CAIView(cai["data"][0], cai["shape"], cai.get("strides") or (series.dtype.itemsize,),
                    cai["typestr"], series)  # fmt: skip
    return _cai_source(view, view.__cuda_array_interface__, "cudf")


def _cudf_numeric(dtype) -> bool:
    import numpy as np

    return isinstance(dtype, np.dtype) and dtype.name in _CUDF_DTYPES


def _cudf_plain(series):
    import cupy

    return cupy.asarray(series.to_cupy())


def _cudf_fill_nulls(series):
    import numpy as np

    if series.dtype.kind != "f":
        raise ValueError(
            f"the Series has {series.null_count} nulls and dtype {series.dtype}, which has no "
            "NaN: fill them first (series.fillna(value))"
        )
    return series.to_cupy(na_value=np.nan)  # a new CuPy array


def _cudf_frame_source(df, copy, order) -> _Source:
    """A numeric frame's columns as one column-major 2-D view, when they are laid out as one."""
    columns = [df[name] for name in df.columns]
    reason = _cudf_frame_obstacle(df, columns, order)
    if reason is None:
        first = columns[0].__cuda_array_interface__
        itemsize = columns[0].dtype.itemsize
        ptrs = [c.__cuda_array_interface__["data"][0] for c in columns]
        step = ptrs[1] - ptrs[0] if len(ptrs) > 1 else len(df) * itemsize
        view = _CAIView(
            ptr=ptrs[0],
            shape=(len(df), len(columns)),
            strides=(itemsize, step),
            typestr=first["typestr"],
            owner=df,
        )
        return _cai_source(view, view.__cuda_array_interface__, "cudf")
    if copy is False:
        raise ZeroCopyError(reason)
    import cupy
    import numpy as np

    floats = all(c.dtype.kind == "f" for c in columns)
    array = df.to_cupy(na_value=np.nan) if floats else df.to_cupy()  # nulls in ints: cuDF says
    array = cupy.asfortranarray(array) if order != "C" else cupy.ascontiguousarray(array)
    return _cai_source(array, array.__cuda_array_interface__, "cupy", copied=True)


def _cudf_frame_obstacle(df, columns, order) -> str | None:
    """Why ``df`` cannot be seen as one 2-D array without a copy (None: it can)."""
    if not columns:
        return "the DataFrame has no columns"
    dtypes = {str(c.dtype) for c in columns}
    if len(dtypes) > 1:
        return f"the columns have different dtypes ({', '.join(sorted(dtypes))}): one array has one"
    if not _cudf_numeric(columns[0].dtype):
        return f"columns of dtype {columns[0].dtype} are not plain device arrays"
    nulls = sum(c.null_count for c in columns)
    if nulls:
        return f"the columns hold {nulls} nulls, which a device array cannot hold: fill them first"
    itemsize = columns[0].dtype.itemsize
    ptrs = [c.__cuda_array_interface__["data"][0] for c in columns]
    if len(ptrs) > 1:
        step = ptrs[1] - ptrs[0]
        evenly = all(b - a == step for a, b in zip(ptrs, ptrs[1:], strict=False))
        if not evenly or step < len(df) * itemsize or step % itemsize:
            return (
                "cuDF allocated the columns separately, so they are not one strided block: "
                "a 2-D array needs a copy (only frames made from one column-major buffer, "
                "e.g. to_cudf(F-order array), are views)"
            )
        if order == "C" and len(df) > 1:
            return (
                "a C-order (row-major) array from a DataFrame needs a copy: cuDF stores each "
                "column contiguously; ask order='F' or 'K' for a view"
            )
    return None


# --- targets ---------------------------------------------------------------------------------


def _to_torch(src: _Source, copy, order):
    import torch

    if src.library == "torch":
        out = src.obj if src.copied or src.origin is None else src.origin
    elif hasattr(src.obj, "__dlpack__") and not _is_managed(src.obj):
        # torch passes its current stream: the producer makes it wait for pending writes.
        out = torch.from_dlpack(src.obj)
    else:
        _sync_producer(src)
        # device= imports the interface in place (without it, torch copies to the host)
        out = torch.as_tensor(src.obj, device=torch.device("cuda", src.device[1]))
    out = _check_view(src, _torch_layout(out), out, copy, "PyTorch")
    return _finish(src, out, copy, order, _torch_layout, lambda t: _torch_copy(t, order))


def _is_managed(obj) -> bool:
    """Managed memory: DLPack calls it kDLCUDAManaged, which PyTorch refuses (seen with
    torch 2.11), so such data goes by the CUDA array interface instead (also zero-copy)."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or _cai(obj) is None:
        return False
    try:
        return int(device()[0]) == 13  # kDLCUDAManaged
    except Exception:
        return False


def _torch_copy(t, order):
    import torch

    if order == "F" and t.dim() > 1:
        dims = tuple(reversed(range(t.dim())))
        return t.permute(dims).contiguous().permute(dims)
    return t.clone(memory_format=torch.contiguous_format if order == "C" else torch.preserve_format)


def _to_cupy(src: _Source, copy, order):
    cupy = _cuda_library("cupy", src)
    try:
        if src.library == "cupy":
            out = src.obj
        elif src.library in ("torch", "jax"):
            out = cupy.from_dlpack(src.obj)  # cupy passes its current stream to the producer
        else:
            _sync_producer(src)
            out = cupy.asarray(src.obj)
    except (TypeError, ValueError, BufferError) as err:
        raise TypeError(f"CuPy cannot take this {src.dtype.name} data: {err}") from err
    out = _check_view(src, _cai_layout(out), out, copy, "CuPy")
    return _finish(src, out, copy, order, _cai_layout, lambda a: a.copy(order=order))


def _to_numba(src: _Source, copy, order):
    cuda = _cuda_library("numba.cuda", src)
    if src.dtype.typestr is None:
        raise TypeError(f"Numba has no {src.dtype.name} arrays")
    if src.library == "numba":
        out = src.obj
    else:
        _sync_producer(src)  # torch's interface has no stream for Numba to wait on
        with cuda.gpus[src.device[1]]:
            out = cuda.as_cuda_array(src.obj)
    out = _check_view(src, _cai_layout(out), out, copy, "Numba")
    return _finish(src, out, copy, order, _cai_layout, lambda a: _numba_copy(a, order))


def _numba_copy(a, order):
    from numba import cuda

    if order in ("C", "F") and not a.flags[f"{order}_CONTIGUOUS"]:
        cupy = importlib.import_module("cupy")  # Numba copies bytes only, it cannot reorder
        return cuda.as_cuda_array(cupy.array(a, order=order, copy=True))
    out = cuda.device_array(a.shape, dtype=a.dtype, strides=a.strides)
    out.copy_to_device(a)
    return out


def _to_jax(src: _Source, copy, order):
    import jax

    if src.dtype.name not in JAX:
        raise TypeError(f"JAX has no {src.dtype.name} arrays")
    if src.dtype.name in _X64 and not jax.config.jax_enable_x64:
        message = (
            f"JAX runs with 64-bit types disabled, so {src.dtype.name} would become a 32-bit "
            "copy: enable them (jax.config.update('jax_enable_x64', True)) first"
        )
        if copy is False:
            raise ZeroCopyError(message)
        warnings.warn(message, stacklevel=3)
    if src.library == "jax":
        out = src.obj
    else:
        if not _is_c_contiguous(src.shape, src.strides, src.dtype.itemsize):
            if copy is False:
                raise ZeroCopyError(
                    f"JAX arrays are always row-major; strides {src.strides} (bytes) for shape "
                    f"{src.shape} need a copy (make it contiguous first, or pass copy=None)"
                )
            src = _contiguous_copy(src)
        if hasattr(src.obj, "__dlpack__"):
            producer = src.obj  # jax passes its stream to the producer
        else:
            _sync_producer(src)
            producer = dlpack.DLPackView(src.ptr, src.dtype, src.shape, None, src.device, src.obj)
        try:
            out = jax.dlpack.from_dlpack(producer, copy=False if copy is False else None)
        except ValueError as err:
            if copy is False:
                raise ZeroCopyError(f"JAX would copy on import: {err}") from err
            raise
    out = _check_view(src, _jax_layout(out), out, copy, "JAX")
    return _finish(src, out, copy, "C", _jax_layout, lambda x: jax.numpy.array(x, copy=True))


def _to_cudf(src: _Source, copy, order):
    cudf = _cuda_library("cudf", src)
    if isinstance(src.origin, (cudf.Series, cudf.DataFrame)) and not src.copied:
        return src.origin.copy(deep=True) if copy else src.origin
    if src.dtype.name not in _CUDF_DTYPES:
        raise TypeError(f"cuDF has no {src.dtype.name} columns")
    if len(src.shape) not in (1, 2):
        raise ValueError(
            f"cuDF takes 1-D (Series) or 2-D (DataFrame) arrays, not {len(src.shape)}-D"
        )
    itemsize = src.dtype.itemsize
    columns_contiguous = src.shape[0] <= 1 or src.strides[0] == itemsize
    if not columns_contiguous:
        what = "a strided 1-D array" if len(src.shape) == 1 else "a C-order (row-major) 2-D array"
        if copy is False:
            raise ZeroCopyError(
                f"cuDF columns are contiguous: {what} needs a copy; pass an F-order "
                "(column-major) array for a zero-copy frame"
            )
        src = _contiguous_copy(src, "F")
    _sync_producer(src)
    out, ptrs = _cudf_build(cudf, src)
    step = src.strides[1] if len(src.shape) == 2 else 0
    expected = [src.ptr + j * step for j in range(len(ptrs))]
    if src.nbytes and ptrs != expected and not src.copied:
        if copy is False:
            raise ZeroCopyError("cuDF copied the data while building the frame")
        src.copied = True
    if copy and not src.copied:
        out = out.copy(deep=True)
    return out


def _cudf_build(cudf, src: _Source):
    """A Series (1-D) or DataFrame (2-D, one column per column of ``src``) viewing ``src``."""
    itemsize, typestr = src.dtype.itemsize, src.dtype.typestr

    def column(offset: int, rows: int):
        view = _CAIView(src.ptr + offset, (rows,), (itemsize,), typestr, src.obj)
        return cudf.Series(view, nan_as_null=False)  # NaN is a value here, not a null

    if len(src.shape) == 1:
        out = column(0, src.shape[0])
        return out, [_cudf_ptr(out)]
    rows, cols = src.shape
    series = [column(j * src.strides[1], rows) for j in range(cols)]
    out = cudf.DataFrame(dict(enumerate(series)))
    ptrs = [_cudf_ptr(out[j]) for j in range(cols)]
    if src.nbytes and ptrs != [_cudf_ptr(s) for s in series]:
        # The public constructor copied: build the frame from the columns themselves.
        from .compat import cudf_frame_of_columns

        built = cudf_frame_of_columns(cudf, series)
        if built is not None:
            out = built
            ptrs = [_cudf_ptr(out[j]) for j in range(cols)]
    return out, ptrs


def _cudf_ptr(series) -> int:
    return int(series.__cuda_array_interface__["data"][0])


_TARGET_BUILDERS = {
    "torch": _to_torch,
    "cupy": _to_cupy,
    "numba": _to_numba,
    "jax": _to_jax,
    "cudf": _to_cudf,
}


# --- layouts, checks and copies -------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    itemsize: int


def _torch_layout(t) -> _Layout:
    size = t.element_size()
    return _Layout(t.data_ptr() if t.numel() else 0, tuple(t.shape),
                   tuple(s * size for s in t.stride()), size)  # fmt: skip


def _cai_layout(a) -> _Layout:
    cai = a.__cuda_array_interface__
    itemsize = int(cai["typestr"][2:])
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = _c_strides(shape, itemsize) if strides is None else tuple(strides)
    return _Layout(int(cai["data"][0]), shape, strides, itemsize)


def _jax_layout(x) -> _Layout:
    import numpy as np

    itemsize = np.dtype(x.dtype).itemsize
    shape = tuple(x.shape)
    return _Layout(x.unsafe_buffer_pointer() if x.size else 0, shape,
                   _c_strides(shape, itemsize), itemsize)  # fmt: skip


def _check_view(src: _Source, layout: _Layout, out, copy, target: str):
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


def _finish(src: _Source, out, copy, order, layout_of, copier):
    """Apply ``order`` and ``copy=True`` to a view ``out``."""
    layout = layout_of(out)
    wanted = {"C": _is_c_contiguous, "F": _is_f_contiguous}.get(order)
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


def _order_name(layout: _Layout) -> str:
    if _is_c_contiguous(layout.shape, layout.strides, layout.itemsize):
        return "a C-order"
    if _is_f_contiguous(layout.shape, layout.strides, layout.itemsize):
        return "an F-order"
    return "a strided"


def _c_strides(shape, itemsize) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _is_c_contiguous(shape, strides, itemsize) -> bool:
    return _same_layout(shape, strides, _c_strides(shape, itemsize))


def _is_f_contiguous(shape, strides, itemsize) -> bool:
    return _same_layout(shape, strides, _c_strides(shape[::-1], itemsize)[::-1])


def _same_layout(shape, strides, expected) -> bool:
    """Strides agree wherever they matter (dims of size 1 have any stride)."""
    if 0 in shape:
        return True
    return all(s == e for d, s, e in zip(shape, strides, expected, strict=True) if d > 1)


def _contiguous_copy(src: _Source, order: str = "C") -> _Source:
    """A C- or F-order copy, made by the source's own library (on its device and stream)."""
    if src.library == "torch":
        return _mark(_torch_source(_torch_copy(src.obj, order), None))
    cupy = _cuda_library("cupy", src)
    _sync_producer(src)
    array = cupy.array(src.obj, order=order, copy=True)
    return _mark(_cai_source(array, array.__cuda_array_interface__, "cupy"))


def _mark(src: _Source) -> _Source:
    src.copied = True
    return src


class _CAIView:
    """Device memory described by ``__cuda_array_interface__``, keeping its owner alive."""

    def __init__(self, ptr, shape, strides, typestr, owner):
        self._cai = {
            "data": (int(ptr), False),
            "shape": tuple(shape),
            "strides": tuple(strides),
            "typestr": typestr,
            "version": 3,
            "stream": None,  # the producer was synchronized before this view was made
        }
        self.owner = owner

    @property
    def __cuda_array_interface__(self) -> dict:
        return self._cai


# --- streams and devices -------------------------------------------------------------------


def _sync_producer(src: _Source) -> None:
    """Wait for the producer's pending writes, for a consumer that is given no stream."""
    if src.device[0] == dlpack.CPU:
        return
    if src.library == "torch":
        import torch

        torch.cuda.current_stream(src.obj.device).synchronize()
    elif src.library == "cupy":
        sys.modules["cupy"].cuda.get_current_stream().synchronize()
    elif src.library == "jax":
        src.obj.block_until_ready()
    elif src.stream is not None:
        _sync_stream(src.stream)
    elif src.library == "cudf":
        _sync_default_stream()  # cuDF works on the default stream


def _device_context(src: _Source):
    """Make the source's GPU current: PyTorch exports DLPack only from the current device."""
    stack = contextlib.ExitStack()
    if src.device[0] != dlpack.CUDA:
        return stack
    index = src.device[1]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        stack.enter_context(torch.cuda.device(index))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        stack.enter_context(cupy.cuda.Device(index))
    return stack


def _sync_default_stream() -> None:
    _sync_stream(1)  # cudaStreamLegacy


def _sync_stream(handle: int) -> None:
    try:
        from cuda.bindings import runtime
    except ImportError:
        runtime = None
    if runtime is not None:
        (err,) = runtime.cudaStreamSynchronize(handle)
        if err != runtime.cudaError_t.cudaSuccess:
            raise RuntimeError(f"cudaStreamSynchronize({handle:#x}) failed: {err}")
        return
    importlib.import_module("cupy").cuda.ExternalStream(handle).synchronize()


def _current_cuda_device() -> int:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return importlib.import_module("cupy").cuda.runtime.getDevice()
    err, device = runtime.cudaGetDevice()
    return int(device)


def _cuda_library(name: str, src: _Source):
    if src.device[0] == dlpack.CPU:
        raise TypeError(
            f"{name.partition('.')[0]} arrays live on the GPU, this data is in host memory: "
            "move it to the GPU first"
        )
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(f"converting to {name} needs it installed: {err}") from err

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

Modules: one adapter per library (:mod:`.cupy`, :mod:`.torch`, :mod:`.numba`, :mod:`.jax`,
:mod:`.cudf` with :mod:`.cudf_frame`), each reading its library's objects and building them;
:mod:`.common` (the source record and the checks every conversion makes), :mod:`.devices`
(streams and devices), over :mod:`dask_gpu_interop.layout` (strides and contiguity).
"""

from __future__ import annotations

import inspect

from ..layout import cuda_interface
from . import cudf, cupy, jax, numba, torch  # the adapters: each imports its library only in use
from .common import ADAPTERS, Source, ZeroCopyError, cai_source, library_of
from .devices import device_context

__all__ = ["COPIES", "ORDERS", "TARGETS", "ZeroCopyError", "convert", "library_of", "to_cudf",
           "to_cupy", "to_jax", "to_numba", "to_torch"]  # fmt: skip

TARGETS = ("cupy", "torch", "numba", "jax", "cudf")
ORDERS = ("K", "C", "F")
COPIES = (False, None, True)

ADAPTERS.update(cupy=cupy.ADAPTER, torch=torch.ADAPTER, numba=numba.ADAPTER, jax=jax.ADAPTER,
                cudf=cudf.ADAPTER)  # fmt: skip


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
    with device_context(src):
        return ADAPTERS[to].build(src, copy, order)


def _source(obj, copy, order) -> Source:
    library = library_of(obj)
    adapter = ADAPTERS.get(library)
    if adapter is not None and adapter.read is not None:
        return adapter.read(obj, copy, order)
    cai = cuda_interface(obj)
    if cai is None:
        raise TypeError(
            f"cannot convert {type(obj).__module__}.{type(obj).__name__}: expected a cuDF "
            "Series/DataFrame, CuPy or Numba array, torch tensor, JAX array, or an object "
            "with __cuda_array_interface__"
        )
    return cai_source(obj, cai, library)


# --- one function per target: the same as convert(obj, target, ...) ---------------------------

_OBJ_AND_COPY = """
Parameters
----------
obj : object
    A cuDF Series or DataFrame, a CuPy or Numba array, a torch tensor, a JAX array, or
    any object with ``__cuda_array_interface__``.
copy : bool or None
    False: never copy (a view of the same memory, or :class:`ZeroCopyError`); None: copy
    only when needed; True: always return new memory.
"""
_ORDER = """order : {"K", "C", "F"}
    "K" keeps the source's layout; "C" or "F" asks for that memory order (a copy when the
    source has another one).
"""
_RESULT_AND_ERRORS = """
Returns
-------
object
    %s

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
"""


def _documented(returns: str, *, order: bool = True):
    """Complete a ``to_*`` function's docstring (a summary, then its example) into numpydoc:
    the sections they all share, then Examples, which import the function before its use."""

    def document(function):
        if function.__doc__ is None:  # python -OO drops docstrings
            return function
        lines = inspect.cleandoc(function.__doc__).splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith(">>> "))
        use = next(i for i in range(first, len(lines)) if function.__name__ in lines[i])
        example = [
            *lines[first:use],
            f">>> from {__name__} import {function.__name__}",
            *lines[use:],
        ]
        shared = _OBJ_AND_COPY + (_ORDER if order else "") + _RESULT_AND_ERRORS % returns
        prose = "\n".join(lines[:first]).rstrip()
        function.__doc__ = f"{prose}\n{shared}\nExamples\n--------\n" + "\n".join(example)
        return function

    return document


@_documented("A CuPy array.")
def to_cupy(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a CuPy array, sharing its memory where possible.

    The same as ``convert(obj, "cupy", ...)``.

    >>> array = to_cupy(series, copy=False)  # a view of the Series' column
    """
    return convert(obj, "cupy", copy=copy, order=order)


@_documented("A torch tensor.")
def to_torch(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a torch tensor, sharing its memory where possible.

    The same as ``convert(obj, "torch", ...)``.

    >>> tensor = to_torch(series, copy=False)  # a view, or ZeroCopyError saying why not
    """
    return convert(obj, "torch", copy=copy, order=order)


@_documented("A Numba device array.")
def to_numba(obj, *, copy: bool | None = None, order: str = "K"):
    """``obj`` as a Numba device array, sharing its memory where possible.

    The same as ``convert(obj, "numba", ...)``.

    >>> device_array = to_numba(tensor, copy=False)  # for a Numba CUDA kernel
    """
    return convert(obj, "numba", copy=copy, order=order)


@_documented("A JAX array.", order=False)
def to_jax(obj, *, copy: bool | None = None):
    """``obj`` as a JAX array, sharing its memory where possible.

    The same as ``convert(obj, "jax", ...)`` with ``order="C"``: JAX arrays are always
    row-major.

    >>> x = to_jax(tensor)  # copies only if the tensor is not row-major
    """
    return convert(obj, "jax", copy=copy, order="C")


@_documented("A cuDF Series (1-D) or DataFrame (2-D).", order=False)
def to_cudf(obj, *, copy: bool | None = None):
    """``obj`` as a cuDF Series (1-D) or DataFrame (2-D), sharing its memory where possible.

    The same as ``convert(obj, "cudf", ...)``. cuDF columns are contiguous, so a zero-copy
    DataFrame needs a column-major (F-order) array.

    >>> import cupy
    >>> frame = to_cudf(cupy.asfortranarray(array), copy=False)  # columns viewing the array
    """
    return convert(obj, "cudf", copy=copy, order="K")

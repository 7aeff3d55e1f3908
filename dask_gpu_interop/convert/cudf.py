"""cuDF Series and DataFrames: a numeric column without nulls is read as a plain device array,
a DataFrame as one column-major 2-D array when its columns are one strided block
(:mod:`.cudf_frame`); built as columns viewing the source's memory.

cuDF works on the default stream. cuDF is imported only when one of these functions runs.
"""

from __future__ import annotations

import importlib

from ..layout import CAIView
from .common import (
    Adapter,
    Source,
    ZeroCopyError,
    cai_source,
    contiguous_copy,
    cuda_library,
    library_of,
    sync_producer,
)
from .cudf_frame import CUDF_DTYPES, build_frame, frame_source, plain_dtype
from .devices import sync_default_stream, sync_stream


def build(src: Source, copy, order):
    cudf = cuda_library("cudf", src)
    if isinstance(src.origin, (cudf.Series, cudf.DataFrame)) and not src.copied:
        return src.origin.copy(deep=True) if copy else src.origin
    if src.dtype.name not in CUDF_DTYPES:
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
        src = contiguous_copy(src, "F")
    sync_producer(src)
    out, ptrs = build_frame(cudf, src)
    step = src.strides[1] if len(src.shape) == 2 else 0
    expected = [src.ptr + j * step for j in range(len(ptrs))]
    if src.nbytes and ptrs != expected and not src.copied:
        if copy is False:
            raise ZeroCopyError("cuDF copied the data while building the frame")
        src.copied = True
    if copy and not src.copied:
        out = out.copy(deep=True)
    return out


def source(obj, copy, order) -> Source:
    cudf = importlib.import_module("cudf")
    if isinstance(obj, cudf.DataFrame):
        return frame_source(obj, copy, order)
    series = obj if isinstance(obj, cudf.Series) else None
    if series is None and isinstance(obj, cudf.Index):
        series = cudf.Series(obj)
    if series is None:
        raise TypeError(f"cannot convert a {type(obj).__name__}: a Series or DataFrame is needed")
    if not plain_dtype(series.dtype):
        if copy is False:
            raise ZeroCopyError(
                f"a cuDF column of dtype {series.dtype} is not one plain device array"
            )
        series = _plain(series)
    elif series.null_count:
        if copy is False:
            raise ZeroCopyError(
                f"the Series has {series.null_count} nulls, which a device array cannot hold: "
                "fill them first (fillna) or pass copy=None (floats get NaN)"
            )
        series = _fill_nulls(series)
    if library_of(series) != "cudf":  # a CuPy copy
        return cai_source(series, series.__cuda_array_interface__, "cupy", copied=True)
    if len(series) == 0:
        cupy = importlib.import_module("cupy")
        array = cupy.empty(0, dtype=series.dtype)
        return cai_source(array, array.__cuda_array_interface__, "cupy")
    cai = series.__cuda_array_interface__
    # Hand consumers a plain interface (not the Series, which some treat as a sequence).
    view = CAIView(cai["data"][0], cai["shape"], cai.get("strides") or (series.dtype.itemsize,),
                   cai["typestr"], series)  # fmt: skip
    return cai_source(view, view.__cuda_array_interface__, "cudf")


def _plain(series):
    import cupy

    return cupy.asarray(series.to_cupy())


def _fill_nulls(series):
    import numpy as np

    if series.dtype.kind != "f":
        raise ValueError(
            f"the Series has {series.null_count} nulls and dtype {series.dtype}, which has no "
            "NaN: fill them first (series.fillna(value))"
        )
    return series.to_cupy(na_value=np.nan)  # a new CuPy array


def wait(src: Source) -> None:
    """cuDF works on the default stream (unless the interface names another)."""
    if src.stream is not None:
        sync_stream(src.stream)
    else:
        sync_default_stream()


ADAPTER = Adapter(build=build, read=source, wait=wait)

"""cuDF DataFrames as 2-D arrays and back: a frame whose columns are one strided block of one
numeric dtype is a column-major view, and a column-major array becomes a frame whose columns
view its columns.

cuDF and CuPy are imported only when one of these functions runs.
"""

from __future__ import annotations

from ..layout import CAIView
from .common import Source, ZeroCopyError, cai_source

#: dtypes cuDF columns hold as plain device arrays.
CUDF_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float32", "float64"}  # fmt: skip


def plain_dtype(dtype) -> bool:
    """Whether a cuDF column of ``dtype`` is one plain device array."""
    import numpy as np

    return isinstance(dtype, np.dtype) and dtype.name in CUDF_DTYPES


def frame_source(df, copy, order) -> Source:
    """A numeric frame's columns as one column-major 2-D view, when they are laid out as one."""
    columns = [df[name] for name in df.columns]
    reason = _obstacle(df, columns, order)
    if reason is None:
        first = columns[0].__cuda_array_interface__
        itemsize = columns[0].dtype.itemsize
        ptrs = [c.__cuda_array_interface__["data"][0] for c in columns]
        step = ptrs[1] - ptrs[0] if len(ptrs) > 1 else len(df) * itemsize
        view = CAIView(
            ptr=ptrs[0],
            shape=(len(df), len(columns)),
            strides=(itemsize, step),
            typestr=first["typestr"],
            owner=df,
        )
        return cai_source(view, view.__cuda_array_interface__, "cudf")
    if copy is False:
        raise ZeroCopyError(reason)
    import cupy
    import numpy as np

    floats = all(c.dtype.kind == "f" for c in columns)
    array = df.to_cupy(na_value=np.nan) if floats else df.to_cupy()  # nulls in ints: cuDF says
    array = cupy.asfortranarray(array) if order != "C" else cupy.ascontiguousarray(array)
    return cai_source(array, array.__cuda_array_interface__, "cupy", copied=True)


def _obstacle(df, columns, order) -> str | None:
    """Why ``df`` cannot be seen as one 2-D array without a copy (None: it can)."""
    if not columns:
        return "the DataFrame has no columns"
    dtypes = {str(c.dtype) for c in columns}
    if len(dtypes) > 1:
        return f"the columns have different dtypes ({', '.join(sorted(dtypes))}): one array has one"
    if not plain_dtype(columns[0].dtype):
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


def build_frame(cudf, src: Source):
    """A Series (1-D) or DataFrame (2-D, one column per column of ``src``) viewing ``src``."""
    itemsize, typestr = src.dtype.itemsize, src.dtype.typestr

    def column(offset: int, rows: int):
        view = CAIView(src.ptr + offset, (rows,), (itemsize,), typestr, src.obj)
        return cudf.Series(view, nan_as_null=False)  # NaN is a value here, not a null

    if len(src.shape) == 1:
        out = column(0, src.shape[0])
        return out, [_ptr(out)]
    rows, cols = src.shape
    series = [column(j * src.strides[1], rows) for j in range(cols)]
    out = cudf.DataFrame(dict(enumerate(series)))
    ptrs = [_ptr(out[j]) for j in range(cols)]
    if src.nbytes and ptrs != [_ptr(s) for s in series]:
        # The public constructor copied: build the frame from the columns themselves.
        from ..compat import cudf_frame_of_columns

        built = cudf_frame_of_columns(cudf, series)
        if built is not None:
            out = built
            ptrs = [_ptr(out[j]) for j in range(cols)]
    return out, ptrs


def _ptr(series) -> int:
    return int(series.__cuda_array_interface__["data"][0])

"""The arguments of :func:`dask_gpu_interop.shuffle` and :func:`dask_gpu_interop.shuffle_merge`,
checked before any work starts (each mistake said in one line), and the key columns that are
hashed as floats."""

from __future__ import annotations


def key_columns(frame, on) -> list[str]:
    """``on`` as a list of the frame's column names; TypeError or ValueError in one line."""
    import dask.dataframe as dd

    if not isinstance(frame, dd.DataFrame):
        raise TypeError(f"shuffle takes a dask DataFrame, not {type(frame).__name__}: "
                        "for a Series, use series.to_frame()")  # fmt: skip
    names = [on] if isinstance(on, str) or not isinstance(on, (list, tuple)) else list(on)
    if not names:
        raise ValueError("on=[]: name at least one column to shuffle on")
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise ValueError(
            f"on={on!r}: {', '.join(map(repr, missing))} not a column of the frame (its "
            f"columns: {', '.join(map(str, frame.columns))}); to shuffle on the index, "
            "reset_index() first")
    return names


def output_partitions(frame, npartitions) -> int:
    """``npartitions``, checked, or the frame's own count."""
    if npartitions is None:
        return frame.npartitions
    if isinstance(npartitions, bool) or not isinstance(npartitions, int) or npartitions < 1:
        raise ValueError(f"npartitions={npartitions!r}: give a positive whole number, or None "
                         "for as many as the input has")  # fmt: skip
    return npartitions


def hash_casts(meta, on: list) -> dict:
    """The key columns dask hashes as float64 (numbers, and categories of numbers), so that
    equal ints and floats meet in one partition, as dask's own hash shuffle does."""
    from pandas.api.types import is_numeric_dtype

    casts = {}
    for name in on:
        dtype = meta[name].dtype
        categories = getattr(dtype, "categories", None)
        if is_numeric_dtype(dtype) or (categories is not None
                                       and is_numeric_dtype(categories.dtype)):
            casts[name] = "float64"
    return casts


def _client(client):
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        raise ValueError("shuffle runs on a distributed cluster: create a Client first (or "
                         "pass client=)") from None  # fmt: skip

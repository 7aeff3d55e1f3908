"""The arguments of :func:`dask_gpu_interop.shuffle` and :func:`dask_gpu_interop.shuffle_merge`,
checked before any work starts (each mistake said in one line), and the key columns that are
hashed as floats."""

from __future__ import annotations

#: The most output partitions a shuffle makes: each is a task of its own, with a run of the
#: scheduler's and a frame of its own on a worker, whatever its size.
MOST_PARTITIONS = 2**14


def _not_a_frame(frame, caller: str) -> str:
    """Why ``frame`` cannot be shuffled, and what to give instead, in one line."""
    kind = type(frame).__name__
    library = type(frame).__module__.split(".")[0]
    if library in ("pandas", "cudf") and kind in ("DataFrame", "Series"):
        made = "frame" if kind == "DataFrame" else "series.to_frame()"
        return (f"{caller} takes a dask DataFrame, not a {library} {kind}: make one with "
                f"dask.dataframe.from_pandas({made}, npartitions=...)")
    if kind == "Series" and "dask" in library:
        return f"{caller} takes a dask DataFrame, not a dask Series: use series.to_frame()"
    return f"{caller} takes a dask DataFrame, not {kind}"


def key_columns(frame, on, caller: str = "shuffle") -> list[str]:
    """``on`` as a list of the frame's column names; TypeError or ValueError in one line."""
    import dask.dataframe as dd

    if not isinstance(frame, dd.DataFrame):
        raise TypeError(_not_a_frame(frame, caller))
    if on is None:
        raise ValueError("on=None: name the key column (or columns) to shuffle on, such as "
                         "on='key'")  # fmt: skip
    if hasattr(on, "dtype") or hasattr(on, "__dask_graph__"):  # a Series, an Index, an array
        name = getattr(on, "name", None)
        example = f"on={name!r}" if isinstance(name, str) else "on='key'"
        raise TypeError(f"on= takes column names, not a {type(on).__name__}: give the key "
                        f"column's name, such as {example}")  # fmt: skip
    if isinstance(on, (set, frozenset, dict)):
        raise TypeError(f"on= takes a column name or a list of them, not a "
                        f"{type(on).__name__}: such as on={sorted(map(str, on))!r} (in the "
                        "order to hash them)")  # fmt: skip
    names = [on] if isinstance(on, str) or not isinstance(on, (list, tuple)) else list(on)
    if not names:
        raise ValueError("on=[]: name at least one column to shuffle on")
    columns = list(frame.columns)
    missing = [name for name in names if name not in frame.columns]
    if missing:
        raise ValueError(
            f"on={on!r}: {', '.join(map(repr, missing))} not a column of the frame (its "
            f"columns: {', '.join(map(str, columns))}); to shuffle on the index, "
            "reset_index() first")
    twice = sorted({str(name) for name in names if columns.count(name) > 1})
    if twice:
        raise ValueError(f"on={on!r}: the frame has more than one column named "
                         f"{', '.join(map(repr, twice))}: give each column a name of its own "
                         "first (frame.columns = [...])")  # fmt: skip
    return names


def output_partitions(frame, npartitions) -> int:
    """``npartitions``, checked, or the frame's own count."""
    import numbers

    if npartitions is None:
        return frame.npartitions
    if (isinstance(npartitions, bool) or not isinstance(npartitions, numbers.Integral)
            or npartitions < 1):
        raise ValueError(f"npartitions={npartitions!r}: give a positive whole number (an int), "
                         "or None for as many as the input has")  # fmt: skip
    if npartitions > MOST_PARTITIONS:
        raise ValueError(f"npartitions={int(npartitions)}: at most {MOST_PARTITIONS} (each "
                         "output partition is a task and a frame of its own, however few rows "
                         "it holds)")  # fmt: skip
    return int(npartitions)


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


def _client(client, caller: str = "shuffle"):
    """The client to run on: ``client``, checked, or the current one; TypeError or
    ValueError in one line."""
    if client is None:
        from distributed import get_client

        try:
            return get_client()
        except ValueError:
            raise ValueError(f"{caller} runs on a distributed cluster: create a Client first "
                             "(or pass client=)") from None  # fmt: skip
    if isinstance(client, str):
        raise TypeError(f"client={client!r}: pass a distributed.Client, not an address: "
                        f"Client({client!r})")  # fmt: skip
    from .._client import require_client

    return require_client(client, caller)

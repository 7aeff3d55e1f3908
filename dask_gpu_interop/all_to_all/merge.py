"""A join of two dask DataFrames on key columns through the library's shuffle: both sides moved
into the same partitions (:func:`.driver.shuffle`), then each pair merged where it lies."""

from __future__ import annotations

from .checks import _client, hash_casts, key_columns, output_partitions
from .driver import shuffle

MERGE_HOWS = ("inner", "left", "right", "outer")


def _merge_partitions(left, right, **kwargs):
    return left.merge(right, **kwargs)


def shuffle_merge(left, right, on=None, *, left_on=None, right_on=None, how="inner",
                  suffixes=("_x", "_y"), npartitions=None, client=None):
    """Join two dask DataFrames on key columns: both sides moved with :func:`shuffle` into the
    same partitions, then each pair of partitions merged where it lies.

    Parameters
    ----------
    left, right : dask.dataframe.DataFrame
        Both cuDF-backed or both pandas-backed.
    on : str or list of str, optional
        Key columns of both sides; or give ``left_on`` and ``right_on``.
    left_on, right_on : str or list of str, optional
        Key columns of each side, as many on each.
    how : {"inner", "left", "right", "outer"}
        As ``DataFrame.merge``.
    suffixes : tuple of str
        As ``DataFrame.merge``.
    npartitions : int, optional
        Partitions of the result; by default the larger side's count.
    client : distributed.Client, optional
        By default the current client.

    Returns
    -------
    dask.dataframe.DataFrame
        The joined frame (divisions unknown), computed lazily from the shuffled sides, which
        are in memory.

    Raises
    ------
    ValueError
        Keys missing or given both ways, ``how`` not one of the four, or key columns whose
        types would hash differently on the two sides (cast one side first).
    ShuffleError
        As :func:`shuffle`.

    Examples
    --------
    >>> import dask_gpu_interop
    >>> joined = dask_gpu_interop.shuffle_merge(performance, acquisition,
    ...                                         on="loan_id")  # doctest: +SKIP
    """
    if how not in MERGE_HOWS:
        raise ValueError(f"how={how!r}: choose one of {', '.join(MERGE_HOWS)}")
    if (on is None) == (left_on is None and right_on is None) or (
            on is None and (left_on is None or right_on is None)):
        raise ValueError("give on=, or both left_on= and right_on=")
    if (not isinstance(suffixes, (list, tuple)) or len(suffixes) != 2
            or not all(s is None or isinstance(s, str) for s in suffixes)):
        raise ValueError(f"suffixes={suffixes!r}: give two, such as ('_x', '_y')")
    left_keys = key_columns(left, on if on is not None else left_on, "shuffle_merge (left)")
    right_keys = key_columns(right, on if on is not None else right_on, "shuffle_merge (right)")
    if len(left_keys) != len(right_keys):
        raise ValueError(f"left_on={left_keys} and right_on={right_keys}: as many keys on "
                         "each side")  # fmt: skip
    left_casts, right_casts = hash_casts(left._meta, left_keys), hash_casts(right._meta,
                                                                           right_keys)
    for a, b in zip(left_keys, right_keys, strict=True):
        kinds = (left_casts.get(a) or str(left._meta[a].dtype),
                 right_casts.get(b) or str(right._meta[b].dtype))
        if kinds[0] != kinds[1]:
            raise ValueError(
                f"key {a!r} is {left._meta[a].dtype} on the left and {b!r} "
                f"{right._meta[b].dtype} on the right: they would hash differently, cast one "
                "side first")
    npartitions = (output_partitions(left, npartitions) if npartitions is not None
                   else max(left.npartitions, right.npartitions))
    client = _client(client, "shuffle_merge")
    left = shuffle(left, left_keys, npartitions, client=client)
    right = shuffle(right, right_keys, npartitions, client=client)
    keys = {"on": on} if on is not None else {"left_on": left_on, "right_on": right_on}
    return left.map_partitions(_merge_partitions, right, how=how, suffixes=suffixes,
                               align_dataframes=False, **keys)  # fmt: skip

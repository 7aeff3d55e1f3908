"""The tasks of the all-to-all (:mod:`.all_to_all`), run on the workers, for pandas and cuDF.

- :func:`split`: one input partition, its rows ordered by output partition, and where each
  output partition's rows start (offsets). Numeric keys are hashed as float64, so that an int
  key meets an equal float key. On pandas the hash is dask's own (``hash_object_dispatch``),
  so a row lands in the output partition that dask's task shuffle would give it, and the
  order by partition is a stable sort. On cuDF it is libcudf's hash partitioner (murmur3 of
  the key columns), which hashes and moves every row in one pass, where a sort by partition
  and a gather take several. Either way a key goes to the same output partition from every
  worker of one backend; cuDF and pandas place it differently.
- :func:`batch`: on a source worker, what its splits hold for one destination worker's output
  partitions, and their offsets: on pandas a slice of each split (views, nothing copied); on
  cuDF one frame, every split's slices concatenated output partition by output partition.
  The batch is the one object that crosses between the two workers (over UCX with the
  "cuda" serializers, device to device).
- :func:`concat`: one output partition, concatenated from its rows in every batch bound for
  its worker (on cuDF, libcudf's slices and one concatenation, without a frame per slice).

cuDF frames go through libcudf (pylibcudf) tables where every column's type round-trips
(numbers, booleans, datetimes, strings); others take the frames' own methods. Nothing here
imports a GPU library at module level: cuDF partitions bring CuPy and pylibcudf with them.
"""

from __future__ import annotations

import sys

import numpy as np


def _library(frame):
    """The frame's top-level module: ``pandas`` or ``cudf``."""
    return sys.modules[type(frame).__module__.split(".")[0]]


def _array_module(frame):
    """NumPy for pandas partitions, CuPy for cuDF partitions."""
    if _library(frame).__name__ == "cudf":
        import cupy

        return cupy
    return np


def partition_ids(frame, on: list, casts: dict, npartitions: int):
    """Each row's output partition in a pandas frame, an int32 array: dask's hash of the key
    columns ``on`` (``casts`` applied first) modulo ``npartitions``. Four bytes a row keep
    the sort by partition to half the passes of a 64-bit one."""
    from dask.dataframe.dispatch import hash_object_dispatch

    keys = frame[on]
    if casts:
        keys = keys.astype(casts, errors="ignore")
    hashes = hash_object_dispatch(keys, index=False)
    values = hashes.values % npartitions
    return values.astype(np.int32, copy=False)


def split(frame, on: list, casts: dict, npartitions: int, ignore_index: bool):
    """``(ordered, offsets)``: the rows of ``frame`` ordered by output partition, and the
    ``npartitions + 1`` row offsets (NumPy int64) where each output partition starts.

    On pandas the order within one output partition is the input's (a stable sort). With
    ``ignore_index`` the index is dropped first, so it does not travel.
    """
    if ignore_index:
        frame = frame.reset_index(drop=True)
    offsets = np.zeros(npartitions + 1, dtype=np.int64)
    if npartitions == 1 or len(frame) == 0:
        offsets[1:] = len(frame)
        return frame, offsets
    if _library(frame).__name__ == "cudf":
        return _split_cudf(frame, on, casts, npartitions, ignore_index)
    ids = partition_ids(frame, on, casts, npartitions)
    order = np.argsort(ids, kind="stable")  # NumPy's default sort is not stable
    offsets[1:] = np.cumsum(np.bincount(ids, minlength=npartitions))
    return frame.take(order), offsets


def batch(splits: list, first: int, stop: int, ignore_index: bool = False
          ) -> tuple[list, list]:
    """``(frames, offsets)``: the rows of output partitions ``first`` to ``stop - 1`` in each of
    ``splits`` (as :func:`split` gave them), with the offsets of those output partitions
    inside each frame. On pandas, one slice per split (a view). On cuDF, one frame for all
    the splits, ordered by output partition (libcudf's slices of every split concatenated
    once): one contiguous transfer, and a concatenation of one piece per source worker at
    the destination, instead of one per input partition.

    Empty slices are left out, but one is kept if all are empty, so that every batch carries
    the frame's columns and types.
    """
    if stop > first and _in_libcudf(splits[0][0], ignore_index):
        return _batch_in_libcudf(splits, first, stop, ignore_index)
    frames, offsets = [], []
    for ordered, split_offsets in splits:
        start, end = int(split_offsets[first]), int(split_offsets[stop])
        if end > start:
            frames.append(ordered.iloc[start:end])
            offsets.append(split_offsets[first:stop + 1] - start)
    if not frames:
        ordered, split_offsets = splits[0]
        start = int(split_offsets[first])
        frames.append(ordered.iloc[start:start])
        offsets.append(split_offsets[first:stop + 1] - start)
    return frames, offsets


def concat(batches: list, position: int, ignore_index: bool):
    """Output partition ``position`` (counted from the first output partition of its worker):
    its rows from every batch in ``batches``, concatenated in the batches' order."""
    if _in_libcudf(batches[0][0][0], ignore_index):  # the batches' frames share their types
        out = _concat_in_libcudf(batches, position, ignore_index)
        if out is not None:
            return out
    pieces = []
    for frames, offsets in batches:
        for frame, bounds in zip(frames, offsets, strict=True):
            start, end = int(bounds[position]), int(bounds[position + 1])
            if end > start:
                pieces.append(frame.iloc[start:end])
    if not pieces:  # no row anywhere: the columns and types of the first batch's frame
        pieces = [batches[0][0][0].iloc[0:0]]
    if len(pieces) == 1:
        out = pieces[0]
        return out.reset_index(drop=True) if ignore_index else out
    return _library(pieces[0]).concat(pieces, ignore_index=ignore_index)


def _concat_in_libcudf(batches: list, position: int, ignore_index: bool):
    """:func:`concat` of cuDF batches: each piece a libcudf slice of its frame's table (a view),
    and one concatenation of them all."""
    import pylibcudf as plc

    tables, first = [], None
    for frames, offsets in batches:
        for frame, bounds in zip(frames, offsets, strict=True):
            start, end = int(bounds[position]), int(bounds[position + 1])
            if end > start:
                flat = _flat(frame, ignore_index)
                first = flat if first is None else first
                tables.append(plc.copying.slice(flat.to_pylibcudf()[0], [start, end])[0])
    if len(tables) < 2:  # one piece or none: nothing to concatenate
        return None
    out = plc.concatenate.concatenate(tables)
    return _from_table(out, first, batches[0][0][0], ignore_index)


# --------------------------------------------------------------------------- cuDF in libcudf

#: dtype kinds whose columns go through libcudf tables and back unchanged: booleans,
#: integers, floats, datetimes, timedeltas. Strings are checked apart; other columns
#: (categories, decimals, lists, structs) take the frame's own methods.
_PLAIN_KINDS = "biufmM"


def _in_libcudf(frame, ignore_index: bool) -> bool:
    """Whether ``frame`` is a cuDF frame whose columns (and index, unless ``ignore_index``) are
    all of types that round-trip through a libcudf table, and whose index levels can become
    columns beside them (no name taken)."""
    if _library(frame).__name__ != "cudf":
        return False
    from cudf.api.types import is_string_dtype

    dtypes = list(frame.dtypes)
    if not ignore_index:
        index = frame.index
        names = {name for name in index.names if name is not None} | {"index", "level_0"}
        if names & set(frame.columns):
            return False
        dtypes += list(index.dtypes) if index.nlevels > 1 else [index.dtype]
    return all(getattr(dtype, "kind", "O") in _PLAIN_KINDS or is_string_dtype(dtype)
               for dtype in dtypes)


def _flat(frame, ignore_index: bool):
    """``frame`` with its index levels as its first columns (or without its index)."""
    return frame.reset_index(drop=True) if ignore_index else frame.reset_index()


def _from_table(table, flat, like, ignore_index: bool):
    """A cuDF frame of libcudf ``table``, whose columns are ``flat``'s; the index of ``like``
    (its levels ``flat``'s first columns) set again, with its names."""
    out = type(like).from_pylibcudf(table, {"columns": list(flat.columns)})
    if ignore_index:
        return out
    levels = like.index.nlevels
    out = out.set_index(list(flat.columns[:levels]))
    out.index.names = like.index.names
    return out


def _hashed_keys(frame, on: list, casts: dict):
    """The key columns of a cuDF frame as libcudf hashes them: numbers (and categories of
    numbers) as float64, categories of anything else as their values, whatever the other
    columns are, so that a key lands in the same partition from every frame."""
    keys = frame[on].astype(casts) if casts else frame[on]
    for name in on:
        categories = getattr(keys[name].dtype, "categories", None)
        if categories is not None:
            keys[name] = keys[name].astype(categories.dtype)
    return keys


def _batch_in_libcudf(splits: list, first: int, stop: int, ignore_index: bool):
    """:func:`batch` of cuDF splits: every split's slice of each output partition (libcudf
    views), concatenated output partition by output partition into one frame."""
    import pylibcudf as plc

    flats = [_flat(ordered, ignore_index) for ordered, _ in splits]
    views = [plc.copying.slice(flat.to_pylibcudf()[0],
                               [int(offsets[j + k]) for j in range(first, stop) for k in (0, 1)])
             for flat, (_, offsets) in zip(flats, splits, strict=True)]
    sizes = np.zeros(stop - first + 1, dtype=np.int64)
    pieces = []
    for j in range(stop - first):
        for view, (_, offsets) in zip(views, splits, strict=True):
            pieces.append(view[j])
            sizes[j + 1] += int(offsets[first + j + 1] - offsets[first + j])
    table = plc.concatenate.concatenate(pieces)
    return [_from_table(table, flats[0], splits[0][0], ignore_index)], [np.cumsum(sizes)]


def _split_cudf(frame, on: list, casts: dict, npartitions: int, ignore_index: bool):
    """:func:`split` of a cuDF frame by libcudf's hash partitioner: the key columns hashed and
    every row moved to its partition's run in one call; for columns that cannot go through a
    libcudf table unchanged, the partitioner orders the row numbers and the frame takes them."""
    import pylibcudf as plc

    keys = _hashed_keys(frame, on, casts).to_pylibcudf()[0]
    plain = _in_libcudf(frame, ignore_index)
    if plain:
        flat = _flat(frame, ignore_index)
        table, starts = plc.partitioning.hash_partition(flat.to_pylibcudf()[0], keys,
                                                        npartitions)
    else:
        rows = _library(frame).Series(_array_module(frame).arange(len(frame), dtype="int64"))
        table, starts = plc.partitioning.hash_partition(plc.Table([rows.to_pylibcudf()[0]]),
                                                        keys, npartitions)
    offsets = np.empty(npartitions + 1, dtype=np.int64)
    offsets[:len(starts)] = starts
    offsets[len(starts):] = len(frame)
    if plain:
        return _from_table(table, flat, frame, ignore_index), offsets
    order = _library(frame).Series.from_pylibcudf(table.columns()[0])
    return frame.take(order), offsets

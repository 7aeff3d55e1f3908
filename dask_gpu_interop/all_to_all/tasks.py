"""The tasks of the all-to-all (:mod:`dask_gpu_interop.all_to_all`), run on the workers, for
pandas and cuDF.

- :func:`split`: on a source worker, all its input partitions, concatenated in groups (of at
  most :data:`GROUP_BYTES` and :data:`GROUP_ROWS`), each group's rows ordered by output
  partition, and where each output partition's rows start (offsets). Numeric keys are hashed
  as float64 (and numbers in object columns as floats), so that an int key meets an equal
  float key. On pandas the hash is dask's own (``hash_object_dispatch``), so a row lands in
  the output partition that dask's task shuffle would give it (but for numbers in object
  columns), and the order by partition is a stable sort. On cuDF it is libcudf's hash
  partitioner (murmur3 of the key columns), which hashes and moves every row in one pass.
  Either way a key goes to the same output partition from every worker of one backend; cuDF
  and pandas place it differently.
- :func:`batch`: what a source worker's groups hold for one destination worker's output
  partitions (a contiguous run of them): one slice of each group, a view, nothing copied. The
  batch is what crosses between the two workers (over UCX with the "cuda" serializers, device
  to device, the slices' bytes only).
- :func:`output`: on a destination worker, one output partition: its rows from every batch
  bound for that worker (in the batches' order), concatenated; on cuDF in libcudf, without a
  frame per piece.

One task per worker for the split, instead of one per input partition (or one per step of a
worker's share where it is large beside the worker's memory: the plan says which): the GPU's
work is the same, the per-task costs (Python, scheduling) are paid once per worker or step.
Each output partition is concatenated by its own task, straight from the batches: no step of
its own sits between the transfers and the output partitions. cuDF frames go through libcudf
(pylibcudf) tables where every column's type round-trips (numbers, booleans, datetimes,
strings); others take the frames' own methods.
Nothing here imports a GPU library at module level: cuDF partitions bring CuPy and pylibcudf
with them.
"""

from __future__ import annotations

import contextlib
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
    objects = [i for i, dtype in enumerate(keys.dtypes)
               if isinstance(dtype, np.dtype) and dtype.kind == "O"]
    if objects:  # as pandas' merge compares them: 1 == 1.0 == True (by place: a name twice)
        keys = keys.copy(deep=False)
        for i in objects:
            keys.isetitem(i, _numbers_as_floats(keys.iloc[:, i]))
    hashes = hash_object_dispatch(keys, index=False)
    values = hashes.values % npartitions
    return values.astype(np.int32, copy=False)


def _numbers_as_floats(column):
    """An object column with each number in it (a Python or NumPy int, float or bool) as a
    float, the rest as it is: so that equal numbers of different types hash alike, in every
    partition whatever else it holds (the column stays of object type)."""
    import numbers

    values = column.to_numpy(dtype=object, copy=True)
    for i, value in enumerate(values):
        if isinstance(value, (numbers.Real, np.bool_)) and value == value:  # NaN kept
            values[i] = float(value)
    return type(column)(values, index=column.index, dtype=object, name=column.name)


#: A worker's input partitions are concatenated in groups of at most this many bytes (a group
#: of one partition may be larger): each group one libcudf call, and what a split holds beside
#: its inputs bounded. Large, so that a worker's share is one group wherever the plan takes one
#: step: each output partition then has one piece per source worker to concatenate (libcudf
#: copies up to four pieces a column with plain copies, more with a kernel of its own).
GROUP_BYTES = 8 * 2**30
#: ... and of at most this many rows, the most a libcudf column holds.
GROUP_ROWS = 2**31 - 1


def groups(sizes: list) -> list[range]:
    """Consecutive runs of items, given each one's ``(rows, bytes)``: each run at most
    :data:`GROUP_ROWS` and :data:`GROUP_BYTES` together, or one item alone."""
    runs, start, rows, nbytes = [], 0, 0, 0
    for i, (count, size) in enumerate(sizes):
        if i > start and (rows + count > GROUP_ROWS or nbytes + size > GROUP_BYTES):
            runs.append(range(start, i))
            start, rows, nbytes = i, 0, 0
        rows, nbytes = rows + count, nbytes + size
    if sizes:
        runs.append(range(start, len(sizes)))
    return runs


def _nbytes(frame) -> int:
    from dask.sizeof import sizeof

    return int(sizeof(frame))


def order_by_partition(frame, on: list, casts: dict, npartitions: int, ignore_index: bool):
    """``(ordered, offsets)``: the rows of one frame ordered by output partition, and the
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
        return _split_cudf([frame], on, casts, npartitions, ignore_index)
    ids = partition_ids(frame, on, casts, npartitions)
    order = np.argsort(ids, kind="stable")  # NumPy's default sort is not stable
    offsets[1:] = np.cumsum(np.bincount(ids, minlength=npartitions))
    return frame.take(order), offsets


def split(parts: list, on: list, casts: dict, npartitions: int, ignore_index: bool
          ) -> tuple[list, list]:
    """``(frames, offsets)``: a worker's input partitions ``parts`` concatenated in groups
    (:func:`groups`), each group's rows ordered by output partition, with its offsets (as
    :func:`order_by_partition` gives them)."""
    frames, offsets = [], []
    for run in groups([(len(part), _nbytes(part)) for part in parts]):
        group = [parts[i] for i in run]
        if len(group) > 1 and npartitions > 1 and _in_libcudf_together(group, ignore_index):
            ordered, bounds = _split_cudf(group, on, casts, npartitions, ignore_index)
        else:
            frame = group[0] if len(group) == 1 else _library(group[0]).concat(
                group, ignore_index=ignore_index)
            ordered, bounds = order_by_partition(frame, on, casts, npartitions, ignore_index)
        frames.append(ordered)
        offsets.append(bounds)
    return frames, offsets


def batch(split_groups: tuple, first: int, stop: int, copy: bool = False) -> tuple[list, list]:
    """``(frames, offsets)``: the rows of output partitions ``first`` to ``stop - 1`` in a
    worker's groups (as :func:`split` gave them): one slice of each group (a view, or with
    ``copy`` a copy, which lets the split be freed while the batch lives on), and the offsets
    of those output partitions inside it.

    Empty slices are left out, but one is kept if all are empty, so that every batch carries
    the frame's columns and types.
    """
    frames, offsets = [], []
    for ordered, bounds in zip(*split_groups, strict=True):
        start, end = int(bounds[first]), int(bounds[stop])
        if end > start:
            piece = ordered.iloc[start:end]
            frames.append(piece.copy(deep=True) if copy else piece)
            offsets.append(bounds[first:stop + 1] - start)
    if not frames:
        ordered, bounds = split_groups[0][0], split_groups[1][0]
        start = int(bounds[first])
        empty = ordered.iloc[start:start]
        frames.append(empty.copy(deep=True) if copy else empty)
        offsets.append(bounds[first:stop + 1] - start)
    return frames, offsets


def output(batches: list, position: int, ignore_index: bool):
    """Output partition ``position`` (counted from the first of the run of output partitions
    that ``batches`` hold, as :func:`batch` made them): its rows from each of ``batches``, in
    the batches' order, concatenated into a frame of its own."""
    pieces = []
    for frames, offsets in batches:
        for frame, bounds in zip(frames, offsets, strict=True):
            start, stop = int(bounds[position]), int(bounds[position + 1])
            if stop > start:
                pieces.append((frame, start, stop))
    return _concatenated(pieces, batches[0][0][0], ignore_index)


def _concatenated(pieces: list, like, ignore_index: bool):
    """``(frame, start, stop)`` pieces as one frame, in order (``like``'s columns and types
    when there is none). The frame is always new memory: one piece is copied out of its frame
    (a slice would keep the whole frame alive, its other rows included, as long as the
    output partition lives)."""
    if not pieces:
        out = like.iloc[0:0]
        return out.reset_index(drop=True) if ignore_index else out
    frames = list({id(frame): frame for frame, _, _ in pieces}.values())  # each frame once
    if len(pieces) > 1 and _in_libcudf_together(frames, ignore_index):
        return _concat_in_libcudf(pieces, ignore_index)
    slices = [frame.iloc[start:stop] for frame, start, stop in pieces]
    if len(slices) == 1:
        out = slices[0].copy(deep=True)
        return out.reset_index(drop=True) if ignore_index else out
    return _library(like).concat(slices, ignore_index=ignore_index)


def _concat_in_libcudf(pieces: list, ignore_index: bool):
    """:func:`_concatenated` of cuDF pieces: each a libcudf slice of its frame's table (a
    view; one slicing call per frame), and one concatenation of them all."""
    import pylibcudf as plc

    frames, bounds = {}, {}
    for frame, start, stop in pieces:
        frames.setdefault(id(frame), frame)
        bounds.setdefault(id(frame), []).extend((start, stop))
    with contextlib.ExitStack() as held:
        views = {key: iter(plc.copying.slice(_table(frame, held, index=not ignore_index),
                                             bounds[key]))
                 for key, frame in frames.items()}  # fmt: skip
        tables = [next(views[id(frame)]) for frame, _, _ in pieces]
        joined = plc.concatenate.concatenate(tables)
    like = pieces[0][0]
    return _from_table(joined, _flat_names(like, ignore_index), like, ignore_index)


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


def _in_libcudf_together(frames: list, ignore_index: bool) -> bool:
    """Whether cuDF ``frames`` can be concatenated as libcudf tables: each goes through one
    (:func:`_in_libcudf`), and all have the same columns and types (index included, unless
    ``ignore_index``), where cuDF's own concatenation would reconcile them."""
    if not _in_libcudf(frames[0], ignore_index):
        return False
    first = _types(frames[0], ignore_index)
    return all(_types(frame, ignore_index) == first for frame in frames[1:])


def _types(frame, ignore_index: bool) -> tuple:
    """A cuDF frame's column names and types, and its index's types unless ``ignore_index``,
    read from its columns (an output task compares every batch's frames: without building a
    pandas series of them each time)."""
    index = frame.index
    levels = () if ignore_index else (tuple(dtype for _, dtype in index._dtypes)
                                      if index.nlevels > 1 else (index.dtype,))
    return tuple(frame._dtypes), levels


def _flat_names(frame, ignore_index: bool) -> list:
    """The names of :func:`_table`'s columns for ``frame`` with its index (or without): as
    ``reset_index`` names them, the index levels first."""
    names = list(frame.columns)
    if ignore_index:
        return names
    index = frame.index
    if index.nlevels == 1:
        return ["index" if index.name is None else index.name, *names]
    return [f"level_{i}" if name is None else name for i, name in enumerate(index.names)
            ] + names  # fmt: skip


def _from_table(table, names: list, like, ignore_index: bool):
    """A cuDF frame of libcudf ``table``, whose columns are ``names`` (:func:`_flat_names`);
    the index of ``like`` (its levels the first columns) set again, with its names. One level
    becomes the index as it is (``set_index`` would cost more than the rest together)."""
    if ignore_index:
        return type(like).from_pylibcudf(table, {"columns": names})
    levels = like.index.nlevels
    if levels == 1:
        import pylibcudf as plc

        columns = table.columns()
        out = type(like).from_pylibcudf(plc.Table(columns[1:]), {"columns": names[1:]})
        library = _library(like)
        out.index = library.Index(library.Series.from_pylibcudf(columns[0]),
                                  name=like.index.name)
        return out
    out = type(like).from_pylibcudf(table, {"columns": names})
    out = out.set_index(names[:levels])
    out.index.names = like.index.names
    return out


def _table(frame, held: contextlib.ExitStack, index: bool = False):
    """A cuDF frame's (or series') columns as a libcudf table (a view), with ``index`` its
    index levels first (:func:`_flat_names` names them), without building a frame for it.
    With cuDF's spilling on, each column is opened as cuDF's own operations open theirs
    (where this cuDF has access contexts), until ``held`` closes: a spilled column comes back
    to the device and cannot spill meanwhile (``to_pylibcudf`` would hand libcudf a spilled
    column's empty device pointer)."""
    import pylibcudf as plc

    columns = (*(frame.index._columns if index else ()), *frame._columns)
    library = _library(frame)
    if library.get_option("spill") and hasattr(library.core.column.ColumnBase, "access"):
        opened = [held.enter_context(column.access(mode="read", scope="internal"))
                  for column in columns]  # fmt: skip
        return plc.Table([column.plc_column for column in opened])
    return plc.Table([column.to_pylibcudf() for column in columns])


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


def _key_table(table, names: list, on: list, casts: dict):
    """The key columns ``on`` of a libcudf ``table`` whose columns are ``names``, those in
    ``casts`` cast to float64 as :func:`_hashed_keys` casts them (plain columns only: no
    categories), in libcudf: one cast per key column of the joined table, instead of a
    frame operation per input partition."""
    import pylibcudf as plc

    columns = table.columns()
    float64 = plc.DataType(plc.TypeId.FLOAT64)
    keys = []
    for name in on:
        column = columns[names.index(name)]
        if name in casts and column.type().id() != plc.TypeId.FLOAT64:
            column = plc.unary.cast(column, float64)
        keys.append(column)
    return plc.Table(keys)


def _split_cudf(frames: list, on: list, casts: dict, npartitions: int, ignore_index: bool):
    """``(ordered, offsets)`` of cuDF ``frames`` (one, or several whose columns all go through
    a libcudf table unchanged) by libcudf's hash partitioner: the frames' tables concatenated,
    the key columns hashed and every row moved to its partition's run in one call; for
    columns that cannot go through a libcudf table unchanged, the partitioner orders the row
    numbers and the frame takes them."""
    import pylibcudf as plc

    def joined(tables):
        return tables[0] if len(tables) == 1 else plc.concatenate.concatenate(tables)

    frame = frames[0]
    rows = sum(len(f) for f in frames)
    plain = _in_libcudf(frame, ignore_index)
    with contextlib.ExitStack() as held:
        if plain:
            names = _flat_names(frame, ignore_index)
            table = joined([_table(f, held, index=not ignore_index) for f in frames])
            table, starts = plc.partitioning.hash_partition(
                table, _key_table(table, names, on, casts), npartitions)
        else:  # one frame
            keys = _table(_hashed_keys(frame, on, casts), held)
            numbers = _library(frame).Series(_array_module(frame).arange(rows, dtype="int64"))
            table, starts = plc.partitioning.hash_partition(
                _table(numbers, held), keys, npartitions)
    offsets = np.empty(npartitions + 1, dtype=np.int64)
    offsets[:len(starts)] = starts
    offsets[len(starts):] = rows
    if plain:
        return _from_table(table, names, frame, ignore_index), offsets
    order = _library(frame).Series.from_pylibcudf(table.columns()[0])
    return frame.take(order), offsets

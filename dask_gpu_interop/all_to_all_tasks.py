"""The tasks of the all-to-all (:mod:`.all_to_all`), run on the workers, for pandas and cuDF.

- :func:`split`: one input partition, its rows ordered by output partition, and where each
  output partition's rows start (offsets). The order is by dask's own hash of the key columns
  (``hash_object_dispatch``, numeric keys as float64, as dask's hash shuffle does it), so a row
  lands in the output partition that dask's task shuffle would give it, and an int key meets an
  equal float key. The hash is the backend's: a key goes to the same output partition on every
  worker of one backend, but cuDF and pandas place it differently.
- :func:`batch`: on a source worker, what its splits hold for one destination worker's output
  partitions: one contiguous slice of each split, and its offsets. Slices are views of the
  split, so nothing is copied; the batch is the one object that crosses between the two
  workers (over UCX with the "cuda" serializers, device to device).
- :func:`concat`: one output partition, concatenated from its rows in every batch bound for
  its worker.

Nothing here imports a GPU library: cuDF partitions bring CuPy with them, and the array module
is looked up from the partition's own library.
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


def _host(array) -> np.ndarray:
    """``array`` in host memory (a CuPy array is copied, a NumPy array returned)."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def partition_ids(frame, on: list, casts: dict, npartitions: int):
    """Each row's output partition, an int32 array of the frame's array module: dask's hash of
    the key columns ``on`` (``casts`` applied first) modulo ``npartitions``. Four bytes a row
    keep the sort by partition to half the passes of a 64-bit one."""
    from dask.dataframe.dispatch import hash_object_dispatch

    keys = frame[on]
    if casts:
        keys = keys.astype(casts, errors="ignore")
    hashes = hash_object_dispatch(keys, index=False)
    values = hashes.values % npartitions
    return values.astype(_array_module(frame).int32, copy=False)


def split(frame, on: list, casts: dict, npartitions: int, ignore_index: bool):
    """``(ordered, offsets)``: the rows of ``frame`` ordered by output partition, and the
    ``npartitions + 1`` row offsets (NumPy int64) where each output partition starts.

    The order within one output partition is the input's (a stable sort). With
    ``ignore_index`` the index is dropped first, so it does not travel.
    """
    if ignore_index:
        frame = frame.reset_index(drop=True)
    offsets = np.zeros(npartitions + 1, dtype=np.int64)
    if npartitions == 1 or len(frame) == 0:
        offsets[1:] = len(frame)
        return frame, offsets
    xp = _array_module(frame)
    ids = partition_ids(frame, on, casts, npartitions)
    # NumPy's default sort is not stable; CuPy's sorts always are (and take no ``kind``)
    order = np.argsort(ids, kind="stable") if xp is np else xp.argsort(ids)
    offsets[1:] = np.cumsum(_host(xp.bincount(ids, minlength=npartitions)))
    return frame.take(order), offsets


def batch(splits: list, first: int, stop: int) -> tuple[list, list]:
    """``(frames, offsets)``: the rows of output partitions ``first`` to ``stop - 1`` in each of
    ``splits`` (as :func:`split` gave them), one slice per split, with the offsets of those
    output partitions inside each slice.

    Empty slices are left out, but one is kept if all are empty, so that every batch carries
    the frame's columns and types.
    """
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

"""Reading an ECG recording from CSV into one long Dask array, a chunk per CSV block.

cuDF parses each block on a GPU worker (pandas on CPUs); the column then becomes a CuPy
(NumPy) array without a copy. The CSV holds one value per line; a header line and further
columns are allowed, and ``column`` says which column is the ECG.
"""

from __future__ import annotations

import os

import dask
import dask.array as da
import dask.dataframe as dd

from .backend import Backend
from .handoff import column_to_array


def sniff(path, column: int = 0) -> tuple[bool, int]:
    """(whether the first line is a header, how many fields it has), from the first line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    if not first.strip():
        raise ValueError(f"{path}: the first line is empty; expected a value or a header")
    fields = first.strip().split(",")
    if not 0 <= column < len(fields):
        raise ValueError(f"{path}: column {column} asked for, but the first line has "
                         f"{len(fields)} field(s): {first.strip()[:80]!r}")
    try:
        float(fields[column])
    except ValueError:
        return True, len(fields)
    return False, len(fields)


def has_header(path, column: int = 0) -> bool:
    return sniff(path, column)[0]


def read_csv(path, backend: Backend, *, column: int = 0, blocksize="64MB"):
    """The recording as a lazy ``dask.dataframe`` of one float32 column named ``ecg``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such ECG file: {path}")
    header, fields = sniff(path, column)
    options = dict(header=0 if header else None, blocksize=blocksize, dtype="float32")
    if fields > 1:  # only then: the plainest call is the one every reader supports alike
        options["usecols"] = [column]
    with dask.config.set({"dataframe.backend": backend.dataframe_backend}):
        frame = dd.read_csv(path, **options)
    return frame.rename(columns={frame.columns[0]: "ecg"})


def frame_to_array(frame, lengths, backend: Backend):
    """One dask array over the frame's partitions (lengths known), each a zero-copy view."""
    xp = backend.xp
    meta = xp.empty(0, dtype=xp.float32)
    parts = [
        da.from_delayed(dask.delayed(_column)(part, backend), shape=(int(n),), dtype="float32",
                        meta=meta)
        for part, n in zip(frame.to_delayed(), lengths, strict=True)
        if n
    ]
    if not parts:
        raise ValueError("the ECG file holds no values")
    return da.concatenate(parts)


def _column(part, backend):
    return column_to_array(part["ecg"], backend)

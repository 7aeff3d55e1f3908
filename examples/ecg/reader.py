"""Reading an ECG recording from CSV into one long Dask array, a chunk per CSV block.

cuDF parses each block on a GPU worker (pandas on CPUs); the column then becomes a CuPy
(NumPy) array without a copy. The CSV holds one value per line; a header line and further
columns are allowed, and ``column`` says which column is the ECG. The file is plain text:
a compressed one is refused, as its blocks could not be read apart.
"""

from __future__ import annotations

import math
import os

import dask
import dask.array as da
import dask.dataframe as dd
from dask.utils import parse_bytes
from fsspec.utils import infer_compression

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


def check_values(path, column: int = 0, header: bool = False) -> None:
    """Every line of ``column`` holds a number, or ValueError naming the first line that does
    not: checked here, on the client, by pyarrow's reader (about a second a GB), so that a
    bad value is reported with its line before any worker reads the file."""
    import pyarrow as pa
    from pyarrow import csv

    name = f"f{column}"
    try:
        table = csv.read_csv(
            path,
            read_options=csv.ReadOptions(skip_rows=1 if header else 0,
                                         autogenerate_column_names=True),
            convert_options=csv.ConvertOptions(include_columns=[name],
                                               column_types={name: pa.float32()}))
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):  # a header line, or blank lines, only
            raise ValueError(f"{path} holds no values") from None
        raise ValueError(_first_bad_line(path, column, header)) from None
    if table.num_rows == 0:
        raise ValueError(f"{path} holds no values")
    if table.column(name).null_count:
        raise ValueError(_first_bad_line(path, column, header))


def _first_bad_line(path, column: int, header: bool) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if number == 1 and header:
                continue
            fields = line.rstrip("\r\n").split(",")
            text = fields[column].strip() if column < len(fields) else ""
            if not text:
                return (f"{path}:{number}: no value in column {column}: an ECG must be a "
                        "gap-free series (fill or cut the gap first)")
            try:
                value = float(text)
            except ValueError:
                return (f"{path}:{number}: {text[:40]!r} is not a number (column {column} must "
                        "hold the ECG's values; only the first line may be a header)")
            if not math.isfinite(value):
                return (f"{path}:{number}: {text!r} is a missing value: an ECG must be a "
                        "gap-free series (fill or cut the gap first)")
    return f"{path}: a value of column {column} could not be read as a number"


# The files checked by this process, as they were then: (path, size, modification, column)
# -> (header, fields). A command checks its file before its cluster starts; the read then
# need not read it all again.
_CHECKED: dict[tuple, tuple[bool, int]] = {}


def check_file(path, column: int = 0) -> tuple[bool, int]:
    """(whether the first line is a header, its fields) of an ECG file that :func:`read_csv`
    can read: ValueError (FileNotFoundError) saying why not; a file unchanged since it was
    last checked here is not read again."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such ECG file: {path}")
    info = os.stat(path)
    key = (os.path.realpath(path), info.st_size, info.st_mtime_ns, column)
    if key not in _CHECKED:
        compression = infer_compression(path)
        if compression:
            raise ValueError(f"{path}: a {compression}-compressed file; the ECG reader takes "
                             "plain CSV, read in blocks: decompress it first")
        header, fields = sniff(path, column)
        check_values(path, column, header)
        _CHECKED[key] = header, fields
    return _CHECKED[key]


def read_csv(path, backend: Backend, *, column: int = 0, blocksize="64MB"):
    """The recording as a lazy ``dask.dataframe`` of one float32 column named ``ecg``."""
    path = os.fspath(path)
    header, fields = check_file(path, column)
    if isinstance(blocksize, str):
        blocksize = parse_bytes(blocksize)
    if backend.is_gpu:
        return _read_csv_cudf(path, column, header, fields, int(blocksize), backend)
    options = dict(header=0 if header else None, blocksize=blocksize, dtype="float32",
                   compression=None)
    if fields > 1:  # only then: the plainest call is the one every reader supports alike
        options["usecols"] = [column]
    with dask.config.set({"dataframe.backend": backend.dataframe_backend}):
        frame = dd.read_csv(path, **options)
    return frame.rename(columns={frame.columns[0]: "ecg"})


def _read_csv_cudf(path, column: int, header: bool, fields: int, blocksize: int, backend):
    """A partition per ``blocksize`` bytes of the file, each parsed by ``cudf.read_csv`` on a
    worker from the file itself (its ``byte_range``), as dask-cuDF's reader does.

    Not through ``dask.dataframe.read_csv``: for its metadata that parses a sample of the
    file from an in-memory buffer, where libcudf cannot detect the compression and warns
    that it assumes none, at every read. Here the metadata is known (one float32 column)
    and every call says that the file is not compressed."""
    df = backend.df
    meta = df.DataFrame({"ecg": df.Series([], dtype="float32")})
    ranges = [(start, blocksize) for start in range(0, os.path.getsize(path), blocksize)]
    return dd.from_map(_read_block_cudf, ranges, path=path, column=column, header=header,
                       fields=fields, meta=meta, label="read-csv")


def _read_block_cudf(byte_range, path, column, header, fields):
    """One block's rows (those starting inside ``byte_range``) as a cuDF frame ``ecg``."""
    import cudf

    # parsed as float64 and rounded, as the CPU's reader rounds the text: libcudf's float32
    # parse can differ from it in the last bit
    options = dict(byte_range=byte_range, dtype="float64", compression=None)
    if byte_range[0] == 0:
        options["header"] = 0 if header else None
    else:  # past the header: the columns named here
        options.update(header=None, names=[f"f{i}" for i in range(fields)])
    if fields > 1:
        options["usecols"] = [column]
    frame = cudf.read_csv(path, **options)
    return frame.rename(columns={frame.columns[0]: "ecg"}).astype("float32")


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

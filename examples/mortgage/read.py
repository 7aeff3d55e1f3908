"""Reading the pipe-delimited files into typed frames, every bad row found and reported.

GPU workers read with ``cudf.read_csv`` (a byte range of the file, the columns the ETL
needs, numbers as text then converted by cuDF, which refuses one that is not a number: its
reader alone would read such a field as missing). CPU workers read with pyarrow's CSV reader, which refuses a
line with the wrong number of fields or a number that is not one.

The text columns (the reporting month, the delinquency status, the categorical codes) hold
few distinct values: each column is factorized, each distinct text is checked and converted
once on the host, and a small lookup table maps the codes (the same on both devices).

Only when a check fails does the slow path read the piece line by line, in Python, to say
which lines are bad and why; the policy then raises (``error``), drops them with a warning
(``warn``) or drops them and counts them (``skip``). Rows are never lost without a count. On
GPUs a line with too few fields reads as a line whose last fields are blank (cuDF's reader
does not count fields); the CPU reader refuses it.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field

import numpy as np

from . import files, schema
from .features import module_of
from .files import Piece, lines_before
from .schema import CATEGORY, DATE, ID, NUMBER, PERIOD, STATUS

POLICIES = ("error", "warn", "skip")
# Text a GPU reads and converts at once. The reader holds about 7.7 times its text on the
# device; smaller chunks cut that (256 MiB: 2.7x a 1 GiB partition) but each chunk costs its
# calls again (256 MiB: 1.5-2.3x the partition's time on an H100,
# benchmarks/results/mortgage-stages-gpu-classic-1xH100.md), so a default partition is read
# at once and only larger ones are cut.
CHUNK = 2**30
SHOWN = 20  # bad rows spelled out in a message; the rest are counted
EXTRA = "_extra_field"  # catches lines with a field too many on GPUs

_INTEGER = re.compile(r"^\s*[-+]?\d+\s*$")
_NUMBER = re.compile(r"^\s*[-+]?((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|inf|infinity)\s*$", re.I)
# What each kind of column becomes: its dtype, and the value of a blank field (None: a blank
# makes the row bad).
DTYPES = {ID: "int64", NUMBER: "float32", PERIOD: "int32", DATE: "float32", STATUS: "int32",
          CATEGORY: "int16"}
BLANK = {PERIOD: None, DATE: np.nan, STATUS: schema.MISSING, CATEGORY: schema.MISSING}


@dataclass(frozen=True)
class BadRow:
    path: str
    line: int  # 1-based line number in the file
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class BadRowsError(ValueError):
    """Rows that cannot be read, under ``bad_rows="error"``: the message names file and line."""

    def __init__(self, rows: list[BadRow], total: int | None = None):
        self.rows = list(rows)
        self.total = len(self.rows) if total is None else total
        super().__init__(describe(self.rows, self.total))

    def __reduce__(self):  # keep rows and total when sent from a worker to the client
        return (type(self), (self.rows, self.total))


def describe(rows: list[BadRow], total: int | None = None) -> str:
    total = len(rows) if total is None else total
    lines = [f"{total} bad row(s) in the input:"]
    lines += [f"  {row}" for row in rows[:SHOWN]]
    if total > SHOWN:
        lines.append(f"  ... and {total - SHOWN} more")
    lines.append(
        "Fix the files, or pass bad_rows='warn' (--bad-rows warn) to drop these rows with a "
        "warning, or 'skip' to drop them and only count them."
    )
    return "\n".join(lines)


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"bad_rows={policy!r}: choose one of {', '.join(POLICIES)}")
    return policy


def read_names(path: str | None) -> dict[str, str] | None:
    """names.csv: ``seller_name|short name`` lines after a header line."""
    if path is None:
        return None
    mapping = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if number == 1 or not line:
                continue
            parts = line.split("|")
            if len(parts) != 2:
                raise ValueError(
                    f"{path}:{number}: expected 'seller name|short name', found {line!r} "
                    "(names.csv is pipe-delimited with a header line)"
                )
            mapping[parts[0].strip()] = parts[1].strip()
    return mapping


@dataclass
class ReadResult:
    frame: object  # pandas or cuDF, columns named as the classic layout names them
    bad: list[BadRow] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.frame)


class _Unclean(Exception):
    """The fast path cannot vouch for the piece: the slow path must look line by line."""


def read(pieces, layout: schema.Layout, columns, device: str, policy: str = "error",
         names: dict | None = None, unique_ids: bool = False) -> ReadResult:
    """Read ``columns`` (classic names) of ``pieces`` of files in ``layout`` into one frame.

    Loan ids are int64, numbers float32 (parsed as float64 and rounded, the feature table's
    type; blank: missing), the reporting period an int32
    month number (``year * 12 + month - 1``), the status int32 (blank or unknown: -1), the
    categorical fields int16 codes (``schema.vocabulary``). ``unique_ids``: a loan id twice
    makes the second row bad (acquisition files).
    """
    check_policy(policy)
    columns = tuple(columns)
    frames, bad = [], []
    seen: set | None = set() if unique_ids else None
    groups = _groups(pieces, device)
    for group in groups:
        try:
            frame = _fast(group, None, layout, columns, device, names)
            if unique_ids:
                ids = frame["loan_id"]
                if int(ids.nunique()) != len(ids) or (seen and bool(ids.isin(list(seen)).any())):
                    raise _Unclean("duplicate loan_id")
                if len(groups) > 1:  # the ids the next groups must not repeat
                    seen.update(_host(ids))
        except _Unclean as unclean:  # the slow path, one piece at a time
            for piece in group:
                frame, found = _slow_path(piece, layout, columns, device, names, seen,
                                          str(unclean))
                bad += found
                if found and policy == "error":
                    raise BadRowsError(found) from None
                frames.append(frame)
            continue
        frames.append(frame)
    frame = frames[0] if len(frames) == 1 else module_of(frames[0]).concat(frames,
                                                                        ignore_index=True)
    return ReadResult(frame, bad)


def _groups(pieces, device: str) -> list[list[Piece]]:
    """The pieces converted together. On GPUs, chunks of up to CHUNK bytes of text: each
    conversion costs its launches whatever the rows, so small pieces go together, and the
    reader needs several times its text in device memory, so a large piece is cut. On CPUs
    one piece at a time."""
    return files.chunks(pieces, CHUNK) if device == "gpu" else [[piece] for piece in pieces]


def _host(series) -> list:
    return series.to_arrow().to_pylist() if hasattr(series, "to_arrow") else series.tolist()


# ---------------------------------------------------------------------------------------------
# The fast path


def _fast(pieces: list[Piece], data: bytes | None, layout, columns, device, names):
    """The typed frame of ``pieces`` (or of ``data``, a piece's good lines); raises _Unclean."""
    read_columns = _read_gpu if device == "gpu" else _read_cpu
    frame, texts = read_columns(pieces, data, layout, columns)
    if frame is None:  # no line, or only blank ones
        return empty_frame(columns, device)
    for name, (codes, uniques) in texts.items():
        frame[name] = _decoded(name, codes, uniques, names)
    if frame["loan_id"].isna().any():
        raise _Unclean("blank loan_id")
    return frame if list(frame.columns) == list(columns) else frame[list(columns)]


def _decoded(name: str, codes, uniques: list, names):
    """A text column from its encoded form (``codes`` index ``uniques``; -1 or a None text:
    blank), each distinct text converted once; raises _Unclean when one is not valid."""
    kind = schema.kind_of(name)
    blank = BLANK[kind]
    values = []
    for text in uniques:
        value = blank if text is None else _convert(kind, name, text, names)
        if value is None:
            raise _Unclean(f"blank {name}" if text is None else f"bad value in {name}")
        values.append(value)
    if blank is None:
        if bool((codes < 0).any()):
            raise _Unclean(f"blank {name}")
        blank = 0
    xp = module_of(codes)
    return xp.asarray([*values, blank], dtype=DTYPES[kind])[codes]  # code -1: the blank


def _convert(kind: str, name: str, text: str, names):
    """The value of one non-blank text of a column, or None when it is not valid."""
    if kind in (PERIOD, DATE):
        return schema.month_number(text.strip())
    if kind == STATUS:
        if text.strip() in schema.STATUS_UNKNOWN:
            return schema.MISSING
        return int(text) if _INTEGER.match(text) else None
    return schema.category_code(name, text, names)


def _byte_range(piece: Piece) -> tuple[int, int] | None:
    """cuDF's ``byte_range`` for a piece: it reads the rows that start after the offset and
    no later than its end, so the offset is the newline before the piece."""
    size = os.path.getsize(piece.path)
    if piece.start == 0 and piece.stop >= size:
        return None
    offset = max(piece.start - 1, 0)
    return offset, 0 if piece.stop >= size else piece.stop - 1 - offset


def _read_gpu(pieces, data, layout, columns):
    import cudf

    by_name = {layout.classic[c]: c for c in columns}  # the reader names them as we do
    names = [by_name.get(name, f"_{i}") for i, name in enumerate(layout.names)] + [EXTRA]
    dtype = {c: "int64" if schema.kind_of(c) == ID else "str" for c in columns}
    usecols, dtype = [*columns, EXTRA], {**dtype, EXTRA: "str"}
    if data is None:  # the text of every piece, then converted at once
        frames = [_read_csv_gpu(p.path, _byte_range(p), names, usecols, dtype) for p in pieces]
        frame = frames[0] if len(frames) == 1 else cudf.concat(frames, ignore_index=True)
        del frames
    else:  # a piece's good lines, after the slow path
        frame = cudf.read_csv(io.BytesIO(data), sep="|", header=None, names=names,
                              usecols=usecols, dtype=dtype, na_values=[""],
                              keep_default_na=False, quoting=3, skip_blank_lines=True)
    if frame.pop(EXTRA).null_count != len(frame):
        raise _Unclean("too many fields")
    texts = {}
    for column in columns:
        kind = schema.kind_of(column)
        if kind == NUMBER:
            try:  # cuDF checks every value is a number, then converts
                frame[column] = frame[column].astype("float64").astype("float32")
            except ValueError:
                raise _Unclean(f"a number in {column} is not one") from None
        elif kind != ID:
            texts[column] = _encoded(frame.pop(column))
    return frame, texts


def _encoded(series):
    """(codes, distinct texts) of a cuDF text column, by libcudf's ``encode`` in one call (a
    third of ``factorize``'s time, which drops the nulls, finds the distinct values and
    joins them back). A blank is a text of its own, None."""
    import cudf
    import pylibcudf as plc

    column, _ = series.to_pylibcudf()
    keys, codes = plc.transform.encode(plc.Table([column]))
    uniques = cudf.Series.from_pylibcudf(keys.columns()[0]).to_arrow().to_pylist()
    return cudf.Series.from_pylibcudf(codes).values, uniques


def _read_csv_gpu(path, byte_range, names, usecols, dtypes):
    """``cudf.read_csv`` of a file's byte range, the columns as text but the loan id."""
    import cudf

    return cudf.read_csv(path, sep="|", header=None, names=names, usecols=usecols,
                         dtype=dtypes, na_values=[""], keep_default_na=False, quoting=3,
                         skip_blank_lines=True, byte_range=byte_range)


def _read_cpu(pieces, data, layout, columns):
    import pyarrow as pa
    from pyarrow import csv

    (piece,) = pieces
    if data is None:
        with open(piece.path, "rb") as f:
            f.seek(piece.start)
            data = f.read(piece.nbytes)
    wanted = [layout.classic[c] for c in columns]
    text = pa.dictionary(pa.int32(), pa.string())
    types = {layout.classic[c]: {ID: pa.int64(), NUMBER: pa.float64()}.get(
        schema.kind_of(c), text) for c in columns}
    try:
        table = csv.read_csv(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=csv.ReadOptions(column_names=list(layout.names), use_threads=False),
            parse_options=csv.ParseOptions(delimiter="|", quote_char=False,
                                           ignore_empty_lines=True),
            convert_options=csv.ConvertOptions(column_types=types, null_values=[""],
                                               strings_can_be_null=True,
                                               include_columns=wanted),
        )
    except pa.ArrowInvalid as exc:  # a field too many or too few, a number that is not one
        if str(exc).startswith("Empty CSV file"):  # no line, or only blank ones
            return None, {}
        raise _Unclean(str(exc)) from None
    import pandas as pd

    out, texts = {}, {}
    for column, name in zip(columns, wanted, strict=True):
        values = table.column(name)
        if pa.types.is_dictionary(values.type):
            values = values.combine_chunks()
            codes = values.indices.fill_null(-1).to_numpy(zero_copy_only=False)
            texts[column] = (codes, values.dictionary.to_pylist())
            out[column] = codes
        else:
            out[column] = values.to_numpy().astype(DTYPES[schema.kind_of(column)], copy=False)
    return pd.DataFrame(out), texts


def _empty(columns):
    import pandas as pd

    return pd.DataFrame({c: pd.Series([], dtype=DTYPES[schema.kind_of(c)]) for c in columns})


def empty_frame(columns, device: str = "cpu"):
    """A frame of no rows with the columns and dtypes that :func:`read` returns."""
    frame = _empty(columns)
    if device == "gpu":
        import cudf

        return cudf.DataFrame(frame)
    return frame


# ---------------------------------------------------------------------------------------------
# The slow path


def _slow_path(piece, layout, columns, device, names, seen, first_problem):
    with open(piece.path, "rb") as f:
        f.seek(piece.start)
        data = f.read(piece.nbytes)
    clean, bad_lines = _check_lines(data, layout, columns, seen)
    if not bad_lines:
        raise RuntimeError(
            f"{piece.path} (bytes {piece.start}-{piece.stop}): the reader rejected the piece "
            f"({first_problem}) but no line breaks the file format; please report this")
    base = lines_before(piece.path, piece.start)
    bad = [BadRow(piece.path, base + index + 1, reason) for index, reason in bad_lines]
    frame = _fast([piece], clean, layout, columns, device, names) if clean else empty_frame(
        columns, device)
    return frame, bad


def _check_lines(data: bytes, layout, columns, seen) -> tuple[bytes, list[tuple[int, str]]]:
    """Good lines joined again, and (0-based line index in ``data``, reason) of bad ones."""
    where = [(c, layout.names.index(layout.classic[c])) for c in columns]
    good, bad = [], []
    for index, raw in enumerate(data.split(b"\n")):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append((index, f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
            continue
        fields = text.split("|")
        reason = (f"expected {layout.fields} fields, found {len(fields)}"
                  if len(fields) != layout.fields else _check_fields(fields, where))
        if reason is None and seen is not None:
            key = int(fields[layout.loan_field])
            if key in seen:
                reason = f"duplicate loan_id {key}"
            seen.add(key)
        if reason is None:
            good.append(line)
        else:
            bad.append((index, reason))
    return b"".join(line + b"\n" for line in good), bad


def _check_fields(fields: list[str], where) -> str | None:
    """Why one line's fields are bad, or None (the same rules as the fast path's)."""
    for name, position in where:
        text = fields[position]
        kind = schema.kind_of(name)
        if kind == ID:
            if text == "":
                return "loan_id is blank"
            if not _INTEGER.match(text):
                return f"loan_id is not an integer: {text!r}"
        elif kind == PERIOD:
            if schema.month_number(text.strip()) is None:
                return f"{name} is not a date (MM/DD/YYYY or MMYYYY): {text!r}"
        elif text == "":
            continue
        elif kind == DATE and schema.month_number(text.strip()) is None:
            return f"{name} is not a date (MM/YYYY or MMYYYY): {text!r}"
        elif kind == NUMBER and not _NUMBER.match(text):
            return f"{name} is not a number: {text!r}"
        elif kind == STATUS and not (_INTEGER.match(text) or text.strip() in
                                     schema.STATUS_UNKNOWN):
            return f"{name} is not an integer: {text!r}"
    return None

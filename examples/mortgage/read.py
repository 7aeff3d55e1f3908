"""Reading the pipe-delimited files into typed frames, with every bad row found and reported.

The fast path parses a whole chunk at once (on the GPU with the reader's own kernels, see
``lines.py`` and ``number_fields.py``, with libcudf for number forms those leave to it; on the
CPU with pyarrow) and proves the chunk clean: on the GPU with vectorized checks that every
line has the right number of fields and no number failed to parse; pyarrow refuses both
itself. Then the required fields must be there and every date, status and code valid. Only
when a check fails does the slow path look at the chunk line by line, in Python, to say which
lines are bad and why; the policy then raises (``error``), or drops them with a warning
(``warn``) or silently but counted (``skip``). Rows are never lost without a count, and a
crash always says which file and line.

Dates, statuses and categorical fields are few distinct strings per chunk: each distinct
string is checked and converted once on the host, and the codes are mapped through a small
lookup table. On the CPU they come from pyarrow's dictionary-encoded columns; on the GPU
they are found from a hash of each field, without building string columns (``_text_codes``).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from . import chunk_bytes, lines, number_fields, schema
from .backend import Backend, array_module
from .chunk_bytes import DeviceUpload
from .schema import CATEGORY, DATE, ID, NUMBER, PERIOD, STATUS, Table
from .stages import stage

POLICIES = ("error", "warn", "skip")
SEPARATOR = b"|"
SHOWN = 20  # bad rows spelled out in a message; the rest are counted

_INTEGER = re.compile(r"^\s*[-+]?\d+\s*$")
_NUMBER = re.compile(r"^\s*[-+]?((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|inf|infinity)\s*$", re.I)


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


@dataclass(frozen=True)
class Source:
    """A file, or the byte range ``[start, end)`` of one, moved to whole loans when read."""

    path: str
    start: int = 0
    end: int | None = None  # None: the end of the file
    quarter: str | None = None

    def extent(self) -> tuple[int, int]:
        """``[start, stop)`` of the chunk in the file, moved to loan boundaries."""
        with open(self.path, "rb") as f:
            size = f.seek(0, io.SEEK_END)
            end = size if self.end is None else min(self.end, size)
            if self.start == 0 and end == size:
                return 0, size
            return loan_boundary(f, self.start, size), loan_boundary(f, end, size)

    def read(self, allocate=None, done=None) -> tuple[np.ndarray, int]:
        """The chunk's bytes (a uint8 array from ``allocate(nbytes)``, by default NumPy's) and
        the offset where they start in the file, read by several threads at once; ``done(a,
        b)`` is called as each block ``[a, b)`` of them is in (see
        :func:`.chunk_bytes.read_range`)."""
        start, stop = self.extent()
        nbytes = max(0, stop - start)
        out = np.empty(nbytes, dtype=np.uint8) if allocate is None else allocate(nbytes)
        chunk_bytes.read_range(self.path, start, out, done)
        return out, start


def _loan_id(line: bytes) -> bytes:
    return line.split(SEPARATOR, 1)[0].strip()


def loan_boundary(f, offset: int, size: int) -> int:
    """The first line start at or after ``offset`` that begins a new loan.

    Both neighbours of a split compute the same boundary, so each loan lands whole in exactly
    one chunk (the per-loan features and the forward label need the whole history).
    """
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    f.seek(offset - 1)
    f.readline()  # to the start of the next line (or stays, if offset starts a line)
    pos = f.tell()
    if pos >= size:
        return size
    previous = _loan_id(_line_before(f, pos))
    f.seek(pos)
    for line in iter(f.readline, b""):
        if _loan_id(line) != previous:
            return pos
        pos += len(line)
    return size


def _line_before(f, pos: int, block: int = 1 << 16) -> bytes:
    """The line that ends just before ``pos`` (without its newline)."""
    start = pos - 1  # the newline that ends it
    parts = []
    while start > 0:
        step = min(block, start)
        f.seek(start - step)
        data = f.read(step)
        cut = data.rfind(b"\n")
        if cut >= 0:
            parts.append(data[cut + 1:])
            break
        parts.append(data)
        start -= step
    return b"".join(reversed(parts))


def lines_before(path: str, offset: int, block: int = 1 << 24) -> int:
    """How many lines of ``path`` end before byte ``offset`` (to number lines in a chunk)."""
    count = 0
    with open(path, "rb") as f:
        while offset > 0:
            data = f.read(min(block, offset))
            if not data:
                break
            count += data.count(b"\n")
            offset -= len(data)
    return count


# ---------------------------------------------------------------------------------------------
# Parsing


def _read_options(table: Table) -> dict:
    """cuDF's ``read_csv`` options for a table (numbers typed, text as strings)."""
    dtypes = {c.name: {ID: "int64", NUMBER: "float64"}.get(c.kind, "str") for c in table.columns}
    return dict(
        sep="|", header=None, names=table.names, dtype=dtypes, keep_default_na=False,
        na_values=[""], quoting=3, skip_blank_lines=True,
    )


def strict_parser(backend: Backend) -> bool:
    """Whether the backend's CSV reader raises on an unparsable number or a wrong field count.
    pyarrow (the CPU's) does; cuDF reads either as nulls, so on the GPU the fast path counts
    fields per line and compares nulls with the fields that were filled."""
    return not backend.is_gpu


class _Unclean(Exception):
    """The fast path cannot vouch for the chunk: the slow path must look line by line."""


def _categorized(series, backend: Backend):
    """(host list of the distinct strings, their index + 1 per row as an array: 0 for a
    blank)."""
    codes, uniques = series.factorize()
    return [str(c) for c in backend.to_host(uniques)], codes + 1


def _convert(kind: str, name: str, text: str, names: dict | None):
    """(value, ok) for one distinct non-blank string of a converted column."""
    if kind in (PERIOD, DATE):
        number = schema.month_number(text)
        return (number, True) if number is not None else (np.nan, False)
    if kind == STATUS:
        if text.strip() in schema.STATUS_UNKNOWN:
            return schema.MISSING, True
        return (int(text), True) if _INTEGER.match(text) else (schema.MISSING, False)
    return schema.category_code(name, text, names), True


_BLANK = {PERIOD: (0, False), DATE: (np.nan, True), STATUS: (schema.MISSING, True),
          CATEGORY: (schema.MISSING, True)}
# What each kind of column becomes.
DTYPES = {ID: "int64", NUMBER: "float64", PERIOD: "int32", DATE: "float32", STATUS: "int32",
          CATEGORY: "int16"}


def empty_frame(table: Table, backend: Backend):
    """A frame of no rows with the columns and dtypes that ``read_table`` returns."""
    return backend.df.DataFrame(
        {c.name: backend.df.Series([], dtype=DTYPES[c.kind]) for c in table.columns}
    )


def _fast(data, table: Table, backend: Backend, names: dict | None,
          upload: DeviceUpload | None = None):
    """The typed frame of a clean chunk; raises _Unclean when any check fails.

    On the GPU the checks, the numbers (``number_fields``) and the text coding read the
    chunk's device copy. A text column (dates, statuses, codes) would be held as strings plus
    per-field bookkeeping, several times the text itself, only to be turned into small
    integers. Instead each text field is
    hashed in place, and each distinct text is converted once, from one line that has it
    (``_text_codes``).
    """
    xp = backend.xp
    if not isinstance(data, np.ndarray):
        data = np.frombuffer(data, dtype=np.uint8)
    numeric = [c for c in table.columns if c.kind in (ID, NUMBER)]
    text = [c for c in table.columns if c.kind not in (ID, NUMBER)]
    rows, filled = None, None
    if backend.is_gpu or not strict_parser(backend):
        with stage("to device"):  # already on its way when the file was read with ``upload``
            raw = xp.asarray(data) if upload is None else upload.take()
        with stage("layout"):
            layout = lines.of(raw, xp, filled=not strict_parser(backend))
            if bool(layout.wrong(len(table)).any()):
                raise _Unclean("field count")
            rows = layout.rows
            if rows == 0:
                return empty_frame(table, backend)
            if not strict_parser(backend):
                filled = layout.filled_counts([table.columns.index(c) for c in numeric])
            blank = layout.blank
            starts, ends = layout.starts, layout.ends
            if bool(blank.any()):  # the readers skip blank lines
                starts, ends = starts[~blank], ends[~blank]
            del layout, blank
    # else: the host parser itself rejects a line with the wrong number of fields
    memo: dict = {}
    try:
        if backend.is_gpu:
            # Numbers, then text, from the chunk's device copy, which is freed before the text
            # codes become values: the copy, the numbers (1.7x the chunk as 8-byte values)
            # and the codes are alive at once, about 3x the chunk. A number in a form the
            # kernel leaves to libcudf: libcudf parses the pinned host copy a part at a time
            # after the device copy is freed (its own copy of its input is then a part).
            numbers = [c.name for c in numeric]
            with stage("parse numbers"):
                frame = number_fields.parse(raw, starts, ends, table, numbers)
            with stage("code text"):
                codes = _text_codes(raw, data, starts, ends, table, text, xp, names, memo)
            del raw, starts, ends
            with stage("code text"):
                converted = _text_columns(codes, data, table, text, xp, names, memo)
            del codes
            if frame is None:
                with stage("parse numbers (libcudf)"):
                    frame = _parse_from_pinned(data, table, numbers)
        else:
            with stage("parse"):
                frame = parse_host(data, table, backend)
            if rows is None:
                rows = len(frame)
                if rows == 0:
                    return empty_frame(table, backend)
            with stage("code text"):
                converted = _converted(frame, text, backend, names, memo)
    except (ValueError, TypeError, OverflowError) as exc:  # a number that is not one, a field
        # too many or too few (pyarrow's ArrowInvalid is a ValueError)
        raise _Unclean(str(exc)) from exc
    with stage("check numbers"):
        _check_numbers(frame, rows, filled, numeric)
    frame = backend.df.DataFrame(
        {c.name: converted[c.name] if c.name in converted else frame[c.name]
         for c in table.columns})
    if table is schema.ACQUISITION and int(frame["loan_id"].nunique()) != len(frame):
        raise _Unclean("duplicate loan_id")
    return frame


def _text_codes(raw, data, starts, ends, table: Table, text: list, xp, names, memo):
    """Coding the ``text`` columns of a chunk from its bytes on the device, the part that reads
    them: every line's slot in its field's table of distinct texts (``lines.field_slots``,
    one pass), or, when a field has more distinct texts than a table holds, the columns
    already coded by sorting each one's hashes (a dict, see ``_coded``)."""
    fields = [table.columns.index(c) for c in text]
    found = lines.field_slots(raw, starts, ends, fields, xp, lines.SLOTS)
    if found.full:
        return {c.name: _coded(raw, data, starts, ends, table, c, xp, names, memo) for c in text}
    return found


def _text_columns(codes, data, table: Table, text: list, xp, names, memo) -> dict:
    """The ``text`` columns as numbers from ``_text_codes`` (the device copy may be gone by
    now): each distinct text converted once, from the first line that has it in ``data``,
    the host copy, and mapped through its slots."""
    if isinstance(codes, dict):
        return codes
    found = codes
    fields = [table.columns.index(c) for c in text]
    out = {}
    for j, (col, number) in enumerate(zip(text, fields, strict=True)):
        used = np.flatnonzero(found.hashes[j])
        at = zip(found.starts[j, used].tolist(), found.ends[j, used].tolist(), strict=True)
        try:
            texts = [data[a:b].tobytes().split(b"|")[number].decode("utf-8") for a, b in at]
        except UnicodeDecodeError as exc:
            raise _Unclean(f"{col.name} is not UTF-8") from exc
        values = np.full(found.slots + 1, _BLANK[col.kind][0], dtype=DTYPES[col.kind])
        values[used] = _values_of(col, texts, names, memo)
        if found.blank[j]:
            values[found.slots] = _blank_value(col)
        out[col.name] = xp.asarray(values)[found.codes[j]]
    return out


def _coded(raw, data, starts, ends, table: Table, col, xp, names, memo):
    """One text column of the chunk as numbers, from the bytes on the device: hash the field
    on every line, find the distinct hashes, convert each from the text of its first line
    (the way for a field with more distinct texts than ``lines.field_slots`` holds)."""
    field = table.columns.index(col)
    hashes = lines.field_hashes(raw, starts, ends, field, xp)
    distinct, first, inverse = xp.unique(hashes, return_index=True, return_inverse=True)
    del hashes
    found = xp.stack([distinct.view(xp.int64), starts[first], ends[first]]).tolist()  # one copy
    at = [(a, b) for h, a, b in zip(*found, strict=True) if h != 0]
    try:
        texts = [data[a:b].tobytes().split(b"|")[field].decode("utf-8") for a, b in at]
    except UnicodeDecodeError as exc:
        raise _Unclean(f"{col.name} is not UTF-8") from exc
    values = _values_of(col, texts, names, memo)
    if len(at) < len(distinct):  # hash 0, a blank field, sorts first
        values = [_blank_value(col)] + values
    return xp.asarray(values, dtype=DTYPES[col.kind])[inverse.ravel()]


def _values_of(col, texts: list[str], names: dict | None, memo: dict) -> list:
    """The value of each distinct non-blank text of ``col``, each converted once per chunk
    (``memo``); raises _Unclean when one is not a valid value."""
    values = []
    for text in texts:
        key = (col.name, text)
        if key not in memo:
            memo[key] = _convert(col.kind, col.name, text, names)
        value, ok = memo[key]
        if not ok:
            raise _Unclean(f"bad value in {col.name}")
        values.append(value)
    return values


def _blank_value(col):
    """What a blank field of ``col`` becomes; raises _Unclean where a blank is not allowed."""
    value, ok = _BLANK[col.kind]
    if not ok:
        raise _Unclean(f"blank {col.name}")
    return value


def parse_host(data, table: Table, backend: Backend):
    """Host bytes parsed: with pyarrow for pandas, or by cuDF (which copies them to the device
    itself)."""
    if not backend.is_gpu:
        return _parse_arrow(data, table)
    return backend.df.read_csv(io.BytesIO(data), **_read_options(table))


def _parse_arrow(data, table: Table):
    """pandas frame of host bytes, parsed by pyarrow's CSV reader (one thread: a CPU worker
    has one; measured 2.5x pandas' C parser, with the same values). Strict: a line with too many
    or too few fields, or a number that is not one, raises ArrowInvalid. Text columns come
    back as categoricals."""
    import pyarrow as pa
    from pyarrow import csv

    text = pa.dictionary(pa.int32(), pa.string())
    types = {c.name: {ID: pa.int64(), NUMBER: pa.float64()}.get(c.kind, text)
             for c in table.columns}  # fmt: skip
    try:
        parsed = csv.read_csv(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=csv.ReadOptions(column_names=table.names, use_threads=False),
            parse_options=csv.ParseOptions(delimiter="|", quote_char=False,
                                           ignore_empty_lines=True),
            convert_options=csv.ConvertOptions(column_types=types, null_values=[""],
                                               strings_can_be_null=True),
        )  # fmt: skip
    except pa.ArrowInvalid as exc:
        if str(exc).startswith("Empty CSV file"):  # no line, or only blank ones
            return empty_frame(table, Backend("cpu"))
        raise
    return parsed.to_pandas()


class _Span:
    """Bytes ``[start, stop)`` of a buffer the device can read, as libcudf's reader takes
    them (``ptr`` and ``size``): device memory (CuPy) or page-locked host memory (NumPy), whose
    address the device shares under CUDA's unified addressing. Keeps the buffer alive."""

    def __init__(self, array, start: int = 0, stop: int | None = None):
        stop = array.size if stop is None else stop
        base = array.data.ptr if hasattr(array.data, "ptr") else array.ctypes.data
        self.array = array
        self.ptr = int(base) + start
        self.size = max(0, stop - start)


# libcudf parses a chunk's numbers a quarter at a time (its own device copy of the text is a
# quarter of the chunk), but no part is smaller than 32 MiB: each call costs about 2 ms.
PARSE_PARTS = 4
PARSE_PART_MIN = 32 << 20


def parse_part_bytes(size: int) -> int:
    return max(PARSE_PART_MIN, -(-size // PARSE_PARTS))


def _parse_from_pinned(data: np.ndarray, table: Table, numbers: list[str]):
    """libcudf's parse of ``numbers`` from ``data`` in page-locked memory, in parts: in place
    when ``data`` is a chunk's lent buffer, else (a chunk cleaned by the slow path) from a
    copy in one."""
    pinned = chunk_bytes.PINNED
    part = parse_part_bytes(len(data))
    if pinned.lent(data):
        return parse_device(data, table, numbers, part_bytes=part)
    with chunk_bytes.pinned(len(data)) as copy:
        copy[:] = data
        return parse_device(copy, table, numbers, part_bytes=part)


def line_cuts(data, part_bytes: int | None) -> list[int]:
    """Offsets that cut ``data`` (a uint8 array) into parts of about ``part_bytes`` at line
    starts: ``[0, ..., len(data)]``; ``[0, len(data)]`` when ``part_bytes`` is None."""
    size = len(data)
    if not part_bytes or size <= part_bytes:
        return [0, size]
    parts = -(-size // part_bytes)
    cuts = [0]
    for k in range(1, parts):
        at = _next_line(data, k * size // parts)
        if cuts[-1] < at < size:
            cuts.append(at)
    return cuts + [size]


def _next_line(data, offset: int, window: int = 1 << 16) -> int:
    """The offset just past the first newline at or after ``offset`` (``len(data)``: none)."""
    xp = array_module(data)
    while offset < len(data):
        found = xp.flatnonzero(data[offset:offset + window] == ord("\n"))
        if found.size:
            return offset + int(found[0]) + 1
        offset += window
    return len(data)


def parse_device(data, table: Table, columns: list[str] | None = None,
                 part_bytes: int | None = None):
    """cuDF's CSV reader on bytes the device can read (a CuPy uint8 array, or a NumPy one in
    page-locked memory, such as the buffers ``chunk_bytes.PINNED`` lends), for ``columns``
    (default: all), at most ``part_bytes`` of text at a time (default: all at once; each part's columns are joined
    after, one column at a time). The result is what :func:`parse_host` gives with cuDF."""
    import cudf
    import pylibcudf as plc

    columns = table.names if columns is None else list(columns)
    parts = [_parse_part(_Span(data, a, b), table, columns)
             for a, b in pairwise(line_cuts(data, part_bytes))]
    whole = []
    for j in range(len(columns)):
        pieces = [part[j] for part in parts]
        for part in parts:
            part[j] = None  # a piece is freed as soon as its column is whole
        whole.append(pieces[0] if len(pieces) == 1 else plc.concatenate.concatenate(pieces))
        del pieces
    return cudf.DataFrame.from_pylibcudf(plc.Table(whole), {"columns": columns})


def _parse_part(span: _Span, table: Table, columns: list[str]) -> list:
    """libcudf's CSV reader on one span: the pylibcudf columns, in the order of ``columns``."""
    import pylibcudf as plc

    kinds = {ID: plc.TypeId.INT64, NUMBER: plc.TypeId.FLOAT64}
    dtypes = {c.name: plc.DataType(kinds.get(c.kind, plc.TypeId.STRING))
              for c in table.columns if c.name in columns}
    options = (
        plc.io.csv.CsvReaderOptions.builder(plc.io.SourceInfo([span]))
        .compression(plc.io.types.CompressionType.NONE)
        .quoting(plc.io.types.QuoteStyle.NONE)
        .skip_blank_lines(True)
        .keep_default_na(False)
        .na_filter(True)
        .build()
    )
    options.set_header(-1)
    options.set_names(table.names)
    options.set_delimiter("|")
    options.set_na_values([""])
    if list(columns) != table.names:
        options.set_use_cols_names(list(columns))
    options.set_dtypes(dtypes)
    result = plc.io.csv.read_csv(options)
    by_name = dict(zip(result.column_names(include_children=False), result.columns, strict=True))
    return [by_name[name] for name in columns]


def _check_numbers(frame, rows: int, filled: list[int] | None, numeric) -> None:
    """Every line became a row, no filled number failed to parse, no loan_id is blank."""
    if len(frame) != rows:
        raise _Unclean(f"{len(frame)} rows parsed from {rows} lines")
    for col, count in zip(numeric, filled or (), strict=False):  # none when strict
        if len(frame) - _nulls(frame[col.name]) != count:
            raise _Unclean(f"unparsable number in {col.name}")
    if _nulls(frame["loan_id"]):
        raise _Unclean("blank loan_id")


def _nulls(series) -> int:
    """Missing values of a column: cuDF keeps the count with the column (no device work)."""
    count = getattr(series, "null_count", None)
    return int(series.isna().sum()) if count is None else int(count)


def _converted(frame, columns, backend: Backend, names: dict | None, memo: dict) -> dict:
    """The text ``columns`` of a parsed ``frame`` as arrays of numbers (month numbers,
    statuses, codes): each distinct string is checked and converted once, then the codes are
    mapped through a small lookup table."""
    xp = backend.xp
    out = {}
    for col in columns:
        categories, index = _categorized(frame[col.name], backend)
        values = _values_of(col, categories, names, memo)
        blank = _blank_value(col) if bool((index == 0).any()) else _BLANK[col.kind][0]
        out[col.name] = xp.asarray([blank] + values, dtype=DTYPES[col.kind])[index]
    return out


def _check_line(fields: list[str], table: Table, seen: set | None) -> str | None:
    """Why one line is bad, or None (the slow path's rules, the same as the fast path's)."""
    if len(fields) != len(table):
        return f"expected {len(table)} fields, found {len(fields)}"
    for col, text in zip(table.columns, fields, strict=True):
        blank = text == ""
        if col.kind == ID:
            if blank:
                return "loan_id is blank"
            if not _INTEGER.match(text):
                return f"loan_id is not an integer: {text!r}"
        elif col.kind == PERIOD:
            if schema.month_number(text) is None:
                return f"{col.name} is not a date (MM/DD/YYYY): {text!r}"
        elif blank:
            continue
        elif col.kind == DATE and schema.month_number(text) is None:
            return f"{col.name} is not a date (MM/YYYY or MM/DD/YYYY): {text!r}"
        elif col.kind == NUMBER and not _NUMBER.match(text):
            return f"{col.name} is not a number: {text!r}"
        elif col.kind == STATUS and not (
            _INTEGER.match(text) or text.strip() in schema.STATUS_UNKNOWN
        ):
            return f"{col.name} is not an integer: {text!r}"
    if seen is not None:
        key = int(fields[0])
        if key in seen:
            return f"duplicate loan_id {key}"
        seen.add(key)
    return None


def _slow(data: bytes, table: Table) -> tuple[bytes, list[tuple[int, str]]]:
    """Good lines joined again, and (0-based line index in the chunk, reason) of bad ones."""
    good, bad = [], []
    seen = set() if table is schema.ACQUISITION else None
    for index, raw in enumerate(data.split(b"\n")):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append((index, f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
            continue
        reason = _check_line(text.split("|"), table, seen)
        if reason is None:
            good.append(line)
        else:
            bad.append((index, reason))
    return b"".join(line + b"\n" for line in good), bad


@dataclass
class ReadResult:
    frame: object
    bad: list[BadRow] = field(default_factory=list)
    rows: int = 0  # rows read (kept)


def read_table(source: Source, table: Table, backend: Backend, policy: str = "error",
               names: dict | None = None) -> ReadResult:
    """Read one chunk of a performance or acquisition file into a typed frame.

    Numbers are float64 (blank: NaN), dates month numbers (float32, blank: NaN), the reporting
    period an int32 month number, the status int32 (blank/unknown: -1), categorical fields
    int16 codes (see ``schema.vocabulary``).
    """
    check_policy(policy)
    with stage("file"):
        chunk = chunk_bytes.fetch(source, backend.is_gpu)
    try:
        return _read_chunk(chunk, source, table, backend, policy, names)
    finally:
        chunk.release()


def _read_chunk(chunk: chunk_bytes.Chunk, source: Source, table: Table, backend: Backend,
                policy: str, names: dict | None) -> ReadResult:
    data, offset = chunk.data, chunk.offset
    try:
        frame = _fast(data, table, backend, names, chunk.upload)
        return ReadResult(frame, [], len(frame))
    except _Unclean as unclean:
        first_problem = str(unclean)
    with stage("slow path"):
        clean, bad_lines = _slow(bytes(data), table)
    if not bad_lines:
        raise RuntimeError(
            f"{source.path} (bytes {offset}-{offset + len(data)}): the reader rejected the "
            f"chunk ({first_problem}) but no line breaks the file format; please report this"
        )
    base = lines_before(source.path, offset)
    bad = [BadRow(source.path, base + index + 1, reason) for index, reason in bad_lines]
    if policy == "error":
        raise BadRowsError(bad)
    frame = _fast(clean, table, backend, names)
    return ReadResult(frame, bad, len(frame))


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

"""Reading the pipe-delimited files into typed frames, every bad row found and reported.

GPU workers read with libcudf's CSV reader (pylibcudf: a byte range of the file, the columns the
ETL needs, everything but the loan id as text); CPU workers with pyarrow's, which refuses a line
with the wrong number of fields or a number that is not one. A frame's columns hold what the
feature table wants: numbers as float32, the reporting month, the delinquency status and the
categorical codes as int32, and a blank as -1 (the feature table's missing value).

On GPUs each partition's columns are converted a kind at a time, not a column at a time: the
number columns are stacked into one text column that libcudf checks (every field a number or
blank: its reader alone would read a bad number as missing) and parses in one call, and the text
columns into one that ``encode`` turns into codes of one vocabulary of a few hundred texts. Each
distinct text is checked and converted once on the host, and a lookup table maps the codes of
all text columns at once. Each step is a call whatever the columns, so a partition costs a few
dozen calls instead of a hundred, and can be read in chunks that bound its device memory.

On CPUs pyarrow's reader parses the numbers and gives each text column as a dictionary (its
distinct texts, and an index per row): each distinct text is checked and converted once, and
one take from the converted texts maps the indices to the column's values. A flag column (N or
Y) is read as booleans, which cost the reader less than a dictionary and index N and Y; a piece
where one holds another text is read again with dictionaries.

Only when a check fails does the slow path read the piece line by line, in Python, to say
which lines are bad and why; the policy then raises (``error``), drops them with a warning
(``warn``) or drops them and counts them (``skip``). Rows are never lost without a count. On
GPUs a line with too few fields reads as a line whose last fields are blank (libcudf's reader
does not count fields); the CPU reader refuses it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from . import files, schema
from .features import module_of
from .files import Piece, lines_before
from .schema import CATEGORY, DATE, ID, MISSING, NUMBER, PERIOD, STATUS

POLICIES = ("error", "warn", "skip")
# Text a GPU reads and converts at once. libcudf's reader holds about 7.7 times its text on the
# device while it reads; a partition read in two chunks stays under 5 times its text
# (tests/examples/test_mortgage_gpu.py checks it on both layouts), and each chunk fewer saves
# the calls a chunk costs.
CHUNK = 512 * 2**20
SHOWN = 20  # bad rows spelled out in a message; the rest are counted
EXTRA = "_extra_field"  # catches lines with a field too many on GPUs

_INTEGER = re.compile(r"^\s*[-+]?\d+\s*$")
_NUMBER = re.compile(r"^\s*[-+]?((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|inf|infinity)\s*$", re.I)
# What each kind of column becomes, and the value of a blank field (None: a blank makes the
# row bad). Numbers are float32 with a blank (or NaN) as MISSING; the others int32.
DTYPES = {ID: "int64", NUMBER: "float32", PERIOD: "int32", DATE: "int32", STATUS: "int32",
          CATEGORY: "int32"}
BLANK = {PERIOD: None, DATE: MISSING, STATUS: MISSING, CATEGORY: MISSING}
FLAG = ("N", "Y")  # the vocabulary of a flag column, which the CPU reader reads as booleans


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

    Loan ids are int64; numbers float32 (parsed as float64 and rounded, the feature table's
    type); the reporting period an int32 month number (``year * 12 + month - 1``); the status
    an int32 (unknown: -1); the categorical fields int32 codes (``schema.vocabulary``). A blank
    is -1 but in the loan id and the period, where it makes the row bad. ``unique_ids``: a
    loan id twice makes the second row bad (acquisition files).
    """
    check_policy(policy)
    columns = tuple(columns)
    chunks, bad = [], []
    seen: set | None = set() if unique_ids else None
    for group, last in _with_last(_groups(pieces, device)):
        block = group if isinstance(group, Block) else None
        try:
            values = _fast([block.piece] if block else group, block.data if block else None, layout,
                           columns, device, names)
            if unique_ids:
                _check_unique(values["loan_id"], seen, last=last)
        except _Unclean as unclean:  # the slow path, one piece (or block) at a time
            sources = [block] if block else group
            found_here = []
            for source in sources:
                values, found = _slow_path(source, layout, columns, device, names, seen)
                found_here += found
                if found and policy == "error":
                    raise BadRowsError(found) from None
                chunks.append(values)
            if not found_here:  # a row may be bad only beside another piece's (a loan twice)
                raise RuntimeError(
                    f"{_described(sources)}: the reader rejected the text ({unclean}) but no "
                    "line breaks the file format; please report this")
            bad += found_here
            continue
        chunks.append(values)
    if not chunks:  # an empty compressed file
        chunks.append(empty_columns(columns, device))
    return ReadResult(_frame(chunks, columns, device), bad)


def _with_last(items):
    """``(item, whether it is the last)`` for each of ``items``."""
    items = iter(items)
    for item in items:
        for following in items:
            yield item, False
            item = following
        yield item, True


def _frame(chunks: list[dict], columns, device: str):
    """One frame of the chunks' columns (arrays), joined a column at a time."""
    if device == "gpu":
        import cudf

        values = {c: chunks[0][c] if len(chunks) == 1 else _concatenate_gpu([v[c] for v in chunks])
                  for c in columns}
        return cudf.DataFrame(values, nan_as_null=False)  # no NaN: skip cuDF's count
    import pandas as pd

    values = {c: chunks[0][c] if len(chunks) == 1 else np.concatenate([v[c] for v in chunks])
              for c in columns}

    return pd.DataFrame(values, copy=False)  # the arrays as they are: no second copy


def _concatenate_gpu(arrays):
    """CuPy arrays joined by libcudf (a precompiled copy, where CuPy compiles one)."""
    import pylibcudf as plc

    columns = [_plc_column(a) for a in arrays if a.size] or [_plc_column(arrays[0])]
    return _cupy(plc.concatenate.concatenate(columns))


def _plc_column(array):
    """A libcudf view of a 1-D CuPy array."""
    import pylibcudf as plc

    return plc.Column.from_cuda_array_interface(array)


def _cupy(column):
    """A libcudf column's values as a CuPy array (a view)."""
    import cudf

    return cudf.Series.from_pylibcudf(column).values


def _array_module(device: str):
    if device == "gpu":
        import cupy

        return cupy
    return np


def _check_unique(ids, seen: set, last: bool) -> None:
    """Raise _Unclean when ``ids`` repeat one another or one of ``seen`` (kept up to date
    unless this is the ``last`` chunk)."""
    xp = module_of(ids)
    if xp is not np:
        _check_unique_gpu(ids, seen)
    elif len(xp.unique(ids)) != len(ids) or (seen and bool(np.isin(ids, sorted(seen)).any())):
        raise _Unclean("duplicate loan_id")
    if not last:  # the ids the next chunks must not repeat
        seen.update((ids.get() if hasattr(ids, "get") else ids).tolist())


def _check_unique_gpu(ids, seen: set) -> None:
    import pylibcudf as plc

    from .features_gpu import BOOL

    if not ids.size:
        return
    column = _plc_column(ids)
    kinds = plc.stream_compaction.DuplicateKeepOption, plc.types.NullEquality
    distinct = plc.stream_compaction.distinct(
        plc.Table([column]), [0], kinds[0].KEEP_ANY, kinds[1].EQUAL,
        plc.types.NanEquality.ALL_EQUAL)
    if distinct.num_rows() != len(ids):
        raise _Unclean("duplicate loan_id")
    if seen:
        known = plc.Column.from_array(np.array(sorted(seen), dtype=ids.dtype))
        repeated = plc.reduce.reduce(plc.search.contains(known, column),
                                     plc.aggregation.any(), BOOL)
        if repeated.to_py():
            raise _Unclean("duplicate loan_id")


@dataclass(frozen=True)
class Block:
    """Whole lines of a compressed piece's text, decompressed; ``first_line`` is the 0-based
    number of the first one in the file."""

    piece: Piece
    data: bytes
    first_line: int


def _groups(pieces, device: str):
    """What is converted together, in order: lists of pieces, or a compressed piece's blocks.
    On GPUs, chunks of up to CHUNK bytes of text: each conversion costs its calls whatever the
    rows, so small pieces go together, and the reader needs several times its text in device
    memory, so a large piece is cut. On CPUs one piece at a time. A compressed piece is
    decompressed as a stream, in blocks of about CHUNK bytes of whole lines."""
    plain = []
    for piece in [*pieces, None]:
        if piece is not None and not piece.compressed:
            plain.append(piece)
            continue
        yield from files.chunks(plain, CHUNK) if device == "gpu" else ([p] for p in plain)
        plain = []
        if piece is not None:
            for data, first_line in files.text_blocks(piece.path, CHUNK):
                yield Block(piece, data, first_line)


# ---------------------------------------------------------------------------------------------
# The fast path


@dataclass
class _Parsed:
    """What libcudf's reader found (GPUs), before the text columns are decoded: the loan ids, the number
    columns as one array (a row per column, blanks already -1), and the text columns as codes
    (a row per column) into one list of distinct texts (None: a blank), with ``used[c, k]``
    whether column ``c`` holds text ``k``."""

    ids: object
    numbers: list[str]
    number_values: object
    texts: list[str]
    uniques: list
    codes: object
    used: np.ndarray


def _fast(pieces: list[Piece], data: bytes | None, layout, columns, device, names) -> dict:
    """The typed columns (arrays) of ``pieces`` (or of ``data``, a piece's good lines);
    raises _Unclean."""
    if device != "gpu":
        values = _read_cpu(pieces, data, layout, columns, names)
        return empty_columns(columns, device) if values is None else values
    parsed = _read_gpu(pieces, data, layout, columns)
    if parsed is None:  # no line, or only blank ones
        return empty_columns(columns, device)
    values = {"loan_id": parsed.ids}
    values.update(zip(parsed.numbers, parsed.number_values, strict=True))
    if parsed.texts:
        decoded = decode(parsed.texts, parsed.uniques, parsed.codes, parsed.used, names)
        values.update(zip(parsed.texts, decoded, strict=True))
    return values


def decode(texts: list[str], uniques: list, codes, used, names=None):
    """The values of the text columns ``texts``: ``codes`` (a row per column) index
    ``uniques`` (None: a blank), ``used[c, k]`` says whether column ``c`` holds text ``k``. The
    texts a column holds are converted once each, and all columns are mapped in one lookup;
    raises _Unclean when a column holds a text that is not valid for it."""
    table = np.zeros((len(texts), max(len(uniques), 1)), np.int32)
    for row, name in enumerate(texts):
        for k in np.flatnonzero(used[row]):
            table[row, k] = text_value(name, uniques[k], names)
    if module_of(codes) is not np:
        return _lookup_gpu(table, codes)
    return np.take_along_axis(table, codes, axis=1)


def _lookup_gpu(table: np.ndarray, codes):
    """``table[c, codes[c, j]]`` for every row c and column j of ``codes`` (CuPy), by one
    libcudf gather."""
    import pylibcudf as plc

    from .features_gpu import INT32, gather, op

    columns, rows = codes.shape
    index = op(op(_column_numbers(columns, rows), "MUL", table.shape[1], INT32), "ADD",
               _plc_column(codes.reshape(-1)), INT32)
    (values,) = gather([plc.Column.from_array(np.ascontiguousarray(table).reshape(-1))], index)
    return _cupy(values).reshape(columns, rows)


def _column_numbers(columns: int, rows: int):
    """0 ``rows`` times, then 1 ``rows`` times, ... up to ``columns - 1`` (INT32)."""
    import pylibcudf as plc

    from .features_gpu import INT32, scalar

    numbers = plc.filling.sequence(columns, scalar(0, INT32), scalar(1, INT32))
    return plc.filling.repeat(plc.Table([numbers]), rows).columns()[0]


def used_texts(codes, count: int) -> np.ndarray:
    """``[c, k]``: whether row ``c`` of ``codes`` holds code ``k`` (on the host)."""
    if codes.size == 0:
        return np.zeros((codes.shape[0], count), bool)
    if module_of(codes) is not np:
        return _used_texts_gpu(codes, count)
    offsets = np.arange(codes.shape[0], dtype=codes.dtype)[:, None] * count
    seen = np.bincount((codes + offsets).ravel(), minlength=codes.shape[0] * count) > 0
    return seen.reshape(codes.shape[0], count)


def _used_texts_gpu(codes, count: int) -> np.ndarray:
    """:func:`used_texts` of CuPy ``codes``: the distinct (row, code) pairs, by libcudf."""
    import pylibcudf as plc

    columns, rows = codes.shape
    pairs = plc.stream_compaction.distinct(
        plc.Table([_column_numbers(columns, rows), _plc_column(codes.reshape(-1))]), [0, 1],
        plc.stream_compaction.DuplicateKeepOption.KEEP_ANY, plc.types.NullEquality.EQUAL,
        plc.types.NanEquality.ALL_EQUAL)
    row, code = (_cupy(column).get() for column in pairs.columns())
    seen = np.zeros((columns, count), bool)
    seen[row, code] = True
    return seen


def text_value(name: str, text: str | None, names=None) -> int:
    """The value of one text (None: a blank) of the text column ``name``; raises _Unclean
    when it is not valid for the column (a blank where the column needs a value)."""
    kind = schema.kind_of(name)
    value = BLANK[kind] if text is None else _convert(kind, name, text, names)
    if value is None:
        raise _Unclean(f"blank {name}" if text is None else f"bad value in {name}")
    return value


def _convert(kind: str, name: str, text: str, names):
    """The value of one non-blank text of a column, or None when it is not valid."""
    if kind in (PERIOD, DATE):
        return schema.month_number(text.strip())
    if kind == STATUS:
        if text.strip() in schema.STATUS_UNKNOWN:
            return MISSING
        return int(text) if _INTEGER.match(text) else None
    return schema.category_code(name, text, names)


def _kinds(columns):
    numbers = [c for c in columns if schema.kind_of(c) == NUMBER]
    texts = [c for c in columns if schema.kind_of(c) not in (ID, NUMBER)]
    return numbers, texts


def _byte_range(piece: Piece) -> tuple[int, int] | None:
    """libcudf's byte range for a piece: it reads the rows that start after the offset and
    no later than its end, so the offset is the newline before the piece."""
    size = os.path.getsize(piece.path)
    if piece.start == 0 and piece.stop >= size:
        return None
    offset = max(piece.start - 1, 0)
    return offset, 0 if piece.stop >= size else piece.stop - 1 - offset


def _read_gpu(pieces, data, layout, columns) -> _Parsed | None:
    import pylibcudf as plc

    by_name = {layout.classic[c]: c for c in columns}  # the reader names them as we do
    names = [by_name.get(name, f"_{i}") for i, name in enumerate(layout.names)] + [EXTRA]
    sources = [(data, None)] if data is not None else [(p.path, _byte_range(p)) for p in pieces]
    read = [read_csv_gpu(source, byte_range, names, columns) for source, byte_range in sources]
    order = read[0].column_names()
    table = (read[0].tbl if len(read) == 1 else
             plc.concatenate.concatenate([r.tbl for r in read]))
    del read
    found = dict(zip(order, table.columns(), strict=True))
    del table
    rows = found["loan_id"].size()
    if rows == 0:
        return None
    if found.pop(EXTRA).null_count() != rows:
        raise _Unclean("too many fields")
    ids = found.pop("loan_id")
    if ids.null_count():
        raise _Unclean("blank loan_id")
    numbers, texts = _kinds(columns)
    number_values = _numbers_gpu([found.pop(c) for c in numbers], rows)
    uniques, codes = _texts_gpu([found.pop(c) for c in texts], rows)
    import cudf

    return _Parsed(cudf.Series.from_pylibcudf(ids).values, numbers, number_values, texts,
                   uniques, codes, used_texts(codes, len(uniques)))


def read_csv_gpu(source, byte_range, names: list[str], columns):
    """libcudf's reader of a file's byte range (or of bytes): ``columns`` of the fields
    ``names``, the loan id as int64 and the rest as text, a blank as null."""
    import pylibcudf as plc

    begin, size = byte_range or (0, 0)
    options = (plc.io.csv.CsvReaderOptions.builder(plc.io.SourceInfo([source]))
               .byte_range_offset(begin).byte_range_size(size)
               .quoting(plc.io.types.QuoteStyle.NONE).skip_blank_lines(True)
               .keep_default_na(False).na_filter(True)
               .compression(plc.io.types.CompressionType.NONE).build())
    options.set_header(-1)
    options.set_names(names)
    options.set_delimiter("|")
    options.set_use_cols_names([*columns, EXTRA])
    text, integer = plc.DataType(plc.TypeId.STRING), plc.DataType(plc.TypeId.INT64)
    options.set_dtypes({c: integer if schema.kind_of(c) == ID else text for c in columns}
                       | {EXTRA: text})
    options.set_na_values([""])
    return plc.io.csv.read_csv(options)


def _numbers_gpu(columns, rows: int):
    """The number columns (text) as one float32 array, a row per column: checked and parsed
    in one call each over the columns stacked; a blank or NaN is MISSING."""
    import cupy
    import pylibcudf as plc

    if not columns:
        return cupy.empty((0, rows), cupy.float32)
    floats = plc.strings.convert.convert_floats
    tall = columns[0] if len(columns) == 1 else plc.concatenate.concatenate(columns)
    del columns
    every = plc.reduce.reduce(floats.is_float(tall), plc.aggregation.all(),
                              plc.DataType(plc.TypeId.BOOL8))
    if every.is_valid() and not every.to_py():  # not valid: every field blank
        raise _Unclean("a number is not one")
    single = plc.DataType(plc.TypeId.FLOAT32)
    parsed = plc.unary.cast(floats.to_floats(tall, plc.DataType(plc.TypeId.FLOAT64)), single)
    del tall
    missing = plc.Scalar.from_py(float(MISSING), single)
    parsed = plc.replace.replace_nulls(parsed, missing)
    parsed = plc.copying.copy_if_else(missing, parsed, plc.unary.is_nan(parsed))
    return _cupy(parsed).reshape(-1, rows)


def _texts_gpu(columns, rows: int):
    """(distinct texts, codes as int32 with a row per column) of the text columns, by one
    ``encode`` of the columns stacked. A blank is a text of its own, None."""
    import cudf
    import cupy
    import pylibcudf as plc

    if not columns:
        return [], cupy.empty((0, rows), cupy.int32)
    tall = columns[0] if len(columns) == 1 else plc.concatenate.concatenate(columns)
    del columns
    keys, codes = plc.transform.encode(plc.Table([tall]))
    uniques = cudf.Series.from_pylibcudf(keys.columns()[0]).to_arrow().to_pylist()
    return uniques, cudf.Series.from_pylibcudf(codes).values.reshape(-1, rows)


def _read_cpu(pieces, data, layout, columns, names) -> dict | None:
    """The typed columns (arrays) of one piece (or of ``data``) by pyarrow's reader: the loan
    ids as int64, the numbers as float64 then rounded to float32, each text column as a
    dictionary (its distinct texts, and an index per row), a flag column (N or Y) as
    booleans; None when there is no line. A piece is read where the file is mapped, not
    copied into memory first."""
    import pyarrow as pa

    if data is not None:
        return _typed_cpu(pa.py_buffer(data), layout, columns, names)
    (piece,) = pieces
    with pa.memory_map(piece.path) as mapped:
        mapped.seek(piece.start)
        return _typed_cpu(mapped.read_buffer(piece.nbytes), layout, columns, names)


def _typed_cpu(text, layout, columns, names) -> dict | None:
    """:func:`_read_cpu` of the lines in ``text`` (a pyarrow buffer); the arrays are the
    reader's own, none points into ``text``."""
    import pyarrow as pa

    flags = [c for c in columns if schema.kind_of(c) == CATEGORY
             and schema.VOCABULARIES.get(c) == FLAG]
    table = None
    try:
        if flags:
            try:
                table = _parse_cpu(text, layout, columns, flags)
            except pa.ArrowInvalid:  # maybe a flag column holds another text: read it as text
                pass
        if table is None:
            table = _parse_cpu(text, layout, columns, flags=())
    except pa.ArrowInvalid as exc:  # a field too many or too few, a number that is not one
        if str(exc).startswith("Empty CSV file"):  # no line, or only blank ones
            return None
        raise _Unclean(str(exc)) from None
    if table.num_rows == 0:
        return None
    found = {c: table.column(layout.classic[c]) for c in columns}
    ids = found["loan_id"]
    if ids.null_count:
        raise _Unclean("blank loan_id")
    values = {"loan_id": ids.to_numpy()}
    for name in columns:
        kind = schema.kind_of(name)
        if kind == NUMBER:
            values[name] = _number_values(found[name], table.num_rows)
        elif kind != ID:
            values[name] = _text_values(name, found[name], names)
    return values


def _parse_cpu(text, layout, columns, flags):
    """pyarrow's reader of ``columns`` of the lines in ``text``, on this thread: the loan id as
    int64, numbers as float64, the ``flags`` as booleans (Y true, N false: another text makes
    it fail), other texts as dictionaries, a blank as null. Booleans cost the reader less than
    a dictionary."""
    import pyarrow as pa
    from pyarrow import csv

    words = pa.dictionary(pa.int32(), pa.string())
    types = {layout.classic[c]: {ID: pa.int64(), NUMBER: pa.float64()}.get(
        schema.kind_of(c), pa.bool_() if c in flags else words) for c in columns}
    return csv.read_csv(
        pa.BufferReader(text),
        read_options=csv.ReadOptions(column_names=list(layout.names), use_threads=False),
        parse_options=csv.ParseOptions(delimiter="|", quote_char=False, ignore_empty_lines=True),
        convert_options=csv.ConvertOptions(
            column_types=types, null_values=[""], strings_can_be_null=True,
            true_values=[FLAG[1]], false_values=[FLAG[0]],
            include_columns=[layout.classic[c] for c in columns]),
    )


def _number_values(column, rows: int) -> np.ndarray:
    """A number column (float64, a blank null) as float32, a blank or NaN as MISSING."""
    import pyarrow.compute as pc

    if column.null_count == rows:  # every field blank, as most of the foreclosure fields
        return np.full(rows, MISSING, np.float32)
    out = np.empty(rows, np.float32)
    np.copyto(out, pc.fill_null(column, MISSING).to_numpy(), casting="same_kind")
    nan = np.isnan(out)  # a "NaN" in the text, blank as on GPUs
    if nan.any():
        out[nan] = MISSING
    return out


def _text_values(name: str, column, names) -> np.ndarray:
    """A text column (a dictionary array, or booleans for a flag, a blank null) as its values
    (int32): each distinct text is converted once, and one take maps the rows' indices to the
    values; raises _Unclean when the column holds a text that is not valid for it."""
    import pyarrow as pa

    if pa.types.is_boolean(column.type):  # a flag: index 0 is N, 1 is Y
        column = pa.DictionaryArray.from_arrays(
            column.cast(pa.int8()).combine_chunks(), pa.array(FLAG, pa.string()))
    else:
        column = column.combine_chunks()  # one dictionary for the whole column
    known = column.dictionary.to_pylist()
    table = [text_value(name, text, names) for text in known]
    indices = column.indices
    if column.null_count:  # a blank: the value after the texts'
        table.append(text_value(name, None, names))
        indices = indices.fill_null(len(known))
    return np.take(np.array(table, np.int32), indices.to_numpy())  # a writable array


def empty_columns(columns, device: str = "cpu") -> dict:
    """Arrays of no rows, of the dtypes :func:`read` gives the ``columns``."""
    xp = _array_module(device)
    return {c: xp.empty(0, dtype=DTYPES[schema.kind_of(c)]) for c in columns}


# ---------------------------------------------------------------------------------------------
# Before the ETL: the first lines of every file, and the last line of a plain one

BOM = b"\xef\xbb\xbf"


def check_start(plan) -> list[BadRow]:
    """The bad rows among the lines of each file of ``plan`` (a ``files.Plan``) that its first
    64 KiB hold, and its last line (a download cut short ends in a line cut short), found by
    the rules the ETL applies: a header row, a line with fields missing, text that is not
    UTF-8 are found in seconds, before the ETL's work, instead of at its end."""
    bad = []
    for path, layout, columns, seen in _files_to_check(plan):
        text = files.head(path)
        whole = len(text) < files.HEAD
        start = text if whole else text[:text.rfind(b"\n") + 1]
        _, found = _check_lines(start, layout, columns, seen)
        for index, reason in found:
            if index == 0 and text.startswith(BOM):
                reason += " (the file begins with a byte-order mark: save it without one)"
            bad.append(BadRow(path, index + 1, reason))
        if not whole and not files.compressed(path):
            bad += _check_last_line(path, layout, columns)
    return bad


def _files_to_check(plan):
    """(path, layout, columns the ETL reads, the loan ids seen) of each file: for acquisition
    files, whose loan ids are unique, a set shared by a quarter's files (a loan twice in a
    quarter, in one file or in two, is a bad row); None for the others."""
    if plan.layout is schema.CURRENT:
        columns = schema.PERFORMANCE_READ + schema.ACQUISITION_READ[1:]
    else:
        columns = schema.PERFORMANCE_READ
    paths = dict.fromkeys(piece.path for part in plan.parts for piece in part.pieces)
    for path in paths:
        yield path, plan.layout, columns, None
    checked = set()
    for group in plan.acquisitions.values():
        seen: set = set()
        for path in dict.fromkeys(group):
            if path not in checked:
                checked.add(path)
                yield path, schema.CLASSIC_ACQUISITION, schema.ACQUISITION_READ, seen


def _check_last_line(path: str, layout, columns) -> list[BadRow]:
    """The last line of a plain file, as a bad row if it is one (numbered only then: the
    count reads the whole file)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(max(0, size - files.HEAD))
        tail = f.read()
    body = tail[:-1] if tail.endswith(b"\n") else tail
    start = body.rfind(b"\n") + 1
    if start == 0:  # a last line longer than the tail: not one that was cut short
        return []
    _, found = _check_lines(body[start:], layout, columns, None)
    line = lines_before(path, size - len(tail) + start) + 1 if found else 0
    return [BadRow(path, line, reason) for _, reason in found]


# ---------------------------------------------------------------------------------------------
# The slow path


def _described(sources) -> str:
    """The pieces (or a block's piece) of ``sources``, for a message."""
    pieces = [source.piece if isinstance(source, Block) else source for source in sources]
    first = f"{pieces[0].path} (bytes {pieces[0].start}-{pieces[0].stop})"
    return first if len(pieces) == 1 else f"{first} and {len(pieces) - 1} more piece(s)"


def _slow_path(source: Piece | Block, layout, columns, device, names, seen):
    """(values, bad rows) of one piece (or block), line by line: ``seen``, the loan ids of the
    pieces before it where they must be unique, finds a loan repeated across pieces."""
    if isinstance(source, Block):
        piece, data, base = source.piece, source.data, source.first_line
    else:
        piece = source
        with open(piece.path, "rb") as f:
            f.seek(piece.start)
            data = f.read(piece.nbytes)
        base = lines_before(piece.path, piece.start)
    clean, bad_lines = _check_lines(data, layout, columns, seen)
    bad = [BadRow(piece.path, base + index + 1, reason) for index, reason in bad_lines]
    values = (_fast([piece], clean, layout, columns, device, names) if clean
              else empty_columns(columns, device))
    return values, bad


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

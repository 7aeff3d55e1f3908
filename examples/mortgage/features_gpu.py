"""features.py's steps on GPUs, as libcudf's precompiled operations (pylibcudf).

The NumPy code in features.py run on CuPy arrays would have CuPy compile a kernel for each
operation and dtype the first time a machine runs it: seconds per command, paid again in
every fresh container, CI runner or pod. Each call here is a kernel that libcudf ships
compiled, so a machine's first ETL costs what the next one does. The steps are those of
features.py, line for line; columns have no nulls unless said.
"""

from __future__ import annotations

import math

import pylibcudf as plc

from . import schema

_OP = plc.binaryop.BinaryOperator
BOOL = plc.DataType(plc.TypeId.BOOL8)
INT8 = plc.DataType(plc.TypeId.INT8)
INT32 = plc.DataType(plc.TypeId.INT32)
INT64 = plc.DataType(plc.TypeId.INT64)
FLOAT32 = plc.DataType(plc.TypeId.FLOAT32)
_FLOATS = {plc.TypeId.FLOAT32, plc.TypeId.FLOAT64}


def scalar(value, dtype: plc.DataType) -> plc.Scalar:
    """``value`` as a device scalar of ``dtype``."""
    if dtype.id() in _FLOATS:
        value = float(value)
    elif dtype.id() == plc.TypeId.BOOL8:
        value = bool(value)
    else:
        value = int(value)
    return plc.Scalar.from_py(value, dtype)


def op(lhs, operator: str, rhs, dtype: plc.DataType) -> plc.Column:
    """``lhs OPERATOR rhs`` as a column of ``dtype``; a number takes the other side's type.
    ``operator`` names a ``BinaryOperator`` (``"LESS"``, ``"ADD"``, ...)."""
    if not isinstance(lhs, plc.Column):
        lhs = scalar(lhs, rhs.type())
    if not isinstance(rhs, plc.Column):
        rhs = scalar(rhs, lhs.type())
    return plc.binaryop.binary_operation(lhs, rhs, getattr(_OP, operator), dtype)


def cast(column: plc.Column, dtype: plc.DataType) -> plc.Column:
    return column if column.type() == dtype else plc.unary.cast(column, dtype)


def gather(columns: list, rows: plc.Column, nullify: bool = False) -> list:
    """``columns`` at ``rows``; with ``nullify``, a row out of bounds gives a null."""
    policy = (plc.copying.OutOfBoundsPolicy.NULLIFY if nullify
              else plc.copying.OutOfBoundsPolicy.DONT_CHECK)
    return plc.copying.gather(plc.Table(list(columns)), rows, policy).columns()


def ascending(columns: list) -> tuple[list, list]:
    """The order and null order arguments of a sort or search by ``columns``."""
    return ([plc.types.Order.ASCENDING] * len(columns),
            [plc.types.NullOrder.BEFORE] * len(columns))


def search(haystack: plc.Column, needles: plc.Column) -> plc.Column:
    """NumPy's ``searchsorted(haystack, needles)`` (the first position, INT32)."""
    return plc.search.lower_bound(plc.Table([haystack]), plc.Table([needles]),
                                  *ascending([haystack]))


def clip(column: plc.Column, high: int) -> plc.Column:
    """``column`` with values above ``high`` set to ``high``."""
    low = scalar(0, column.type())
    return plc.replace.clamp(column, low, scalar(high, column.type()))


def shifted(column: plc.Column) -> tuple[plc.Column, plc.Column]:
    """``(column[:-1], column[1:])``, views."""
    n = column.size()
    return tuple(plc.copying.slice(column, [0, n - 1, 1, n]))


def every(flags: plc.Column) -> bool:
    """Whether every one of ``flags`` is set (True for none)."""
    if flags.size() == 0:
        return True
    return bool(plc.reduce.reduce(flags, plc.aggregation.all(), BOOL).to_py())


def ordered(loan: plc.Column, month: plc.Column) -> bool:
    """Whether rows are in strictly increasing (loan, month) order, as in the files."""
    if loan.size() < 2:
        return True
    loan_before, loan_after = shifted(loan)
    month_before, month_after = shifted(month)
    same_loan = op(loan_after, "EQUAL", loan_before, BOOL)
    later = op(same_loan, "LOGICAL_AND", op(month_after, "GREATER", month_before, BOOL), BOOL)
    return every(op(op(loan_after, "GREATER", loan_before, BOOL), "LOGICAL_OR", later, BOOL))


def performance_features(loan, month, status, balance) -> dict:
    """The per-loan features and the label (features.py's ``performance_features``) of the
    rows' ``loan_id``, month number, delinquency status and unpaid balance, as columns in the
    rows' own order."""
    bad = op(op(status, "GREATER", schema.LABEL_STATUS_ABOVE, BOOL), "LOGICAL_OR",
             op(balance, "EQUAL", 0, BOOL), BOOL)
    order = None
    if not ordered(loan, month):  # bad rows last among equal (loan, month): rows before see them
        keys = [loan, month, cast(bad, INT8)]
        order = plc.sorting.stable_sorted_order(plc.Table(keys), *ascending(keys))
        loan, month, status, bad = gather([loan, month, status, bad], order)
    columns = loan_features(loan, month, status, bad)
    if order is not None:  # back to the rows' own order
        placed = plc.Table(list(columns.values()))
        columns = dict(zip(columns, plc.copying.scatter(placed, order, placed).columns(),
                           strict=True))
    return columns


def loan_features(loan, month, status, bad) -> dict:
    """features.py's ``_loan_features``: rows in (loan, month) order; a binary search in the
    running count of flagged rows finds each loan's first row 30, 90 or 180 days behind and
    each row's next bad row."""
    n = loan.size()
    dtypes = {}
    for name in schema.THRESHOLDS:
        dtypes |= {f"ever_{name}": INT8, f"delinquency_{name}": FLOAT32}
    dtypes[schema.LABEL] = INT8
    if n == 0:
        return {name: plc.column_factories.make_empty_column(t) for name, t in dtypes.items()}
    new_loan = plc.Column.from_scalar(scalar(True, BOOL), 1)
    if n > 1:
        before, after = shifted(loan)
        new_loan = plc.concatenate.concatenate(
            [new_loan, op(after, "NOT_EQUAL", before, BOOL)])
    run = op(running_count(new_loan), "SUB", 1, INT32)  # each row's loan, numbered from 0
    rows = plc.filling.sequence(n, scalar(0, INT32), scalar(1, INT32))
    (starts,) = kept(plc.Table([rows]), new_loan).columns()
    # loan k's rows: starts[k] <= row < ends[k]
    ends = plc.concatenate.concatenate([plc.copying.slice(starts, [1, starts.size()])[0],
                                        plc.Column.from_scalar(scalar(n, INT32), 1)])
    out = {}
    for name, threshold in schema.THRESHOLDS.items():
        first = first_flagged(op(status, "GREATER_EQUAL", threshold, BOOL), starts)
        found = op(first, "LESS", ends, BOOL)
        (month_found,) = gather([month], clip(first, n - 1))
        when = plc.copying.copy_if_else(cast(month_found, FLOAT32), scalar(math.nan, FLOAT32),
                                        found)
        out[f"ever_{name}"], out[f"delinquency_{name}"] = gather([cast(found, INT8), when], run)
    following = first_flagged(bad)  # the next bad row, maybe this one
    (loan_end,) = gather([ends], run)
    (month_following,) = gather([month], clip(following, n - 1))
    soon = op(op(month_following, "SUB", month, month.type()), "LESS", schema.LABEL_WINDOW, BOOL)
    within = op(op(following, "LESS", loan_end, BOOL), "LOGICAL_AND", soon, BOOL)
    out[schema.LABEL] = cast(within, INT8)
    return {name: out[name] for name in dtypes}


def kept(table: plc.Table, mask: plc.Column) -> plc.Table:
    """The rows of ``table`` where ``mask`` is true: libcudf's ``apply_retention_mask``, or
    ``apply_boolean_mask``, its name before (which warns of its deprecation where both are)."""
    compaction = plc.stream_compaction
    keep = getattr(compaction, "apply_retention_mask", None) or compaction.apply_boolean_mask
    return keep(table, mask)


def running_count(flags: plc.Column) -> plc.Column:
    """NumPy's ``cumsum`` of boolean ``flags``, as INT32."""
    return plc.reduce.scan(cast(flags, INT32), plc.aggregation.sum(),
                           plc.reduce.ScanType.INCLUSIVE)


def first_flagged(flags: plc.Column, at: plc.Column | None = None) -> plc.Column:
    """For each row of ``at`` (each row when None), the first row at or after it whose flag
    is set (``len(flags)`` when none)."""
    flags = cast(flags, INT32)
    count = running_count(flags)
    count_at, flags_at = (count, flags) if at is None else gather([count, flags], at)
    return search(count, op(op(count_at, "SUB", flags_at, INT32), "ADD", 1, INT32))


def acquisition_table(ids: plc.Column, columns: list) -> plc.Table:
    """The loan ids (INT64) and ``columns`` as FLOAT32 (a null as NaN), rows in id order (the
    first of equal ids first)."""
    ids = cast(ids, INT64)
    order = plc.sorting.stable_sorted_order(plc.Table([ids]), *ascending([ids]))
    values = [plc.replace.replace_nulls(cast(c, FLOAT32), scalar(math.nan, FLOAT32))
              if c.null_count() else cast(c, FLOAT32) for c in columns]
    return plc.copying.gather(plc.Table([ids, *values]), order,
                              plc.copying.OutOfBoundsPolicy.DONT_CHECK)


def join(ids: plc.Column, values: list, keys: plc.Column) -> list:
    """For each of ``keys``, ``values`` of its loan in the id-ordered ``ids`` (the first of
    equal ids), or MISSING where no loan has that id."""
    count = ids.size()
    keys = cast(keys, INT64)
    if count == 0:
        return [plc.Column.from_scalar(scalar(schema.MISSING, FLOAT32), keys.size())
                for _ in values]
    at = search(ids, keys)
    (found,) = gather([ids], clip(at, count - 1))
    rows = plc.copying.copy_if_else(at, scalar(count, at.type()),
                                    op(found, "EQUAL", keys, BOOL))
    missing = scalar(schema.MISSING, FLOAT32)
    return [plc.replace.replace_nulls(column, missing)
            for column in gather(values, rows, nullify=True)]

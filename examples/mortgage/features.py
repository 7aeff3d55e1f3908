"""The classic notebook's transformations on one partition, one code for pandas and cuDF.

Every loan is whole inside one partition (the files are cut at loan boundaries), so the
per-loan features and the forward-looking label need no shuffle between workers.

- **per loan**: ``ever_30/90/180``, whether the loan was ever 30, 90 or 180 days behind, and
  ``delinquency_30/90/180``, the first month it was (the notebook's group-by, here a binary
  search among the flagged rows from each loan's first row, the loan's rows being consecutive:
  a few array calls whatever the partition, on NumPy or CuPy);
- **the label** ``delinquency_12``: for a row at month T, 1 when among the loan's rows of
  months T..T+11 the delinquency status exceeds 3 or the unpaid balance is exactly 0. The
  notebook computes it with twelve group-by passes over shifted windows; here the running count
  of "bad" rows finds, for every row, the loan's next one;
- **the feature table**: each row with its loan's acquisition fields, the 45 features as
  float32 (missing: -1, as the reader writes a blank) and the label as int32.

On GPUs the same steps run as libcudf's precompiled operations (features_gpu.py): written on
CuPy arrays, each would be a kernel compiled on a machine's first run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from . import schema

STATUS = "current_loan_delinquency_status"
PERIOD = "monthly_reporting_period"


def module_of(obj):
    """The library ``obj`` comes from: cudf or pandas for a frame, cupy or numpy for an array,
    so one code calls the right ``DataFrame``, ``concat`` or ``where``."""
    return importlib.import_module(type(obj).__module__.split(".")[0])


def filled(series, value):
    """``series`` with its missing values as ``value``. On cuDF through libcudf's
    ``replace_nulls``: cuDF's ``fillna`` first builds a device column of the value and checks
    that it can be cast to the column's type, and the feature table fills every column."""
    if not hasattr(series, "to_pylibcudf"):
        return series.fillna(value)
    if not series.has_nulls:
        return series
    import pylibcudf as plc

    column, metadata = series.to_pylibcudf()
    value = float(value) if series.dtype.kind == "f" else int(value)
    replaced = plc.replace.replace_nulls(column, plc.Scalar.from_py(value, column.type()))
    return type(series).from_pylibcudf(replaced, metadata)


def _values(series, na=np.nan):
    """A column's values as a CuPy (cuDF) or NumPy (pandas) array, missing as ``na``."""
    if hasattr(series, "to_pylibcudf"):
        return filled(series, na).values
    return series.to_numpy(na_value=na)


def _plain_index(frame) -> bool:
    """Whether rows are numbered 0, 1, ... already (then no copy is made to renumber them)."""
    index = frame.index
    return type(index).__name__ == "RangeIndex" and index.start == 0 and index.step == 1


def _array(series):
    """A column's values as a CuPy (cuDF) or NumPy (pandas) array (a column without nulls)."""
    return series.values if hasattr(series, "to_pylibcudf") else series.to_numpy()


def _ordered(loan, month) -> bool:
    if len(loan) < 2:
        return True
    step = loan[1:] - loan[:-1]
    return bool(((step > 0) | ((step == 0) & (month[1:] > month[:-1]))).all())


def on_gpu(frame) -> bool:
    """Whether ``frame`` (or a Series) is cuDF's."""
    return hasattr(frame, "to_pylibcudf")


def _column(series):
    """A cuDF Series' libcudf column (a view)."""
    return series.to_pylibcudf()[0]


def in_order(perf) -> bool:
    """Whether rows are in strictly increasing (loan, month) order, as in the files."""
    if on_gpu(perf):
        from . import features_gpu

        return features_gpu.ordered(_column(perf["loan_id"]), _column(perf[PERIOD]))
    return _ordered(_array(perf["loan_id"]), _array(perf[PERIOD]).astype("int64"))


def performance_features(perf):
    """``perf`` with ever_30/90/180 (int8), delinquency_30/90/180 (float32 month numbers,
    NaN when never) and the label delinquency_12 (int8), rows in their original order."""
    if on_gpu(perf):
        return _performance_features_gpu(perf)
    loan = _array(perf["loan_id"])
    month = _array(perf[PERIOD]).astype("int64")
    status = _array(perf[STATUS])
    # a blank balance is -1, not 0
    bad = (status > schema.LABEL_STATUS_ABOVE) | (_array(perf["current_actual_upb"]) == 0)
    xp = module_of(loan)
    order = None
    if not _ordered(loan, month):  # bad rows last among equal (loan, month): rows before see them
        order = xp.lexsort(xp.stack([bad.astype(xp.int64), month, loan.astype(xp.int64)]))
        loan, month, status, bad = loan[order], month[order], status[order], bad[order]
    columns = _loan_features(xp, loan, month, status, bad)
    work = perf if _plain_index(perf) else perf.reset_index(drop=True)
    for name, values in columns.items():
        if order is not None:  # back to the rows' own order
            values, placed = xp.empty_like(values), values
            values[order] = placed
        work[name] = values
    return work


def _performance_features_gpu(perf):
    from . import features_gpu

    inputs = [_column(perf[c]) for c in ("loan_id", PERIOD, STATUS, "current_actual_upb")]
    columns = features_gpu.performance_features(*inputs)
    work = perf if _plain_index(perf) else perf.reset_index(drop=True)
    series = type(perf["loan_id"])
    for name, column in columns.items():
        work[name] = series.from_pylibcudf(column)
    return work


def _loan_features(xp, loan, month, status, bad) -> dict:
    """The per-loan features and the label of rows in (loan, month) order, as arrays.

    Every loan's rows are consecutive: per loan, a search among the flagged rows gives the
    first month 30, 90 or 180 days behind, repeated over the loan's rows; per row, the running
    count of bad rows gives the next bad month."""
    n = len(loan)
    if n == 0:
        empty = {f"ever_{t}": xp.int8 for t in schema.THRESHOLDS}
        empty |= {f"delinquency_{t}": xp.float32 for t in schema.THRESHOLDS}
        return {name: xp.empty(0, dtype) for name, dtype in
                {**empty, schema.LABEL: xp.int8}.items()}
    new_loan = xp.ones(n, dtype=bool)
    new_loan[1:] = loan[1:] != loan[:-1]
    starts = xp.flatnonzero(new_loan)
    # loan k's rows: starts[k] <= row < ends[k]
    ends = xp.concatenate([starts[1:], xp.full(1, n, dtype=starts.dtype)])
    rows = ends - starts
    out = {}
    for name, threshold in schema.THRESHOLDS.items():
        first = _first_flagged(xp, status >= threshold, starts)
        found = first < ends
        when = xp.where(found, month[xp.minimum(first, n - 1)].astype(xp.float32), xp.nan)
        out[f"ever_{name}"] = xp.repeat(found.astype(xp.int8), rows)
        out[f"delinquency_{name}"] = xp.repeat(when.astype(xp.float32), rows)
    following = _next_flagged(xp, bad)  # the next bad row, maybe this one
    within = (following < xp.repeat(ends, rows)) & (
        month[xp.minimum(following, n - 1)] - month < schema.LABEL_WINDOW)
    out[schema.LABEL] = within.astype(xp.int8)
    return out


def _flagged(xp, flags):
    """The indices whose flag is set, in order, then ``len(flags)`` (the answer of "none")."""
    return xp.concatenate([xp.flatnonzero(flags), xp.full(1, len(flags), dtype=xp.intp)])


def _first_flagged(xp, flags, at):
    """For each index of ``at``, the first index at or after it whose flag is set (``len``
    when none): a binary search among the flagged indices."""
    flagged = _flagged(xp, flags)
    return flagged[xp.searchsorted(flagged, at)]


def _next_flagged(xp, flags):
    """For every index, the first index at or after it whose flag is set (``len`` when
    none), without a search: an index with k flags set before it finds its answer at
    position k of the flagged indices in order."""
    return _flagged(xp, flags)[xp.cumsum(flags) - flags]


@dataclass
class Acquisitions:
    """A quarter's acquisition fields, ready to join. On CPUs the loan ids in order (``ids``),
    and the features as one float32 array (``values``), a row per column of ``ACQUIRED`` and a
    column per loan, then a last column of MISSING for rows whose loan has no acquisition row.
    On GPUs ``table``: a cuDF frame of the loan ids and the features as float32, in id order."""

    ids: object = None
    values: object = None
    table: object = None

    def rows_of(self, loan_id):
        """For each of ``loan_id``, its column in ``values`` (the first of equal ids)."""
        found, lengths = self._runs(loan_id)
        return module_of(found).repeat(found, lengths)

    def features_of(self, loan_id):
        """The acquired features of each of ``loan_id`` (CPUs): ``values``' column of its
        loan, a row per feature; each run's column is repeated over the run, not gathered
        row by row."""
        found, lengths = self._runs(loan_id)
        return np.repeat(self.values[:, found], lengths, axis=1)

    def _runs(self, loan_id):
        """(the column in ``values`` of each run of equal ids in ``loan_id``, the runs'
        lengths): one search per run, since a loan's rows are consecutive in the files."""
        keys = _values(loan_id, -1).astype("int64", copy=False)
        xp, count = module_of(keys), len(self.ids)
        if len(keys) == 0:
            return xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.int64)
        starts = xp.flatnonzero(xp.concatenate([xp.ones(1, dtype=bool), keys[1:] != keys[:-1]]))
        lengths = xp.diff(xp.concatenate([starts, xp.full(1, len(keys))]))
        if count == 0:  # no acquisition rows: every loan's column is the last, of MISSING
            return xp.zeros(len(starts), dtype=xp.int64), lengths
        firsts = keys[starts]
        at = xp.minimum(xp.searchsorted(self.ids, firsts), count - 1)
        return xp.where(self.ids[at] == firsts, at, count), lengths


ACQUIRED = schema.ACQUISITION_READ[1:]  # the acquisition fields that are features


def acquisitions(frame) -> Acquisitions:
    """The join-ready form of an acquisition frame as read (a row per loan)."""
    if on_gpu(frame):
        from . import features_gpu

        table = features_gpu.acquisition_table(_column(frame["loan_id"]),
                                               [_column(frame[name]) for name in ACQUIRED])
        return Acquisitions(table=type(frame).from_pylibcudf(
            table, {"columns": ["loan_id", *ACQUIRED]}))
    ids = _values(frame["loan_id"], -2).astype("int64")
    xp = module_of(ids)
    order = xp.argsort(ids, kind="stable") if xp is np else xp.argsort(ids)
    values = xp.full((len(ACQUIRED), len(ids) + 1), schema.MISSING, dtype=xp.float32)
    for row, name in enumerate(ACQUIRED):
        values[row, :-1] = _values(frame[name]).astype(xp.float32)[order]
    return Acquisitions(ids[order], values)


def feature_table(perf, acq: Acquisitions):
    """The feature table of ``perf`` (with :func:`performance_features`) joined to ``acq``:
    the 45 features as float32 (missing: -1) and delinquency_12 as int32, a row per ``perf``
    row in its order. On CPUs each column is an array of its own, written once: the acquired
    features by repeating each loan's acquisition values over its rows, ``perf``'s converted
    or copied (a copy: the table's arrays are its own, writable, whatever shares ``perf``'s),
    and ``perf``'s columns are taken out as they are used, to free memory."""
    if on_gpu(perf):
        return _feature_table_gpu(perf, acq)
    acquired = acq.features_of(perf["loan_id"])  # a row per feature
    where = {name: k for k, name in enumerate(ACQUIRED)}
    out = {name: acquired[where[name]] if name in where else
           np.array(_values(perf.pop(name)), dtype=np.float32) for name in schema.FEATURES}
    out[schema.LABEL] = np.array(_values(perf.pop(schema.LABEL), 0), dtype=np.int32)
    return module_of(perf).DataFrame(out, copy=False)


def _feature_table_gpu(perf, acq: Acquisitions):
    import pylibcudf as plc

    from . import features_gpu as gpu

    joined = gpu.join(_column(acq.table["loan_id"]), [_column(acq.table[name]) for name in ACQUIRED],
                      _column(perf["loan_id"]))
    acquired = dict(zip(ACQUIRED, joined, strict=True))
    out = [acquired[name] if name in acquired else
           gpu.cast(_column(filled(perf.pop(name), np.nan)), gpu.FLOAT32)
           for name in schema.FEATURES]
    out.append(gpu.cast(_column(filled(perf.pop(schema.LABEL), 0)), gpu.INT32))
    return type(perf).from_pylibcudf(plc.Table(out), {"columns": [*schema.FEATURES, schema.LABEL]})


def meta():
    """An empty feature table (pandas): the ETL output's columns and dtypes."""
    import pandas as pd

    return pd.DataFrame({**{name: pd.Series([], dtype="float32") for name in schema.FEATURES},
                         schema.LABEL: pd.Series([], dtype="int32")})

"""The classic notebook's transformations on one partition, one code for pandas and cuDF.

Every loan is whole inside one partition (the files are cut at loan boundaries), so the
per-loan features and the forward-looking label need no shuffle between workers.

- **per loan**: ``ever_30/90/180``, whether the loan was ever 30, 90 or 180 days behind, and
  ``delinquency_30/90/180``, the first month it was (one group-by over the partition's loans,
  gathered back to their rows);
- **the label** ``delinquency_12``: for a row at month T, 1 when among the loan's rows of
  months T..T+11 the delinquency status exceeds 3 or the unpaid balance is exactly 0. The
  notebook computes it with twelve group-by passes over shifted windows; here one reverse
  running minimum gives, for every row, the month of the loan's next "bad" row;
- **the feature table**: each row with its loan's acquisition fields, the 45 features as
  float32 (missing: -1) and the label as int32.
"""

from __future__ import annotations

import importlib

import numpy as np

from . import schema

_LOAN_SHIFT = 2**20  # month numbers (year * 12 + month) are far below 2**20
_NEVER = 2**62
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


def _bad(perf):
    """Rows that make the label 1 for the twelve months that end with them."""
    balance = filled(perf["current_actual_upb"], -1)  # a blank balance is not 0
    return (perf[STATUS] > schema.LABEL_STATUS_ABOVE) | (balance == 0)


def in_order(perf) -> bool:
    """Whether rows are in strictly increasing (loan, month) order, as in the files."""
    if len(perf) < 2:
        return True
    loan, month = perf["loan_id"].diff(), perf[PERIOD].astype("int64").diff()
    return bool(((loan > 0) | ((loan == 0) & (month > 0))).iloc[1:].all())


def performance_features(perf):
    """``perf`` with ever_30/90/180 (int8), delinquency_30/90/180 (float32 month numbers,
    NaN when never) and the label delinquency_12 (int8), rows in their original order."""
    work = perf if _plain_index(perf) else perf.reset_index(drop=True)
    ordered = in_order(work)
    if not ordered:  # bad rows last among equal (loan, month), so the rows before see them
        work = work.assign(_bad=_bad(work).astype("int8"))
        work = work.sort_values(["loan_id", PERIOD, "_bad"]).drop(columns="_bad")
    month = work[PERIOD].astype("int64")
    new_loan = filled(work["loan_id"].diff(), 1) != 0
    run = new_loan.astype("int64").cumsum() - 1  # the loan's place among the partition's
    key = run * _LOAN_SHIFT + month
    next_bad = key.where(_bad(work), _NEVER).iloc[::-1].cummin().iloc[::-1]
    label = (_values(next_bad) - _values(key)) < schema.LABEL_WINDOW

    status = work[STATUS]
    per_row = work[[]].assign(
        run=run, worst=status,
        **{f"m{name}": month.where(status >= threshold)
           for name, threshold in schema.THRESHOLDS.items()})
    aggregations = {"worst": "max", **{f"m{name}": "min" for name in schema.THRESHOLDS}}
    loans = per_row.groupby("run", sort=True).agg(aggregations)  # row i: the loan of run i
    at = _values(run, -1)
    for name, threshold in schema.THRESHOLDS.items():
        work[f"ever_{name}"] = _values((loans["worst"] >= threshold).astype("int8"), 0)[at]
    for name in schema.THRESHOLDS:
        work[f"delinquency_{name}"] = _values(loans[f"m{name}"].astype("float32"))[at]
    work[schema.LABEL] = label.astype("int8")
    return work if ordered else work.sort_index()


def acquisition_rows(loan_id, acq_loan_id):
    """For each performance row, the row of its loan in the acquisitions; ``len(acq)`` for
    none (the first of equal ids when an id repeats)."""
    keys = _values(loan_id, -1).astype("int64")
    ids = _values(acq_loan_id, -2).astype("int64")
    xp = module_of(keys)
    if len(ids) == 0:
        return xp.zeros(len(keys), dtype=xp.int64)
    order = xp.argsort(ids, kind="stable") if xp is np else xp.argsort(ids)
    ordered = ids[order]
    at = xp.minimum(xp.searchsorted(ordered, keys), len(ids) - 1)
    return xp.where(ordered[at] == keys, order[at], len(ids))


def _features(series):
    """A feature column as float32, missing (null or NaN) as -1."""
    values = _values(series if series.dtype == "float32" else series.astype("float32"))
    xp = module_of(values)
    return xp.where(xp.isnan(values), xp.float32(schema.MISSING), values)


def feature_table(perf, acq):
    """The feature table of ``perf`` (with :func:`performance_features`) joined to ``acq``:
    the 45 features as float32 (missing: -1) and delinquency_12 as int32, a row per ``perf``
    row in its order. ``perf``'s columns are taken out as they are used, to free memory."""
    at = acquisition_rows(perf["loan_id"], acq["loan_id"])
    xp = module_of(at)
    out = {}
    for name in schema.FEATURES:
        if name in perf.columns:
            out[name] = _features(perf.pop(name))
        else:  # the loan's value; a loan without an acquisition row gets the missing value
            values = xp.concatenate([_features(acq[name]), xp.full(1, schema.MISSING,
                                                                     xp.float32)])
            out[name] = values[at]
    out[schema.LABEL] = _values(perf.pop(schema.LABEL), 0).astype("int32")
    if xp is np:
        return module_of(perf).DataFrame(out)
    return module_of(perf).DataFrame(out, nan_as_null=False)  # no NaN left: skip cuDF's count


def meta():
    """An empty feature table (pandas): the ETL output's columns and dtypes."""
    import pandas as pd

    return pd.DataFrame({**{name: pd.Series([], dtype="float32") for name in schema.FEATURES},
                         schema.LABEL: pd.Series([], dtype="int32")})

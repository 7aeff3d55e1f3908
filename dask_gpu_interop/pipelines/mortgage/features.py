"""The classic notebook's transformations, on one partition (pandas or cuDF, the same code).

Every loan is whole inside one partition (the reader splits files at loan boundaries), so the
per-loan features and the forward-looking label need no shuffle between workers.

The label: for a row at month T, ``delinquency_12`` is 1 when among the loan's rows in months
T..T+11 the delinquency status exceeds 3 or the unpaid balance is exactly 0. The notebook
computes it with twelve group-by passes over shifted windows; here one reverse running
minimum gives, for every row, the month of the loan's next "bad" row, in one pass.
"""

from __future__ import annotations

from . import schema

_LOAN_SHIFT = 2**20  # month numbers (year * 12 + month) are far below 2**20
_NEVER = 2**62
STATUS = "current_loan_delinquency_status"
PERIOD = "monthly_reporting_period"


def _bad(perf):
    """Rows that make the label 1 for the twelve months that end with them."""
    # fillna: a blank balance is not 0, and cuDF's | would propagate the null
    return (perf[STATUS] > schema.LABEL_STATUS_ABOVE) | (perf["current_actual_upb"].fillna(-1) == 0)


def _sorted_by_loan_and_month(frame) -> bool:
    """True when rows are in strictly increasing (loan, month) order (as in the real files)."""
    if len(frame) < 2:
        return True
    loan = frame["loan_id"].diff().iloc[1:]
    month = frame[PERIOD].diff().iloc[1:]
    return bool(((loan > 0) | ((loan == 0) & (month > 0))).all())


def performance_features(perf):
    """Add ever_30/90/180 (int8), delinquency_30/90/180 (first month at 30/90/180+ days behind,
    a float32 month number, missing when never) and the label delinquency_12 (int8)."""
    work = perf.reset_index(drop=True)
    in_order = _sorted_by_loan_and_month(work)
    if not in_order:  # bad rows last among equal (loan, month), so that the rows before them
        work = work.assign(_bad=_bad(work).astype("int8"))  # see them
        work = work.sort_values(["loan_id", PERIOD, "_bad"]).drop(columns="_bad")
    status = work[STATUS]
    month = work[PERIOD].astype("int64")
    new_loan = work["loan_id"].diff().fillna(1) != 0
    key = new_loan.astype("int64").cumsum() * _LOAN_SHIFT + month
    next_bad = key.where(_bad(work), _NEVER).iloc[::-1].cummin().iloc[::-1]
    label = (next_bad.values - key.values) < schema.LABEL_WINDOW

    out = work.copy()
    worst = work.groupby("loan_id")[STATUS].transform("max")
    for name, threshold in schema.THRESHOLDS.items():
        out[f"ever_{name}"] = (worst >= threshold).astype("int8")
    for name, threshold in schema.THRESHOLDS.items():
        first = work[["loan_id"]].assign(_m=work[PERIOD].where(status >= threshold))
        out[f"delinquency_{name}"] = (
            first.groupby("loan_id")["_m"].transform("min").astype("float32")
        )
    out[schema.LABEL] = label.astype("int8")
    if not in_order:
        out = out.sort_index()
    return out


def join_acquisition(perf, acq):
    """Each performance row with its loan's acquisition fields (missing when there are none);
    rows keep their order (a hash join may not)."""
    perf = perf.reset_index(drop=True).reset_index()  # the row number as column "index"
    joined = perf.merge(acq, on="loan_id", how="left")
    return joined.sort_values("index").drop(columns="index").reset_index(drop=True)


def last_mile(frame):
    """The feature table: the 45 features as float32 (missing: -1), the label as int32."""
    out = frame[list(schema.FEATURES)].astype("float32")
    out = out.fillna(schema.MISSING)
    out = out.where(out == out, schema.MISSING)  # NaN as well as null (cuDF keeps both)
    out[schema.LABEL] = frame[schema.LABEL].astype("int32")
    return out

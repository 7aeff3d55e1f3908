"""The GPU features (pylibcudf calls) compute what the NumPy features compute.

Run here on a NumPy stand-in for pylibcudf (tests/examples/numpy_pylibcudf.py); the GPU tests
compare the real thing with the CPU path on whole files.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from examples.mortgage import features, read, schema

from . import numpy_pylibcudf

PERIOD, STATUS = features.PERIOD, features.STATUS


@pytest.fixture
def gpu(monkeypatch):
    return numpy_pylibcudf.install(monkeypatch)


def _perf(rng, loans: int, shuffle: bool, repeat_months: bool):
    """Performance rows as read: a few months per loan with gaps, statuses 0-7 or missing,
    some zero balances; optionally rows out of order and months given twice."""
    rows = []
    for loan in rng.choice(10**9, loans, replace=False):
        months = np.cumsum(rng.integers(1, 4, rng.integers(1, 30))) + 2005 * 12
        if repeat_months and len(months) > 2:
            months[1] = months[0]
        for month in months:
            status = -1 if rng.random() < 0.05 else int(rng.choice(8, p=[.6] + [.4 / 7] * 7))
            balance = 0.0 if rng.random() < 0.03 else float(rng.integers(-1, 500))
            rows.append((loan, month, status, balance))
    frame = pd.DataFrame(rows, columns=["loan_id", PERIOD, STATUS, "current_actual_upb"])
    if shuffle:
        frame = frame.sample(frac=1.0, random_state=int(rng.integers(100)))
    frame = frame.reset_index(drop=True)
    return frame.astype({"loan_id": "int64", PERIOD: read.DTYPES[schema.PERIOD],
                         STATUS: read.DTYPES[schema.STATUS], "current_actual_upb": "float32"})


def _columns(gpu, frame, names):
    return [numpy_pylibcudf.Column(frame[name].to_numpy()) for name in names]


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
@pytest.mark.parametrize("repeat_months", [False, True], ids=["", "months twice"])
def test_the_gpu_features_are_the_numpy_features(gpu, shuffle, repeat_months):
    rng = np.random.default_rng(7 + shuffle + 2 * repeat_months)
    frame = _perf(rng, 300, shuffle, repeat_months)
    want = features.performance_features(frame.copy())
    got = gpu.performance_features(
        *_columns(gpu, frame, ["loan_id", PERIOD, STATUS, "current_actual_upb"]))
    assert list(got) == [c for c in want.columns if c not in frame.columns]
    assert want[schema.LABEL].between(0, 1).all() and want[schema.LABEL].any()
    for name, column in got.items():
        assert column.null_count() == 0, name
        np.testing.assert_array_equal(column.values, want[name].to_numpy(), err_msg=name)
        assert column.values.dtype == want[name].dtype, name


def test_the_gpu_order_check_is_the_numpy_one(gpu):
    loan = np.array([1, 1, 2, 2, 3], np.int64)
    for month in ([5, 6, 1, 2, 0], [5, 5, 1, 2, 0], [6, 5, 1, 2, 0]):
        month = np.array(month, np.int32)
        want = features._ordered(loan, month.astype("int64"))
        assert gpu.ordered(numpy_pylibcudf.Column(loan), numpy_pylibcudf.Column(month)) is want
    assert gpu.ordered(numpy_pylibcudf.Column(loan[::-1]), numpy_pylibcudf.Column(np.zeros(5, np.int32))) is False
    assert gpu.ordered(numpy_pylibcudf.Column(loan[:1]), numpy_pylibcudf.Column(np.zeros(1, np.int32)))


def test_no_rows_give_empty_columns_of_the_numpy_dtypes(gpu):
    frame = _perf(np.random.default_rng(0), 3, False, False).iloc[:0]
    want = features.performance_features(frame.copy())
    got = gpu.performance_features(
        *_columns(gpu, frame, ["loan_id", PERIOD, STATUS, "current_actual_upb"]))
    assert {name: c.values.dtype for name, c in got.items()} == {
        name: want[name].dtype for name in got}
    assert all(c.size() == 0 for c in got.values())


@pytest.mark.parametrize("acquired_loans", [40, 0])
def test_the_gpu_join_is_the_numpy_join(gpu, acquired_loans):
    """Loans without an acquisition row get MISSING, a loan given twice its first row, and
    keys beyond either end of the ids are not found."""
    rng = np.random.default_rng(3)
    ids = rng.choice(np.arange(10, 200), acquired_loans, replace=False).astype(np.int64)
    if acquired_loans:
        ids[-1] = ids[0]  # a loan twice: its first row wins
    acq = pd.DataFrame({"loan_id": ids})
    for row, name in enumerate(features.ACQUIRED):
        acq[name] = (rng.integers(-1, 50, len(ids)) + row).astype(
            "float32" if schema.kind_of(name) == schema.NUMBER else "int32")
    keys = np.concatenate([rng.choice(np.arange(0, 220), 200), [0, 10**6]]).astype(np.int64)
    numpy_side = features.acquisitions(acq)
    want = numpy_side.values[:, numpy_side.rows_of(pd.Series(keys))]
    table = gpu.acquisition_table(numpy_pylibcudf.Column(acq["loan_id"].to_numpy()),
                                  _columns(gpu, acq, features.ACQUIRED))
    ids_column, *values = table.columns()
    got = gpu.join(ids_column, values, numpy_pylibcudf.Column(keys))
    assert (want == schema.MISSING).any()
    for row, column in enumerate(got):
        assert column.null_count() == 0
        np.testing.assert_array_equal(column.values, want[row])
        assert column.values.dtype == np.float32


@pytest.mark.filterwarnings("error::FutureWarning")
@pytest.mark.parametrize("older", [False, True], ids=["current cuDF", "older cuDF"])
def test_rows_are_kept_by_the_current_name_and_by_the_older(gpu, monkeypatch, older):
    """cuDF 26 renamed apply_boolean_mask to apply_retention_mask and warns on the old name:
    the features call the new one where it is, so no FutureWarning reaches the user, and the
    old one on a cuDF without it."""
    compaction = gpu.plc.stream_compaction
    if older:  # a cuDF from before the rename: only the old name, which does not warn there
        monkeypatch.delattr(compaction, "apply_retention_mask")
        monkeypatch.setattr(compaction, "apply_boolean_mask",
                            numpy_pylibcudf.apply_retention_mask)
    frame = _perf(np.random.default_rng(3), 50, shuffle=False, repeat_months=False)
    want = features.performance_features(frame.copy())
    got = gpu.performance_features(
        *_columns(gpu, frame, ["loan_id", PERIOD, STATUS, "current_actual_upb"]))
    np.testing.assert_array_equal(got[schema.LABEL].values, want[schema.LABEL].to_numpy())

"""The synthetic mortgage data: the real layout, deterministic, and shaped like the real data."""

from __future__ import annotations

import glob
import hashlib
import os

import dask
import numpy as np
import pandas as pd
import pytest

from examples.mortgage import schema
from examples.mortgage.testdata import generate as gen

SPEC = gen.Spec(2007, 2008, loans_per_quarter=120, loans_per_part=50, end_year=2011, seed=11)


def _make(directory, spec=SPEC, **kwargs):
    with dask.config.set(scheduler="synchronous"):
        return gen.generate(str(directory), spec, **kwargs)


def _digest(directory) -> dict[str, str]:
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*", "*"))):
        with open(path, "rb") as f:
            out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _frame(paths, table):
    frames = [pd.read_csv(p, sep="|", header=None, names=table.names, dtype=str,
                          keep_default_na=False) for p in sorted(paths)]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    directory = tmp_path_factory.mktemp("generated")
    return _make(directory)


@pytest.fixture(scope="module")
def perf(made):
    return _frame(made.performance, schema.PERFORMANCE)


@pytest.fixture(scope="module")
def acq(made):
    return _frame(made.acquisition, schema.ACQUISITION)


def test_layout_and_file_names(made):
    names = sorted(os.path.relpath(p, made.directory) for p in made.performance + made.acquisition)
    quarters = [f"{y}Q{q}" for y in (2007, 2008) for q in range(1, 5)]
    assert names == sorted([f"acq/Acquisition_{q}.txt" for q in quarters]
                           + [f"perf/Performance_{q}.txt" for q in quarters])
    assert not glob.glob(os.path.join(made.directory, "perf", "*.part*"))  # parts joined
    with open(made.names) as f:
        lines = f.read().splitlines()
    assert lines[0] == "seller_name|new" and len(lines) == 1 + len(schema.SELLERS)
    assert made.loans == 8 * 120


def test_every_line_has_the_real_field_count(made):
    for paths, fields in ((made.performance, 31), (made.acquisition, 25)):
        for path in paths:
            with open(path) as f:
                counts = {line.count("|") + 1 for line in f}
            assert counts == {fields}, path


def test_same_seed_same_bytes_other_seed_other_bytes(made, tmp_path):
    _make(tmp_path / "again")
    assert _digest(tmp_path / "again") == _digest(made.directory)
    _make(tmp_path / "other", gen.Spec(**{**SPEC.__dict__, "seed": 12}))
    assert _digest(tmp_path / "other") != _digest(made.directory)


def test_parallel_on_threads_gives_the_same_bytes(made, tmp_path):
    with dask.config.set(scheduler="threads", num_workers=4):
        gen.generate(str(tmp_path / "threads"), SPEC)
    assert _digest(tmp_path / "threads") == _digest(made.directory)


def test_in_a_pool_of_local_processes_gives_the_same_bytes_whatever_the_client(made, tmp_path):
    from distributed import Client, get_task_stream

    with Client(processes=False, n_workers=1, dashboard_address=None) as client, \
            get_task_stream(client) as stream:
        made_here = gen.generate(str(tmp_path / "processes"), SPEC, processes=2)
    assert stream.data == []  # no task ran on the client's cluster
    assert _digest(tmp_path / "processes") == _digest(made.directory)
    assert made_here.loans == made.loans


def test_an_existing_dataset_is_kept_unless_overwrite(made, tmp_path):
    _make(tmp_path / "d", gen.Spec(2007, 2007, loans_per_quarter=5))
    with pytest.raises(FileExistsError, match="overwrite"):
        _make(tmp_path / "d", gen.Spec(2007, 2007, loans_per_quarter=5))
    _make(tmp_path / "d", gen.Spec(2007, 2007, loans_per_quarter=5), overwrite=True)


def test_loans_are_whole_sorted_and_in_one_part(made, perf):
    seen = {}
    for path in made.performance:
        part = _frame([path], schema.PERFORMANCE)
        ids = part["loan_id"].astype(int)
        assert ids.is_monotonic_increasing
        months = part["monthly_reporting_period"].map(schema.month_number)
        assert ((ids.diff() > 0) | (months.diff() == 1)).iloc[1:].all()  # every month, in order
        for loan in ids.unique():
            assert loan not in seen
            seen[loan] = path
    assert len(seen) == 8 * 120


def test_rows_look_like_the_real_files(perf, acq):
    first = perf["loan_id"] != perf["loan_id"].shift()
    assert (perf.loc[first, "servicer"] != "").all()  # servicer on the first row only
    assert (perf.loc[~first, "servicer"] == "").all()
    age = perf["loan_age"].astype(float)
    assert (perf.loc[age < 6, "current_actual_upb"][perf["zero_balance_code"] == ""] == "").all()
    assert (perf.loc[age >= 6, "current_actual_upb"] != "").all()
    assert perf["monthly_reporting_period"].str.fullmatch(r"\d\d/01/\d{4}").all()
    assert perf["maturity_date"].str.fullmatch(r"\d\d/\d{4}").all()
    assert acq["orig_date"].str.fullmatch(r"\d\d/\d{4}").all()
    assert acq["zip"].str.fullmatch(r"\d{3}").all()
    # the balance amortizes: it never rises while the loan is current and unmodified
    upb = pd.to_numeric(perf["current_actual_upb"], errors="coerce")
    same = (perf["loan_id"] == perf["loan_id"].shift()) & (perf["mod_flag"] == "N")
    assert (upb.diff()[same & upb.notna() & upb.shift().notna()] <= 0.005).all()


def test_delinquency_paths_cure_modify_prepay_and_foreclose(perf):
    status = perf["current_loan_delinquency_status"].astype(int)
    loan = perf["loan_id"]
    cured = ((status.shift() > 0) & (status == 0) & (loan == loan.shift())).sum()
    assert cured > 0
    assert (perf["mod_flag"] == "Y").any()
    ends = perf[perf["zero_balance_code"] != ""]
    assert set(ends["zero_balance_code"]) >= {"01", "09"}
    assert set(ends["zero_balance_code"]) <= {"01", "02", "03", "06", "09"}
    prepaid = ends["zero_balance_code"] == "01"
    assert (ends.loc[prepaid, "current_loan_delinquency_status"] == "-2").all()
    foreclosed = ends["zero_balance_code"].isin(["02", "03", "09"])
    assert (ends.loc[foreclosed, "current_loan_delinquency_status"] == "-1").all()
    assert (ends.loc[foreclosed, "foreclosure_costs"] != "").all()
    assert (ends.loc[foreclosed, "disposition_date"].str.fullmatch(r"\d\d/01/\d{4}")).all()
    last = perf.groupby("loan_id").tail(1).index
    assert set(ends.index) <= set(last)  # an ended loan has no later rows


def test_acquisitions_look_like_the_real_data():
    """Distributions over many vintages (the acquisition fields only: fast)."""
    spec = gen.Spec(2000, 2017, loans_per_quarter=400)
    frames = {y: pd.DataFrame({k: v for k, v in gen.loans(spec, y, q, 0).items()
                               if np.ndim(v) == 1})
              for y in range(2000, 2018) for q in (2,)}
    every = pd.concat(frames.values())
    assert 715 <= every["borrower_credit_score"].median() <= 745
    assert every["borrower_credit_score"].between(600, 830).all()
    assert 74 <= every["orig_ltv"].median() <= 82
    assert 32 <= every["dti"].median() <= 38
    assert every["property_state"].nunique() >= 50
    assert every["seller_name"].nunique() == 15
    assert set(every["orig_loan_term"]) >= {360, 180, 240}
    assert set(every["orig_channel"]) == {"R", "C", "B"}
    early = np.mean([frames[y]["orig_interest_rate"].mean() for y in range(2000, 2005)])
    late = np.mean([frames[y]["orig_interest_rate"].mean() for y in range(2014, 2018)])
    assert 6.2 <= early <= 6.8 and 3.9 <= late <= 4.5
    assert 150_000 <= every["orig_upb"].median() <= 200_000


def test_default_risk_depends_on_fico_ltv_and_vintage():
    """Ever 90 days behind within three years: more often for low FICO, high LTV, 2007."""
    def ever_90(year, n=1500):
        spec = gen.Spec(year, year, loans_per_quarter=n, loans_per_part=n, end_year=year + 3)
        attrs = gen.loans(spec, year, 1, 0)
        rows = gen.simulate(spec, year, 1, 0, attrs)
        worst = pd.Series(rows["status"]).groupby(rows["i"]).max()
        return pd.DataFrame({"fico": attrs["borrower_credit_score"], "ltv": attrs["orig_ltv"],
                             "bad": worst.reindex(range(n)).to_numpy() >= 3})

    crisis, calm = ever_90(2007), ever_90(2013)
    assert crisis["bad"].mean() > 2 * calm["bad"].mean()
    low, high = crisis[crisis["fico"] < 690], crisis[crisis["fico"] > 760]
    assert low["bad"].mean() > 2.5 * high["bad"].mean()
    assert crisis[crisis["ltv"] > 85]["bad"].mean() > crisis[crisis["ltv"] < 70]["bad"].mean()


def test_size_target_is_met_roughly(tmp_path):
    loans = gen.loans_for_size(2_000_000, 2007, 2007)
    made = _make(tmp_path, gen.Spec(2007, 2007, loans_per_quarter=loans))
    assert 0.7 < made.bytes / 2_000_000 < 1.3
    assert made.bytes == sum(os.path.getsize(p) for p in made.performance + made.acquisition)


@pytest.mark.parametrize("kwargs, message", [
    (dict(first_year=2008, last_year=2007), "first <= last"),
    (dict(first_year=1990, last_year=1995), "within 1999-2025"),
    (dict(loans_per_quarter=0), "loans_per_quarter=0"),
    (dict(end_year=2005), "end_year=2005"),
])
def test_spec_errors_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gen.Spec(**kwargs)


def test_parse_years():
    assert schema.parse_years("2007") == (2007, 2007)
    assert schema.parse_years("2000-2016") == (2000, 2016)
    with pytest.raises(ValueError, match="a range"):
        schema.parse_years("two thousand")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    spec = gen.Spec(2007, 2007, loans_per_quarter=60, loans_per_part=25, end_year=2010, seed=4)
    return _make(tmp_path_factory.mktemp("both"), spec, layout="both")


def test_the_current_layout_is_one_108_column_file_a_quarter(both):
    assert [os.path.basename(p) for p in both.current] == [f"2007Q{q}.csv" for q in range(1, 5)]
    assert not glob.glob(os.path.join(both.directory_of("current"), "*.part*"))  # parts joined
    for path in both.current:
        with open(path) as f:
            assert {line.count("|") + 1 for line in f} == {len(schema.CURRENT_COLUMNS)}


def test_both_layouts_hold_the_same_rows_field_for_field(both):
    """The current file of a quarter is its classic performance rows, each with its loan's
    acquisition fields, dates as MMYYYY and statuses of two characters."""
    perf = _frame(both.performance, schema.PERFORMANCE)
    acq = _frame(both.acquisition, schema.ACQUISITION).set_index("loan_id")
    current = pd.concat([pd.read_csv(p, sep="|", header=None, names=schema.CURRENT_COLUMNS,
                                     dtype=str, keep_default_na=False) for p in both.current],
                        ignore_index=True)
    assert len(current) == len(perf) == both.rows
    for name in schema.PERFORMANCE.names:
        got, want = current[schema.CURRENT_NAME[name]], perf[name]
        kind = schema.kind_of(name)
        if kind in (schema.PERIOD, schema.DATE):
            want = want.map(lambda t: t[:2] + t[-4:] if t else t)
        elif kind == schema.STATUS:
            want = want.map(lambda t: f"{int(t):02d}")
        assert got.tolist() == want.tolist(), name
    for name in schema.ACQUISITION.names[1:]:
        want = acq.loc[perf["loan_id"], name]
        if schema.kind_of(name) == schema.DATE:
            want = want.map(lambda t: t[:2] + t[-4:])
        assert current[schema.CURRENT_NAME[name]].tolist() == want.tolist(), name


def test_the_size_target_counts_the_current_layout_s_bytes(tmp_path):
    loans = gen.loans_for_size(2_000_000, 2007, 2007, layout="current")
    made = _make(tmp_path, gen.Spec(2007, 2007, loans_per_quarter=loans), layout="current")
    assert 0.7 < made.bytes / 2_000_000 < 1.3
    assert made.bytes == sum(os.path.getsize(p) for p in made.current)

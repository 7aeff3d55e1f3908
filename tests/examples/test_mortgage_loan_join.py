"""The classic layout's join by loan (``--join loan|dask``): both sides shuffled on loan_id across
worker processes give the per-quarter join's feature table, whatever file holds a loan's
acquisition row; the current layout refuses it before any work."""

from __future__ import annotations

import glob
import os
import shutil

import dask
import pandas as pd
import pytest
from click.testing import CliRunner

from examples.mortgage import etl, features, files, loan_join
from examples.mortgage.cli import mortgage as main
from examples.mortgage.testdata import generate as gen

from .mortgage_rows import move_acquisition_row, sorted_rows

SHUFFLED = ("loan", "dask")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four quarters in both layouts, a few partitions each."""
    directory = str(tmp_path_factory.mktemp("loan-join"))
    spec = gen.Spec(2006, 2006, loans_per_quarter=240, loans_per_part=80, seed=11)
    with dask.config.set(scheduler="synchronous"):
        gen.generate(directory, spec, layout="both")
    return directory


def _plan(data):
    return files.plan(data, partition_size="1MiB").balanced(6, 2**20)


def _table(plan, join):
    result = etl.run(plan, join=join)
    return result, sorted_rows(result.frame.compute())


def _missing_acquired(table: pd.DataFrame) -> pd.Series:
    """Rows whose acquired features are all missing (-1): their loan found no acquisition row."""
    return (table[list(features.ACQUIRED)] == -1).all(axis=1)


def test_a_shuffled_join_needs_a_distributed_client(dataset):
    # first in this file: no client of the module's fixture runs yet
    plan = _plan(os.path.join(dataset, "classic"))
    with dask.config.set(scheduler="threads"), pytest.raises(ValueError, match="client"):
        etl.run(plan, join="loan")


def test_the_three_joins_give_the_same_feature_table(dataset, cpu_client):
    plan = _plan(os.path.join(dataset, "classic"))
    assert len(set(plan.quarters)) == 4 and len(plan.parts) >= 4
    base, want = _table(plan, "quarter")
    assert len(want) > 1000 and not _missing_acquired(want).any()
    for join in SHUFFLED:
        result, got = _table(plan, join)
        pd.testing.assert_frame_equal(got, want)
        assert result.rows == base.rows == len(want) and result.join == join
        # every output partition of one quarter, for training's held-out quarter
        assert len(result.quarters) == result.frame.npartitions
        assert set(result.quarters) == set(plan.quarters)
        assert result.join_seconds > 0
        assert f"joined by loan_id ({join} shuffle)" in result.summary()
    # the library's shuffle says what crossed between workers: acquisitions and each quarter
    assert len(result.shuffles) == 0
    library, _ = _table(plan, "loan")
    assert len(library.shuffles) == 5 and library.shuffles[0].startswith("acquisitions: shuffled")
    assert all("crossed between workers" in line for line in library.shuffles)


def test_a_loan_acquired_in_another_quarter_s_file_is_joined_by_loan(dataset, cpu_client,
                                                                     tmp_path):
    moved = str(tmp_path / "moved")
    loan, rows = move_acquisition_row(os.path.join(dataset, "classic"), moved)
    assert rows > 0
    _, want = _table(_plan(os.path.join(dataset, "classic")), "quarter")
    plan = _plan(moved)
    for join in SHUFFLED:
        pd.testing.assert_frame_equal(_table(plan, join)[1], want)
    # the per-quarter join looks only in the loan's own quarter's file: its rows get -1
    _, by_quarter = _table(plan, "quarter")
    assert _missing_acquired(by_quarter).sum() == rows
    assert len(by_quarter) == len(want)


def test_a_loan_without_an_acquisition_row_gets_missing_acquired_features(dataset, cpu_client,
                                                                          tmp_path):
    target = str(tmp_path / "without")
    shutil.copytree(os.path.join(dataset, "classic"), target)
    path = os.path.join(target, "acq", "Acquisition_2006Q3.txt")
    with open(path) as f:
        lines = f.readlines()
    with open(path, "w") as f:
        f.writelines(lines[1:])
    loan = lines[0].split("|", 1)[0]
    rows = sum(line.startswith(loan + "|")
               for p in glob.glob(os.path.join(target, "perf", "Performance_2006Q3*"))
               for line in open(p))
    plan = _plan(target)
    _, want = _table(plan, "quarter")
    assert rows > 0 and _missing_acquired(want).sum() == rows
    for join in SHUFFLED:
        pd.testing.assert_frame_equal(_table(plan, join)[1], want)


def test_the_join_is_refused_for_the_current_layout(dataset, tmp_path):
    plan = _plan(os.path.join(dataset, "current"))
    with pytest.raises(ValueError, match="current layout"):
        loan_join.check("loan", plan.layout)
    with pytest.raises(ValueError, match="choose one of quarter, loan, dask"):
        loan_join.check("hash", plan.layout)
    out = tmp_path / "out"
    for args in (["etl", "--data", os.path.join(dataset, "current"), "--out", str(out)],
                 ["--data", os.path.join(dataset, "current")],
                 ["--layout", "current"]):
        result = CliRunner().invoke(main, [*args, "--join", "dask", "--device", "cpu"])
        assert result.exit_code == 2, result.output
        message = result.output.strip().splitlines()[-1]
        assert "--join dask joins the classic layout" in message and "leave --join out" in message
        assert "cluster:" not in result.output and not out.exists()  # before any work


def test_the_etl_command_writes_the_same_table_with_join_loan(dataset, running, tmp_path):
    data = os.path.join(dataset, "classic")
    tables = {}
    for join in ("quarter", "loan"):
        out = tmp_path / join
        result = CliRunner().invoke(main, ["etl", *running, "--data", data, "--out", str(out),
                                           "--partition-size", "1MiB", "--join", join,
                                           "--json", str(tmp_path / f"{join}.json")],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        parts = sorted(glob.glob(str(out / "part.*.parquet")))
        assert parts and len(parts) == len(os.listdir(out)) - 1  # and the list of what it wrote
        tables[join] = sorted_rows(pd.concat([pd.read_parquet(p) for p in parts]))
        shuffles = [line for line in result.output.splitlines() if line.startswith("shuffle:")]
        assert len(shuffles) == (2 if join == "loan" else 0)
        import json

        figures = json.loads((tmp_path / f"{join}.json").read_text())
        assert figures["etl"]["join"] == join
        assert (figures["etl"]["join_seconds"] > 0) == (join == "loan")
    pd.testing.assert_frame_equal(tables["loan"], tables["quarter"])
    # --overwrite and the staged folder are the same as the default's
    again = CliRunner().invoke(main, ["etl", *running, "--data", data, "--out",
                                      str(tmp_path / "loan"), "--join", "loan"])
    assert again.exit_code != 0 and "--overwrite" in again.output


def test_the_whole_job_trains_on_the_join_by_loan(dataset, running):
    result = CliRunner().invoke(main, [*running, "--data", os.path.join(dataset, "classic"),
                                       "--rounds", "3", "--join", "loan"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:1] == ["join"] for line in lines)  # a stage line of its own
    assert sum(line.startswith("shuffle: ") for line in lines) == 5  # acquisitions, 4 quarters
    assert any(line.startswith("test AUC: ") for line in lines)
    assert "(quarter 2006Q4)" in result.output  # the latest quarter held out, as with the default

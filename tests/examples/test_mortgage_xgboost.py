"""examples/mortgage_xgboost.py, the pipeline in one file, against the full application
(``python -m examples.mortgage``) on the same data: the same feature table, the same AUC."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import dask
import pandas as pd
import pytest

from examples import mortgage_xgboost as one_file

from .mortgage_sample import SAMPLE, SAMPLE_PERF

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "mortgage_xgboost.py")
ROUNDS = "10"


def _run(*args, env=None):
    """A command from the checkout's root, as a user runs it; its completed process."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def _auc(out: str) -> str:
    """The test AUC a run printed (both print it with four decimals)."""
    return re.search(r"test AUC:? (\d\.\d{4})", out).group(1)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """``generate``'s output: four quarters of the classic layout, with names.csv."""
    out = tmp_path_factory.mktemp("generated") / "data"
    done = _run("-m", "examples.mortgage", "generate", "--out", str(out), "--years", "2007",
                "--loans-per-quarter", "300")
    assert done.returncode == 0, done.stderr
    return str(out)


def _applications_table(data: str, out) -> pd.DataFrame:
    done = _run("-m", "examples.mortgage", "etl", "--device", "cpu", "--workers", "1",
                "--data", data, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return pd.read_parquet(out)


def _one_files_table(data: str, backend: str = "pandas") -> pd.DataFrame:
    quarters, names_csv = one_file.quarter_files(data)
    vocabulary = one_file.vocabularies(names_csv)
    with dask.config.set({"dataframe.backend": backend, "scheduler": "sync"}):
        parts = [one_file.quarter_table(*files, vocabulary).compute() for files in
                 quarters.values()]
    parts = [p.to_pandas() if hasattr(p, "to_pandas") else p for p in parts]
    return pd.concat(parts).drop(columns="loan_id").reset_index(drop=True)


@pytest.mark.parametrize("data", ["generated", "sample"])
def test_the_feature_table_is_the_applications(data, generated, tmp_path):
    """Every feature and label of every row, in the files' order, as the application's ETL
    writes them: dask's read_csv and pandas give what the application's own reader gives."""
    path = generated if data == "generated" else SAMPLE
    expected = _applications_table(path, tmp_path / "features")
    table = _one_files_table(path)
    assert list(table.columns) == [*one_file.FEATURES, one_file.LABEL]
    assert len(one_file.FEATURES) == 45
    pd.testing.assert_frame_equal(table, expected)
    assert 0 < table[one_file.LABEL].sum() < len(table)  # both classes: the label is tested


def test_the_same_auc_as_the_application_on_generated_data(generated):
    """The same rows, parameters, rounds and held-out quarter (the latest) on one worker give
    the same model. The AUC is compared to the four decimals the application prints."""
    app = _run("-m", "examples.mortgage", "--data", generated, "--device", "cpu", "--workers",
               "1", "--rounds", ROUNDS)
    assert app.returncode == 0, app.stderr
    assert "(quarter 2007Q4)" in app.stdout
    mine = _run(SCRIPT, "--data", generated, "--device", "cpu", "--workers", "1", "--rounds",
                ROUNDS)
    assert mine.returncode == 0, mine.stderr
    assert "test rows (2007Q4)" in mine.stdout
    assert _auc(mine.stdout) == _auc(app.stdout)
    assert 0.5 < float(_auc(mine.stdout)) < 1
    # the memory report closes the run; CPU workers say the plugin has nothing to do
    assert mine.stdout.rstrip().endswith("no GPU: the plugin does nothing here")


def test_two_workers_train_on_the_applications_placement_at_every_run(generated):
    """Partition i trains on the worker of XGBoost rank i modulo the workers, with work
    stealing paused while the matrices are built, as the application places them: no
    worker's matrix is empty and every run gives the application's AUC."""
    app = _run("-m", "examples.mortgage", "--data", generated, "--device", "cpu", "--workers",
               "2", "--rounds", ROUNDS)
    assert app.returncode == 0, app.stderr
    for _ in range(2):
        mine = _run(SCRIPT, "--data", generated, "--device", "cpu", "--workers", "2",
                    "--rounds", ROUNDS)
        assert mine.returncode == 0, mine.stderr
        assert "empty DMatrix" not in mine.stdout + mine.stderr
        assert "Empty dataset" not in mine.stdout + mine.stderr
        assert _auc(mine.stdout) == _auc(app.stdout)


def test_the_shared_sample_by_default_holds_out_a_fifth_of_the_loans(capsys):
    """One quarter only: the loans whose id is a multiple of 5 are the test set."""
    auc = one_file.main(["--device", "cpu", "--rounds", ROUNDS])
    out = capsys.readouterr().out
    loans = pd.read_csv(SAMPLE_PERF, sep="|", header=None, usecols=[0])[0]
    held = int((loans % 5 == 0).sum())
    assert 0 < held < len(loans)
    assert f"{len(loans) - held:,} training rows, {held:,} test rows (2007Q3)" in out
    assert 0.5 < auc < 1 and f"test AUC {auc:.4f}" in out


@pytest.mark.parametrize("args, message", [
    (["--data", "{empty}"], "give a folder of classic-layout files"),
    (["--holdout", "2001Q1"], "--holdout 2001Q1: the data has quarters 2007Q3"),
    (["--device", "gpu"], "device='gpu'"),
])
def test_bad_input_is_one_line_before_any_work(args, message, tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for --device gpu either
    done = _run(SCRIPT, "--device", "cpu", *[a.format(empty=tmp_path) for a in args], env=env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    assert done.stdout == ""  # nothing started


def test_the_file_is_one_a_user_can_copy():
    """At most 250 lines, and nothing of the repository's own but the library."""
    text = open(SCRIPT).read()
    assert len(text.splitlines()) <= 250
    assert "import examples" not in text and "from examples" not in text
    assert "GPUMemoryPlugin(" in text and "memory_report(client)" in text


@pytest.mark.gpu
def test_on_gpus_the_feature_table_is_the_applications(generated, tmp_path):
    """The cuDF path (dask's read_csv on the cuDF backend, every step on cuDF) gives the
    application's feature table."""
    expected = _applications_table(generated, tmp_path / "features")
    pd.testing.assert_frame_equal(_one_files_table(generated, "cudf"), expected)


@pytest.mark.gpu
def test_on_a_gpu_the_same_auc_as_the_application(generated):
    app = _run("-m", "examples.mortgage", "--data", generated, "--device", "gpu", "--workers",
               "1", "--rounds", ROUNDS)
    assert app.returncode == 0, app.stderr
    mine = _run(SCRIPT, "--data", generated, "--device", "gpu", "--workers", "1", "--rounds",
                ROUNDS)
    assert mine.returncode == 0, mine.stderr
    assert "on gpu" in mine.stdout
    assert _auc(mine.stdout) == _auc(app.stdout)
    assert "no GPU" not in mine.stdout  # the plugin set up the worker's pool

"""A new user's mistakes with ``python -m examples.mortgage``, on CPUs: each is read as meant or
answered in one line, before any work starts."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from examples.mortgage import cli, files
from examples.mortgage.cli import mortgage as main

from .commands import CPU, as_program, invoke, refused
from .mortgage_rows import generated_dataset
from .mortgage_sample import SAMPLE


def _run(args):
    return invoke(main, args)


# ---------------------------------------------------------------------------------------------
# XGBoost parameters the job cannot train or score with


@pytest.mark.parametrize("param, words", [
    ("eval_metric=rmse", ["eval_metric=rmse", "test AUC", "leave eval_metric out"]),
    ('eval_metric=["rmse","logloss"]', ["test AUC"]),
    ("tree_method=exact", ["tree_method=exact", "only the hist method"]),
    ("tree_method=approx", ["tree_method=approx", "only the hist method"]),
    ("booster=gblinear", ["booster=gblinear", "only tree boosters"]),
    ("updater=grow_colmaker,prune", ["updater=grow_colmaker,prune", "quantized matrix",
                                     "hist"]),
])
def test_xgboost_parameters_the_job_cannot_use_are_refused_before_the_etl(param, words):
    refused(_run([*CPU, "--data", SAMPLE, "--xgb-param", param]), *words)


@pytest.mark.parametrize("params", [
    {"eval_metric": ["auc", "logloss"]}, {"tree_method": "hist"}, {"booster": "dart"},
    {"objective": "reg:squarederror"}, {"max_depth": 4}, {}])
def test_parameters_the_job_can_use_pass_the_checks(params):
    cli._check_training(params)
    cli._check_quantized(params)


# ---------------------------------------------------------------------------------------------
# Data given as the README and a new user give it


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generated_dataset(tmp_path_factory.mktemp("mistakes") / "data", 20)


def test_the_readmes_quoted_glob_reads_the_dataset_s_folders(dataset, tmp_path):
    glob = os.path.join(str(dataset), "*")  # --data 'DIR/*': perf/, acq/ and names.csv
    assert files.plan(glob).parts == files.plan(str(dataset)).parts
    result = _run(["etl", *CPU, "--data", glob, "--out", str(tmp_path / "features")])
    assert result.exit_code == 0, result.output
    lines = sum(sum(1 for _ in open(p)) for p in (dataset / "perf").iterdir())
    assert len(pd.read_parquet(tmp_path / "features")) == lines


def test_a_feature_table_given_as_data_is_named_as_one(dataset, tmp_path):
    table = tmp_path / "features"
    assert _run(["etl", *CPU, "--data", str(dataset), "--out", str(table)]).exit_code == 0
    refused(_run([*CPU, "--data", str(table)]), "is a feature table these commands wrote")
    refused(_run([*CPU, "--data", os.path.join(str(table), "*")]), "is a Parquet file")


@pytest.mark.parametrize("name", ["part.00000.parquet", "Performance_2007Q1.parquet"])
def test_a_parquet_file_given_as_data_is_named_as_one(tmp_path, name):
    path = tmp_path / name
    pd.DataFrame({"a\tb": ["x\ty"] * 100, "c": np.arange(100.0)}).to_parquet(path)
    line = refused(_run(["etl", *CPU, "--data", str(path), "--out", str(tmp_path / "o")]),
                   "is a Parquet file, not text")
    assert "tab" not in line and "delimiter" not in line


def test_a_path_from_the_home_folder_the_shell_left_unexpanded_is_read_from_there(
        tmp_path, monkeypatch):
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    result = _run(["generate", "--out=~/data", "--years", "2007", "--loans-per-quarter", "5",
                   "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert (home / "data" / "names.csv").is_file() and os.listdir(elsewhere) == []
    refused(_run(["etl", *CPU, "--data=~/data", "--out=~/data/features"]), "the input")


def test_a_quarter_in_lower_case_is_read_as_the_quarter():
    refused(_run([*CPU, "--data", SAMPLE, "--holdout", "2007q3"]),
            "holdout='2007Q3' is the only quarter of the data")


def test_a_names_file_that_is_not_text_is_named_by_file_and_line(tmp_path):
    names = tmp_path / "names.csv"
    names.write_bytes(b"seller_name|new\nBANK \x93A\x94|A\n")
    refused(_run(["etl", *CPU, "--perf", os.path.join(SAMPLE, "Performance_*"), "--acq",
                  os.path.join(SAMPLE, "Acquisition_*"), "--names", str(names),
                  "--out", str(tmp_path / "out")]), f"{names}:2: not UTF-8 text")


def test_an_output_that_is_a_link_to_a_folder_says_so(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(tmp_path / "link")]),
            "is a link (to", "give the directory it names")
    assert (tmp_path / "link").is_symlink() and os.listdir(tmp_path / "real") == []


def test_the_cli_module_run_as_a_program_is_the_command():
    done = as_program("examples.mortgage.cli", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m examples.mortgage ")


@pytest.mark.parametrize("command", [[], ["generate", "--out", "{out}"]])
def test_a_negative_seed_is_refused_naming_the_option_before_any_work(tmp_path, command):
    args = [arg.format(out=tmp_path / "data") for arg in command]
    refused(_run([*args, "--years", "2007", "--loans-per-quarter", "5", "--seed", "-1"]),
            "--seed", "-1 is not in the range")
    assert os.listdir(tmp_path) == []

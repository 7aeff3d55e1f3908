"""A new user's mistakes with ``python -m examples.mortgage``, on CPUs: each is read as meant or
answered in one line, before any work starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from examples.mortgage import cli
from examples.mortgage.cli import mortgage as main

from .mortgage_sample import SAMPLE

CPU = ["--device", "cpu", "--workers", "1"]


def _run(args):
    return CliRunner().invoke(main, [*args], catch_exceptions=False)


def _refused(result, *words):
    """The command stopped before starting a cluster, with one error line holding ``words``."""
    assert result.exit_code == 2, result.output
    assert "cluster:" not in result.output and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    for word in words:
        assert word in line, line
    return line


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
    _refused(_run([*CPU, "--data", SAMPLE, "--xgb-param", param]), *words)


@pytest.mark.parametrize("params", [
    {"eval_metric": ["auc", "logloss"]}, {"tree_method": "hist"}, {"booster": "dart"},
    {"objective": "reg:squarederror"}, {"max_depth": 4}, {}])
def test_parameters_the_job_can_use_pass_the_checks(params):
    cli._check_training(params)
    cli._check_quantized(params)

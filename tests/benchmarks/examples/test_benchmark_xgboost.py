"""The XGBoost growth-policy benchmark on CPUs: every policy on every worker count, timed and
reported against the fewest workers."""

from __future__ import annotations

import json

import pytest

from benchmarks.examples import xgboost_growth


def test_each_policy_runs_on_each_worker_count(tmp_path):
    xgboost_growth.main(["--device", "cpu", "--rows", "4000", "--partitions", "4", "--rounds",
                         "2", "--workers", "1,2", "--machine", "test", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "xgboost-growth-test.json").read_text())["results"]
    assert [(r["policy"], r["workers"]) for r in results] == [
        ("lossguide", 1), ("lossguide", 2), ("depthwise", 1), ("depthwise", 2)]
    assert all(r["seconds"] > 0 and 0.5 < r["train_auc"] <= 1 for r in results)
    table = (tmp_path / "xgboost-growth-test.md").read_text()
    assert "| lossguide | 1 |" in table and "| 1.00x |" in table


def test_unknown_policies_are_refused():
    with pytest.raises(SystemExit):
        xgboost_growth.main(["--device", "cpu", "--policies", "sideways"])

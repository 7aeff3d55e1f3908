"""``--json PATH`` of the mortgage commands on CPUs: the figures the run printed, as data, and a
figures file that replaces only an earlier one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from examples.mortgage import figures
from examples.mortgage.cli import mortgage as main

from .mortgage_sample import SAMPLE


def _run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_the_etl_command_writes_the_figures_and_stage_times_it_prints(tmp_path, running):
    path = tmp_path / "etl.json"
    args = ["etl", *running, "--data", SAMPLE, "--out", str(tmp_path / "features.parquet"),
            "--json", str(path)]
    result = _run(args)
    assert result.exit_code == 0, result.output
    found = json.loads(path.read_text())
    assert found["figures"] == "examples.mortgage etl" and found["device"] == "cpu"
    etl = found["etl"]
    line = re.search(r"ETL: ([\d,]+) rows from .* in (\d+) partitions, ([\d.]+) s", result.output)
    assert etl["rows"] == int(line[1].replace(",", "")) == 10_000
    assert etl["partitions"] == int(line[2]) and f"{etl['seconds']:.2f}" == line[3]
    parquet = sum(p.stat().st_size for p in (tmp_path / "features.parquet").glob("*.parquet"))
    assert etl["written_bytes"] == parquet and etl["bad_rows"] == 0
    assert etl["bytes"] == sum(p.stat().st_size for p in Path(SAMPLE).glob("*_2007Q3*"))
    out = result.output
    printed = {m[1]: m[2] for m in re.finditer(r"^  (\w[\w ]*?) +(-?\d+\.\d\d) s$", out, re.M)}
    assert list(found["stages"]) == list(printed) == [
        "start", "cluster start", "ETL", "cluster stop", "other"]  # every stage line, in order
    assert all(f"{found['stages'][k]:.2f}" == v for k, v in printed.items())
    assert found["stages"]["ETL"] >= etl["seconds"]  # the ETL line's time, and its planning
    assert f"{found['total']:.2f}" == re.search(r"^total: (\d+\.\d\d) s", out, re.M)[1]
    assert abs(sum(found["stages"].values()) - found["total"]) < 1e-6  # "other": the rest
    assert found["worker_starts"] == [] and "worker start" not in out  # a running cluster's
    again = _run([*args, "--overwrite"])  # an earlier figures file is replaced
    assert again.exit_code == 0, again.output
    assert json.loads(path.read_text())["etl"]["seconds"] != etl["seconds"]


def test_the_job_writes_its_stages_auc_and_placement(tmp_path, running):
    path = tmp_path / "job.json"
    result = _run([*running, "--data", SAMPLE, "--rounds", "5", "--json", str(path)])
    assert result.exit_code == 0, result.output
    found = json.loads(path.read_text())
    out = result.output
    printed = {m[1]: m[2] for m in re.finditer(r"^  (\w[\w ]*?) +(-?\d+\.\d\d) s$", out, re.M)}
    assert list(found["stages"]) == list(printed)  # every stage line, in its order
    assert {"cluster start", "ETL and sketch", "quantize", "training"} <= set(printed)
    assert list(printed)[-2:] == ["cluster stop", "other"]
    assert all(f"{found['stages'][k]:.2f}" == v for k, v in printed.items())
    assert f"{found['total']:.2f}" == re.search(r"^total: (\d+\.\d\d) s", out, re.M)[1]
    assert abs(sum(found["stages"].values()) - found["total"]) < 1e-6  # "other": the rest
    assert f"{found['auc']:.4f}" == re.search(r"test AUC: (\d\.\d+)", out)[1]
    assert found["etl"]["rows"] == 10_000 and found["workers"] == 2
    assert found["training"]["train_rows"] + found["training"]["test_rows"] == 10_000
    # the sample is one partition: one worker trains (none without a batch of its own)
    assert found["training"]["workers"] == 1 and found["training"]["train_seconds"] > 0
    assert found["placement"]["line"] in out and found["placement"]["where"] == "host"


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("my notes\n"), "is not an earlier figures file"),
    (lambda p: p.write_text(json.dumps({"figures": "something else"})),
     "is not an earlier figures file"),
    (lambda p: p.mkdir(), "is a directory"),
])
def test_a_path_that_holds_something_else_is_refused_before_the_work(tmp_path, running, make,
                                                                     message):
    path = tmp_path / "figures.json"
    make(path)
    before = path.read_text() if path.is_file() else None
    for args in (["etl", *running, "--data", SAMPLE, "--out", str(tmp_path / "f.parquet")],
                 [*running, "--data", SAMPLE]):
        result = _run([*args, "--json", str(path)])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "cluster:" not in result.output  # nothing started
    assert not (tmp_path / "f.parquet").exists()
    if before is not None:
        assert path.read_text() == before


def test_a_local_clusters_worker_starts_are_printed_and_in_the_figures(tmp_path):
    path = tmp_path / "etl.json"
    result = _run(["etl", "--device", "cpu", "--workers", "2", "--data", SAMPLE,
                   "--out", str(tmp_path / "features.parquet"), "--json", str(path)])
    assert result.exit_code == 0, result.output
    found = json.loads(path.read_text())
    starts = found["worker_starts"]
    assert len(starts) == 2 and len({s["address"] for s in starts}) == 2
    cluster_start = found["stages"]["cluster start"]
    for steps in starts:  # each worker process: its start, its preloads, the scheduler's add
        assert 0 <= steps["process"] < steps["preloads"] <= steps["joined"] <= cluster_start
    assert starts[0]["joined"] >= starts[1]["joined"]  # the last to join first
    line = re.search(r"^worker start \(the last to join; seconds from the cluster's start\): "
                     r"process ([\d.]+), preloads ([\d.]+), joined ([\d.]+)$", result.output, re.M)
    assert line and [float(v) for v in line.groups()] == pytest.approx(
        [starts[0][k] for k in ("process", "preloads", "joined")], abs=0.006)


def test_a_figures_file_is_told_from_any_other(tmp_path):
    mine = tmp_path / "mine.json"
    figures.write(str(mine), {"figures": "examples.mortgage etl", "etl": {}})
    assert figures.is_figures(str(mine))
    for text in ("[]", "{}", "not json", json.dumps({"figures": "examples.ecg"})):
        other = tmp_path / "other.json"
        other.write_text(text)
        assert not figures.is_figures(str(other))
    assert not figures.is_figures(str(tmp_path / "missing.json"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

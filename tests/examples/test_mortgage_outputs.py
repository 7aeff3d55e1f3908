"""What the mortgage commands may replace, on CPUs: ``--overwrite`` replaces only an earlier
output of the same kind (a generated dataset, a feature table, the job's model, one command's
figures), two outputs never share a path, and what a killed run left is removed by the next
one. Each refusal comes in one line before any work."""

from __future__ import annotations

import json
import os
import signal

import pandas as pd
import pytest

from examples import staging
from examples.mortgage import output
from examples.mortgage.cli import mortgage as main

from .commands import CPU, dead_pid, invoke, refused, started
from .mortgage_rows import generated_dataset
from .mortgage_sample import SAMPLE

SMALL = ["--years", "2007", "--loans-per-quarter", "100", "--rounds", "3"]


def _run(args):
    return invoke(main, args)


def _snapshot(directory):
    return {os.path.relpath(os.path.join(root, name), directory):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


def _dataset(path):
    return generated_dataset(path, 5)


def _table(path):
    with output.Staged(str(path), what="feature table") as folder:
        pd.DataFrame({"x": [1.0]}).to_parquet(os.path.join(folder, "part.00000.parquet"))
    return path


# ---------------------------------------------------------------------------------------------
# --overwrite replaces only an output of the same kind


@pytest.mark.parametrize("args, held, wanted", [
    (["etl", *CPU, "--data", SAMPLE, "--out", "{dataset}"], "generated dataset",
     "feature table"),
    ([*CPU, "--data", SAMPLE, "--features-out", "{dataset}"], "generated dataset",
     "feature table"),
    ([*CPU, *SMALL, "--workdir", "{table}"], "feature table", "generated dataset"),
    (["generate", "--out", "{table}", "--years", "2007"], "feature table", "generated dataset"),
])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_overwrite_replaces_only_an_output_of_the_same_kind(tmp_path, args, held, wanted,
                                                             overwrite):
    dataset, table = _dataset(tmp_path / "dataset"), _table(tmp_path / "table")
    before = {path: _snapshot(path) for path in (dataset, table)}
    args = [arg.format(dataset=dataset, table=table) for arg in args]
    line = refused(_run([*args, *overwrite]), f"holds a {held}, not a {wanted}",
                   "nothing was changed")
    assert "--data" not in line  # a feature table is no dataset to use as it is
    assert {path: _snapshot(path) for path in before} == before


def test_an_earlier_output_is_named_as_what_it_is(tmp_path):
    dataset, table = _dataset(tmp_path / "dataset"), _table(tmp_path / "table")
    line = refused(_run([*CPU, *SMALL, "--workdir", str(dataset)]),
                   "holds an earlier generated dataset", "--overwrite")
    assert f"--data {dataset}" in line  # or use the dataset as it is
    refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(table)]),
            "holds an earlier feature table", "--overwrite")


def test_figures_replace_only_the_same_command_s_figures(tmp_path):
    path = tmp_path / "figures.json"
    path.write_text(json.dumps({"figures": "examples.mortgage job", "auc": 0.8}))
    before = path.read_text()
    refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(tmp_path / "table"),
                  "--json", str(path), "--overwrite"]),
            "holds the whole job's figures, not the etl command's")
    assert path.read_text() == before


def test_a_model_the_job_did_not_write_is_never_replaced(tmp_path):
    import numpy as np
    import xgboost

    theirs = tmp_path / "model.json"
    matrix = xgboost.DMatrix(np.arange(8.0).reshape(4, 2), label=[0, 1, 0, 1])
    xgboost.train({"max_depth": 1}, matrix, num_boost_round=1).save_model(str(theirs))
    before = theirs.read_bytes()
    refused(_run([*CPU, "--data", SAMPLE, "--model-out", str(theirs), "--overwrite"]),
            "not an earlier model")
    assert theirs.read_bytes() == before


@pytest.mark.parametrize("args, words", [
    ([*CPU, "--data", SAMPLE, "--json", "{x}", "--model-out", "{x}"],
     ["is given to both --model-out and --json"]),
    ([*CPU, "--data", SAMPLE, "--features-out", "{x}", "--json", "{x}"],
     ["is given to both --features-out and --json"]),
    ([*CPU, "--data", SAMPLE, "--features-out", "{x}", "--model-out", "{x}/model.json"],
     ["--model-out", "lies inside --features-out"]),
    ([*CPU, *SMALL, "--workdir", "{x}", "--json", "{x}/figures.json"],
     ["--json", "lies inside --workdir"]),
    (["etl", *CPU, "--data", SAMPLE, "--out", "{x}", "--json", "{x}/figures.json"],
     ["--json", "lies inside --out"]),
])
def test_two_outputs_never_share_a_path(tmp_path, args, words):
    refused(_run([arg.replace("{x}", str(tmp_path / "x")) for arg in args]), *words)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# What a killed run left


def _hidden(parent, name, pid, host=None, kind="partial", folder=True):
    """A hidden name as ``staging`` makes them, of process ``pid`` (on ``host``: this one)."""
    made = staging.hidden_name(name, kind)
    host = host or staging._host()
    made = made.replace(f"-{staging._host()}-{os.getpid()}-", f"-{host}-{pid}-")
    path = parent / made
    if folder:
        path.mkdir()
        (path / "part.00000.parquet").write_text("half written")
    else:
        path.write_text("half written")
    return path


def test_only_what_a_dead_process_of_this_machine_wrote_is_removed(tmp_path):
    dead = dead_pid()
    stale = [_hidden(tmp_path, "features", dead),
             _hidden(tmp_path, "features", dead, kind="old"),
             _hidden(tmp_path, "model.json", dead, folder=False)]
    kept = [_hidden(tmp_path, "features", os.getpid()),  # a live writer's
            _hidden(tmp_path, "features", os.getppid()),
            _hidden(tmp_path, "features", dead, host="0123abcd"),  # another machine's
            tmp_path / ".features.partial-mine", tmp_path / "features", tmp_path / "notes.txt"]
    for path in kept[-3:-1]:
        path.mkdir()
    kept[-1].write_text("my notes")
    removed = staging.remove_stale(str(tmp_path))
    assert sorted(removed) == sorted(map(str, stale))
    assert sorted(os.listdir(tmp_path)) == sorted(path.name for path in kept)


@pytest.mark.parametrize("write", ["etl", "generate", "model"])
def test_the_next_run_writing_beside_it_removes_what_a_killed_run_left(tmp_path, write):
    stale = _hidden(tmp_path, "out", dead_pid())
    mine = tmp_path / ".out.partial-mine"
    mine.mkdir()
    if write == "etl":
        output.check(str(tmp_path / "out"), what="feature table")
    elif write == "generate":
        generated_dataset(tmp_path / "out", 5)
    else:
        output.check_file(str(tmp_path / "model.json"), what="model")
    assert not stale.exists() and mine.is_dir()


def test_an_etl_killed_outright_leaves_nothing_after_the_next_run(tmp_path):
    """``kill -9`` of the command (and its workers) mid-ETL, then the same command again."""
    data = tmp_path / "data"
    generated_dataset(data, 1500)
    out = tmp_path / "features"
    args = ["etl", *CPU, "--data", str(data), "--out", str(out), "--partition-size", "1MiB"]
    process = started("examples.mortgage", *args)
    try:
        for line in process.stdout:
            if line.startswith("ETL partitions:"):
                break
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    left = [name for name in os.listdir(tmp_path) if name.startswith(".features.partial-")]
    assert len(left) == 1, os.listdir(tmp_path)
    before = _snapshot(data)
    result = _run(args)
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == ["data", "features"]
    assert _snapshot(data) == before

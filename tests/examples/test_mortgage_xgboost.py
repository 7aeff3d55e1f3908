"""examples/mortgage_xgboost.py, the pipeline in one file, against the full application
(``python -m examples.mortgage``) on the same data: the same feature table, the same AUC, on
one worker or several, run after run; and every bad input refused in one line."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

import dask
import pandas as pd
import pytest

from examples import mortgage_xgboost as one_file

from .mortgage_sample import SAMPLE, SAMPLE_PERF

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "mortgage_xgboost.py")
ROUNDS = "10"


def _run(*args, env=None, cwd=ROOT, timeout=600):
    """A command from the checkout's root, as a user runs it; its completed process."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


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
    quarters, names_csv = one_file.data_files([data])
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


def _applications_auc(data: str, workers: str) -> str:
    app = _run("-m", "examples.mortgage", "--data", data, "--device", "cpu", "--workers",
               workers, "--rounds", ROUNDS)
    assert app.returncode == 0, app.stderr
    return _auc(app.stdout)


def test_one_worker_gives_the_applications_auc(generated):
    """The same rows, parameters, rounds and held-out quarter (the latest) on one worker
    give the same model; the memory report closes the run."""
    mine = _run(SCRIPT, "--data", generated, "--device", "cpu", "--workers", "1", "--rounds",
                ROUNDS)
    assert mine.returncode == 0, mine.stderr
    assert _auc(mine.stdout) == _applications_auc(generated, "1")
    assert 0.5 < float(_auc(mine.stdout)) < 1
    # CPU workers say the plugin has nothing to do
    assert mine.stdout.rstrip().endswith("no GPU: the plugin does nothing here")


def test_two_workers_train_on_the_applications_placement_at_every_run(generated):
    """Partition i trains on the worker of XGBoost rank i modulo the workers, with work
    stealing paused while the matrices are built, as the application places them: no
    worker's matrix is empty and every run gives the application's AUC."""
    expected = _applications_auc(generated, "2")
    for _ in range(2):
        mine = _run(SCRIPT, "--data", generated, "--device", "cpu", "--workers", "2",
                    "--rounds", ROUNDS)
        assert mine.returncode == 0, mine.stderr
        assert "empty DMatrix" not in mine.stdout + mine.stderr
        assert "Empty dataset" not in mine.stdout + mine.stderr
        assert _auc(mine.stdout) == expected


def test_on_a_started_cluster_the_applications_auc(generated, running):
    """``--scheduler``: the same pipeline on a cluster started beforehand (two workers)."""
    mine = _run(SCRIPT, "--data", generated, "--rounds", ROUNDS, *running)
    assert mine.returncode == 0, mine.stderr
    assert _auc(mine.stdout) == _applications_auc(generated, "2")


def test_the_sample_holds_out_each_partitions_last_fifth_as_the_application(tmp_path):
    """One quarter only: the test rows are the last fifth of each partition (a file), the
    application's split, so the AUC is the application's too. The data is given as the
    README's quoted glob, which names the files themselves."""
    rows = sum(1 for _ in open(SAMPLE_PERF))
    mine = _run(SCRIPT, "--data", os.path.join(SAMPLE, "*"), "--device", "cpu",
                "--workers", "2", "--rounds", ROUNDS)
    assert mine.returncode == 0, mine.stderr
    assert f"{rows - rows // 5:,} training rows, {rows // 5:,} test rows" in mine.stdout
    assert _auc(mine.stdout) == _applications_auc(SAMPLE, "2")


def _copy(source: str, to, edit=None) -> str:
    """``source`` copied to ``to``, each of its data files passed through ``edit``."""
    shutil.copytree(source, to)
    for folder, _, names in os.walk(to):
        for name in names:
            path = os.path.join(folder, name)
            if edit and name != "names.csv":
                with open(path) as f:
                    text = f.read()
                with open(path, "w") as f:
                    f.write(edit(text))
    return str(to)


def _names(data: str, text: str) -> str:
    with open(os.path.join(data, "names.csv"), "w") as f:
        f.write(text)
    return data


@pytest.mark.parametrize("case, message", [
    ("names.csv with commas", "names.csv: give a header line, then a line 'seller name|"),
    ("names.csv of a header line only", "names.csv: give a header line, then a line"),
    ("comma-separated data", "not 25 '|'-separated fields: give the classic layout's files"),
    ("a header line", "starts with b'loan_id', not 25 '|'-separated fields"),
    ("a Parquet file", "Performance_2007Q1.parquet starts with Parquet, not 31"),
    ("a copy of the data inside it", "Acquisition_2007Q1.txt: one file twice; give it once"),
])
def test_bad_data_is_one_line_before_any_work(case, message, generated, tmp_path):
    data = str(tmp_path / "data")
    if case == "names.csv with commas":
        _names(_copy(generated, data), "seller_name,new\nOTHER,Other\n")
    elif case == "names.csv of a header line only":
        _names(_copy(generated, data), "seller_name|new\n")
    elif case == "comma-separated data":
        _copy(generated, data, lambda text: text.replace("|", ","))
    elif case == "a header line":
        _copy(generated, data, lambda text: "loan_id|" + "|" * 30 + "\n" + text)
    elif case == "a copy of the data inside it":
        _copy(generated, os.path.join(_copy(generated, data), "copy"))
    else:
        _copy(generated, data)
        perf = os.path.join(data, "perf", "Performance_2007Q1.txt")
        pd.read_csv(perf, sep="|", header=None).rename(columns=str).to_parquet(
            perf.replace(".txt", ".parquet"))
        os.remove(perf)
    _refused(["--data", data], message)


def _refused(args, message, cwd=ROOT, script=SCRIPT):
    """``args`` refused by argparse in one line naming ``message``, nothing started."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for --device gpu either
    done = _run(script, "--device", "cpu", *args, env=env, cwd=cwd, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    assert done.stdout == ""  # nothing started
    return done.stderr


@pytest.mark.parametrize("args, message", [
    (["--data", "{empty}"], "--data {empty}: no pair of Performance_YYYYQn* and Acquisition_"),
    (["--device", "gpu"], "--device 'gpu' but no CUDA GPU is visible here"),
    (["--workers", "-1"], "--workers -1: give at least 1"),
    (["--workers", "0"], "--workers 0: give at least 1"),
    (["--rounds", "0"], "--rounds 0: give 1 or more"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "not allowed with argument"),
])
def test_bad_input_is_one_line_before_any_work(args, message, tmp_path):
    """Before anything starts: ``--workers -1`` would start a cluster that never comes up,
    and ``--workers 0`` is no number of workers."""
    _refused([a.format(empty=tmp_path) for a in args], message.format(empty=tmp_path))


def test_a_copy_elsewhere_names_no_path_the_user_never_gave(tmp_path):
    """Copied out of the checkout, the file has no sample beside it: it says so, and asks
    for --data, instead of naming the sample's path as if the user had given it."""
    shutil.copy(SCRIPT, tmp_path)
    said = _refused([], "--data not given, and no sample beside this file", cwd=tmp_path,
                    script=str(tmp_path / "mortgage_xgboost.py"))
    assert "2007Q3-sample" not in said


def test_a_scheduler_address_where_no_scheduler_answers_is_one_line(generated):
    """An HTTP server at the address: the library's check says so in one line, where a
    plain Client would wait."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _refused(["--data", generated, "--scheduler", f"tcp://127.0.0.1:{server.server_port}"],
                 "no Dask scheduler answered at tcp://127.0.0.1:")
    finally:
        server.shutdown()


def test_data_of_one_class_is_refused_in_one_line(tmp_path):
    """Three loans a quarter: no delinquent month to test on. XGBoost's AUC would be nan;
    the pipeline says why, once the rows are counted."""
    data = str(tmp_path / "tiny")
    done = _run("-m", "examples.mortgage", "generate", "--out", data, "--years", "2007",
                "--loans-per-quarter", "3")
    assert done.returncode == 0, done.stderr
    done = _run(SCRIPT, "--data", data, "--device", "cpu", "--workers", "1", "--rounds", "2")
    assert done.returncode == 1
    assert "rows hold one class only (the AUC needs both): give more loans" in done.stderr
    assert "Traceback" not in done.stderr and "test AUC" not in done.stdout


def test_the_file_reads_like_a_demo():
    """At most 250 lines of at most 88 characters, nothing of the repository's own but the
    library's public names, and no table packed into a string."""
    text = open(SCRIPT).read()
    lines = text.splitlines()
    assert len(lines) <= 250
    assert max(len(line) for line in lines) <= 88
    assert "import examples" not in text and "from examples" not in text
    assert ".split()" not in text and "dict.fromkeys([" not in text
    for name in ("cluster_client(", "memory_report(client)", "without_work_stealing(client)",
                 "cluster_workers(client)", "xgboost_config(client)"):
        assert f"dask_gpu_interop.{name}" in text
    assert not re.search(r"dask_gpu_interop\.(_|\w+\.)", text)  # public names only


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
    assert "training on gpu" in mine.stdout
    assert _auc(mine.stdout) == _auc(app.stdout)
    assert "no GPU" not in mine.stdout  # the plugin set up the worker's pool

"""The benchmarks' harness (benchmarks/common.py) on CPUs, and every script on it: each imports
the harness, and parses its arguments without running anything (``--help`` works without a
GPU library)."""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import common  # noqa: E402

SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "common")

H100 = {"gpus": ["NVIDIA H100 80GB HBM3 (81559 MiB, driver 580.159.04)"],
        "gpu_names": ["NVIDIA H100 80GB HBM3"], "cores": 16, "cpu_model": "Intel(R) Xeon(R)",
        "memory": "125.80 GiB", "versions": {"dask": "2026.7.1"}}
TWO_H200 = {"gpus": ["NVIDIA H200 (143771 MiB, driver 580)"] * 2, "cores": 32}


def test_one_spelling_of_a_machine_in_text_and_in_file_names():
    assert common.machine_label(H100) == "1x NVIDIA H100 80GB HBM3, 16 cores"
    assert common.machine_label(TWO_H200) == "2x NVIDIA H200, 32 cores"
    assert common.machine_label(TWO_H200, used=1) == "2x NVIDIA H200, 32 cores (1 GPU used)"
    assert common.machine_label({"cores": 2}) == "no GPU, 2 cores"
    assert common.machine_name(H100) == "1xH100"
    assert common.machine_name(TWO_H200) == "2xH200"
    assert common.machine_name(TWO_H200, used=1) == "1xH200"
    assert common.machine_name({"gpu_names": ["Tesla V100-SXM2-16GB"]}) == "1xV100"
    assert common.machine_name({"cores": 8}) == "cpu8"


def test_the_results_header_names_command_machine_and_commit():
    lines = common.header("Title", "python benchmarks/x.py --a 1", H100, "abc1234", "today")
    assert lines[0] == "# Title"
    assert "- command: `python benchmarks/x.py --a 1`" in lines
    assert lines[3].startswith("- machine: 1x NVIDIA H100 80GB HBM3, 16 cores (CPU: Intel")
    assert "- commit: abc1234, date: today" in lines
    assert "- versions: dask 2026.7.1" in lines


def test_the_command_line_is_relative_to_the_checkout(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    script = str(BENCHMARKS / "mortgage.py")
    assert (common.command_line(script, ["--data", "/tmp/a b"])
            == "python benchmarks/mortgage.py --data '/tmp/a b'")


def test_repeats_and_spread():
    assert common.spread([1.0, 3.0, 2.0]) == "2.00 s (1.00-3.00, 3 runs)"
    assert common.spread([1.5]) == "1.50 s (1 run)"
    assert common.spread(common.summary([4, 2]), unit="ms", digits=1) == "3.0 ms (2.0-4.0, 2 runs)"
    assert common.median_range([6.0, 8.0, 7.0]) == "7.00 (6.00-8.00)"
    assert common.median_range([1.25, 3.5], "{:.1f}") == "2.4 (1.2-3.5)"
    calls = []
    times = common.timed(lambda: calls.append("f"), 3, warmup=2, sync=lambda: calls.append("s"))
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert calls == ["f", "f"] + ["s", "f", "s"] * 3  # warm-ups untimed, each timed call synced


def test_variants_alternate_round_by_round():
    assert list(common.alternate("ab", 2)) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert [n for _, n in common.alternate("abc", 3, rotate=True)] == list("abcbcacab")
    assert list(common.interleave({"gpu": 3, "cpu": 1})) == [
        (0, "gpu"), (0, "cpu"), (1, "gpu"), (2, "gpu")]
    assert list(common.alternate([], 3)) == []


def test_results_files(tmp_path):
    stem = str(tmp_path / "sub" / "x-1xH100")
    assert common.write_results(stem, "# t", {"a": 1}) == stem + ".md"
    assert Path(stem + ".md").read_text() == "# t\n"
    assert json.loads(Path(stem + ".json").read_text()) == {"a": 1}
    common.write_results(str(tmp_path / "only"), "# t\n")
    assert not (tmp_path / "only.json").exists()


def test_the_checkout_commit():
    assert common.commit() and len(common.commit()) >= 7


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_uses_the_harness_and_parses_without_running(name):
    tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported & {"common", "benchmarks.common"}, f"{name}.py does not import the harness"
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {"parser", "parse", "main"} <= functions, f"{name}.py: parser(), parse(), main()"
    module = importlib.import_module(name)  # no GPU library at import time
    with pytest.raises(SystemExit) as done:
        module.parse(["--help"])
    assert done.value.code == 0
    with pytest.raises(SystemExit) as done:
        module.parse(["--no-such-flag"])
    assert done.value.code == 2


def test_scripts_that_write_results_write_them_through_the_harness():
    for name in SCRIPTS:
        text = (BENCHMARKS / f"{name}.py").read_text()
        assert ".write_text(" not in text and 'open(os.path.join(args.out' not in text, name
        if name != "peer":  # peer.py prints JSON for the others' results files
            assert "write_results(" in text, name


def test_transfer_alternates_the_kinds_after_a_warm_up_round(monkeypatch):
    import transfer

    calls = []

    def fake(client, kind, nbytes, seed, w0, w1):
        calls.append((seed, kind))
        if kind == "cudf" and seed == 1:
            raise RuntimeError("boom")
        return 0.5, {"duration": 0.25}, {"type": kind, "on_gpu": True}

    monkeypatch.setattr(transfer, "transfer_once", fake)
    rows = transfer.measure(None, ["cupy", "torch", "cudf"], 1 << 20, 2, "w0", "w1")
    assert calls == [(0, "cupy"), (0, "torch"), (0, "cudf"), (1, "cupy"), (1, "torch"),
                     (1, "cudf"), (2, "cupy"), (2, "torch")]  # cudf failed: not retried
    assert rows["cupy"]["times"] == [0.5, 0.5] and rows["torch"]["worker_times"] == [0.25] * 2
    assert rows["cudf"] == {"error": "RuntimeError: boom"}


def test_memory_combines_a_variants_processes():
    import memory

    one = {"us_per_alloc_free": 8.0, "spread_us": 1.0}
    assert memory.combine([one], "us_per_alloc_free", "spread_us") == one
    got = memory.combine([one, {"us_per_alloc_free": 12.0, "spread_us": 0.5},
                          {"us_per_alloc_free": 9.0, "spread_us": 0.1}],
                         "us_per_alloc_free", "spread_us")
    assert got["us_per_alloc_free"] == 9.0 and got["spread_us"] == 4.0 and len(got["runs"]) == 3
    assert memory.combine([{"error": "x"}], "us_per_alloc_free", "spread_us") == {"error": "x"}
    text = memory.markdown({"alloc": {"cudaMalloc": {"us_per_alloc_free": 80.0, "spread_us": 2},
                                      "plugin-pool": got}}, "python benchmarks/memory.py", H100,
                           "abc")
    assert "- machine: 1x NVIDIA H100 80GB HBM3, 16 cores" in text
    assert "| plugin-pool | 9.00 ± 4.00 | 8.9x |" in text


def test_first_run_table_shows_each_run_and_the_later_ones_spread():
    import mortgage_first_run

    run = {"etl_s": 2.0, "gb_per_s": 4.5, "first_compute_after_s": 0.1, "idle_s": 0.2,
           "tasks": {"process_part": {"count": 13, "sum_s": 3.5}}}
    payload = {"command": "python benchmarks/mortgage_first_run.py --data d", "commit": "abc",
               "date": "today", "machine": H100, "partitions": 13, "bytes": 9 * 2**30,
               "cluster_ready_s": 6.0,
               "runs": [{**run, "run": 1, "etl_s": 8.0}, {**run, "run": 2},
                        {**run, "run": 3, "etl_s": 3.0}]}
    text = mortgage_first_run.markdown(payload)
    assert "| 1 | 8.00 s | 4.50 | 0.10 s | 0.20 s | process_part 13, 3.50 s |" in text
    assert "Later runs' ETL: 2.50 (2.00-3.00) s" in text


def test_xgboost_growth_gives_medians_over_alternating_repeats():
    import types

    import xgboost_growth

    results = [{"policy": "lossguide", "workers": w, "seconds": s, "train_auc": 0.9}
               for w, s in ((1, 3.0), (2, 12.0), (1, 5.0), (2, 14.0))]
    args = types.SimpleNamespace(rows=100, partitions=4, rounds=2)
    text = xgboost_growth.markdown(H100, results, "python benchmarks/xgboost_growth.py", args, "c")
    assert "| lossguide | 1 | 4.00 (3.00-5.00) | 1.00x | 0.9000 |" in text
    assert "| lossguide | 2 | 13.00 (12.00-14.00) | 0.31x | 0.9000 |" in text


def test_ecg_report_takes_the_median_of_alternating_runs(tmp_path):
    import types

    import ecg

    def run(scale):
        times = {stage: scale for stage in ecg.STAGES}
        return {"times": times, "where": "1 process", "chunks": 4, "beats": 10, "f1": 1.0,
                "auc": 0.99, "steps": 5}

    columns = {"CPU in-process": ecg.combine([run(1.0), run(3.0), run(2.0)])}
    assert columns["CPU in-process"]["times"]["read"] == 2.0
    assert columns["CPU in-process"]["segmentation"] == [4.0, 12.0, 8.0]
    csv = tmp_path / "ecg.csv"
    csv.write_text("x\n")
    truth = types.SimpleNamespace(seconds=3600, rate=250, signal=[0] * 10, peaks=[0] * 2)
    text = ecg.report(columns, None, truth, csv, ["--devices", "cpu"], {"cores": 2})
    assert text.startswith("# ECG pipeline, 1 h at 250 Hz")
    assert "- command: `python benchmarks/ecg.py --devices cpu`" in text
    assert "- machine: no GPU, 2 cores" in text
    assert "| read | 2.000 |" in text and "the median of 3 runs" in text
    assert "CPU in-process 8.000 (4.000-12.000) s" in text

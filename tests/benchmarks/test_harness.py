"""The benchmarks' harness (benchmarks/common.py) on CPUs, and every script on it: each fills in
the one contract (``common.Script``), imports the harness as a package module, and parses its
arguments without running anything (``--help`` works without a GPU library)."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from benchmarks import common

from .scripts import BENCHMARKS, CHILD_SCRIPTS, SCRIPTS, path_of

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
    assert common.machine_name(H100, used=0) == "cpu16"  # a run on the CPUs of a GPU machine


def test_the_results_header_names_command_machine_and_commit():
    lines = common.header("Title", "python -m benchmarks.x --a 1", H100, "abc1234", "today")
    assert lines[0] == "# Title"
    assert "- command: `python -m benchmarks.x --a 1`" in lines
    assert lines[3].startswith("- machine: 1x NVIDIA H100 80GB HBM3, 16 cores (CPU: Intel")
    assert "- commit: abc1234, date: today" in lines
    assert "- versions: dask 2026.7.1" in lines


def test_the_command_line_is_the_module_whatever_the_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    script = str(BENCHMARKS / "shuffle.py")
    assert (common.command_line(script, ["--sizes", "64MiB"])
            == "python -m benchmarks.shuffle --sizes 64MiB")
    script = str(BENCHMARKS / "examples" / "mortgage.py")  # an application's benchmark
    assert (common.command_line(script, ["--data", "/tmp/a b"])
            == "python -m benchmarks.examples.mortgage --data '/tmp/a b'")


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
def test_every_script_fills_in_the_contract_and_parses_without_running(name):
    text = path_of(name).read_text()
    tree = ast.parse(text)
    imported = {(node.module, node.level) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)}
    harness = ("common", name.count(".") + 1)  # .common, or ..common from benchmarks/examples
    assert "sys.path" not in text, f"{name}.py changes sys.path: it is a package module"
    module = importlib.import_module(f"benchmarks.{name}")  # no GPU library at import time
    if name not in CHILD_SCRIPTS:  # run by another script in a child process: no contract
        assert harness in imported, f"{name}.py does not import the harness ({harness})"
        assert isinstance(module.SCRIPT, common.Script), f"{name}.py: SCRIPT = Script(...)"
        assert (module.parse, module.main) == (module.SCRIPT.parse, module.SCRIPT.main)
        assert module.SCRIPT.module == f"benchmarks.{name}"
    with pytest.raises(SystemExit) as done:
        module.parse(["--help"])
    assert done.value.code == 0
    with pytest.raises(SystemExit) as done:
        module.parse(["--no-such-flag"])
    assert done.value.code == 2


def test_results_files_are_written_by_the_harness_alone():
    for name in SCRIPTS:
        text = path_of(name).read_text()
        assert ".write_text(" not in text and "write_results(" not in text, name
        assert "open(os.path.join(args.out" not in text, name


def _toy(measured: list, fail: bool = False, **fields) -> common.Script:
    """A script that records its scratch folder and its figure, and fails when asked."""

    def options(parser):
        parser.add_argument("--size", type=int, default=3)
        parser.add_argument("--tag", default="")
        parser.add_argument("--dry-run", action="store_true")

    def check(parser, args):
        if args.size < 1:
            parser.error(f"--size {args.size}: at least 1")

    def measure(args, run):
        folder = run.scratch()
        measured.append(folder)
        assert run.payload["machine_name"] == "cpu4" or args.machine  # read before
        run.payload["figure"] = args.size * 2
        run.save()
        if fail:
            raise RuntimeError("the measurement failed")

    def markdown(payload):
        return f"# toy on {payload['machine_name']}\n\n| figure | {payload['figure']} |\n"

    return common.Script(str(BENCHMARKS / "toy.py"), "A toy.\n\nMore.", options=options,
                         check=check, measure=measure, markdown=markdown, name="toy",
                         gpus=lambda args: 0, **fields)


def test_a_script_measures_once_writes_its_results_and_tidies(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common, "machine_in_child", lambda: {"cores": 4, "gpus": []})
    measured = []
    payload = _toy(measured).main(["--size", "5", "--tag", "t", "--out", str(tmp_path),
                                   "--commit", "abc"])
    assert len(measured) == 1 and not any(map(Path.exists, map(Path, measured)))
    assert payload["command"] == "python -m benchmarks.toy --size 5 --tag t --out " + str(
        tmp_path) + " --commit abc"
    assert payload["commit"] == "abc" and payload["machine_name"] == "cpu4"
    assert payload["figure"] == 10
    saved = json.loads((tmp_path / "toy-cpu4-t.json").read_text())
    assert saved["figure"] == 10 and saved["command"] == payload["command"]
    out = capsys.readouterr().out
    assert "| figure | 10 |" in out and f"written: {tmp_path / 'toy-cpu4-t.md'}" in out


def test_a_failed_measurement_keeps_what_it_saved_and_tidies(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "machine_in_child", lambda: {"cores": 4, "gpus": []})
    measured = []
    with pytest.raises(RuntimeError, match="the measurement failed"):
        _toy(measured, fail=True).main(["--out", str(tmp_path), "--machine", "here"])
    assert not Path(measured[0]).exists()
    assert json.loads((tmp_path / "toy-here.json").read_text())["figure"] == 6


def test_the_machine_is_read_in_a_process_of_its_own():
    import os
    import sys

    before = set(sys.modules)
    info = common.machine_in_child()
    assert info["cores"] == os.cpu_count() and info["python"] and "versions" in info
    assert "dask" in info["versions"] and "pandas" in info["versions"]
    assert not {"xgboost", "pyarrow"} & (set(sys.modules) - before)  # imported over there


def test_bad_arguments_and_dry_runs_measure_nothing(tmp_path, capsys):
    measured = []
    with pytest.raises(SystemExit) as done:
        _toy(measured).main(["--size", "0", "--out", str(tmp_path)])
    assert done.value.code == 2 and "--size 0: at least 1" in capsys.readouterr().err
    toy = _toy(measured, dry_run=lambda args: f"would measure {args.size}")
    assert toy.main(["--dry-run", "--out", str(tmp_path)]) is None
    assert capsys.readouterr().out == "would measure 3\n"
    assert measured == [] and list(tmp_path.iterdir()) == []
    args = toy.parse(["--size", "2"])
    assert args.argv == ["--size", "2"] and args.out == common.RESULTS and args.machine is None


def test_the_words_after_a_double_dash_are_kept_for_a_command(tmp_path):
    toy = _toy([], rest=True)
    args = toy.parse(["--size", "2", "--", "--device", "cpu", "--size", "9"])
    assert args.size == 2 and args.rest == ["--device", "cpu", "--size", "9"]
    assert toy.parse(["--size", "2"]).rest == []
    assert "python -m benchmarks.toy" in toy.parser().format_usage()
    assert toy.parser().description == "A toy."


def test_without_out_a_script_writes_no_results_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common, "machine_in_child", lambda: {"cores": 4, "gpus": []})
    monkeypatch.chdir(tmp_path)
    payload = _toy([], out=None).main([])
    assert payload["figure"] == 6 and list(tmp_path.iterdir()) == []
    assert "written:" not in capsys.readouterr().out


def test_a_child_process_gives_its_result_or_its_last_error_line():
    assert common.in_child("m.ordered_pairs(3)[:2]",
                           setup="from benchmarks import peer as m") == [[0, 1], [0, 2]]
    assert common.in_child("os.environ['PROBE_V']", setup="import os",
                           env={"PROBE_V": "seen"}) == "seen"
    with pytest.raises(RuntimeError) as failed:
        common.in_child("1 / 0")
    assert str(failed.value).splitlines()[0] == "ZeroDivisionError: division by zero"


def test_transfer_alternates_the_kinds_after_a_warm_up_round(monkeypatch):
    from benchmarks import transfer

    calls = []

    def fake(client, kind, nbytes, seed, w0, w1):
        calls.append((seed, kind))
        if kind == "cudf" and seed == 1:
            raise RuntimeError("boom")
        return 0.5, {"duration": 0.25}, {"type": kind, "on_gpu": True}

    monkeypatch.setattr(transfer, "transfer_once", fake)
    rows = transfer.measure_pair(None, ["cupy", "torch", "cudf"], 1 << 20, 2, "w0", "w1")
    assert calls == [(0, "cupy"), (0, "torch"), (0, "cudf"), (1, "cupy"), (1, "torch"),
                     (1, "cudf"), (2, "cupy"), (2, "torch")]  # cudf failed: not retried
    assert rows["cupy"]["times"] == [0.5, 0.5] and rows["torch"]["worker_times"] == [0.25] * 2
    assert rows["cudf"] == {"error": "RuntimeError: boom"}


def test_memory_combines_a_variants_processes():
    from benchmarks import memory

    one = {"us_per_alloc_free": 8.0, "spread_us": 1.0}
    assert memory.combine([one], "us_per_alloc_free", "spread_us") == one
    got = memory.combine([one, {"us_per_alloc_free": 12.0, "spread_us": 0.5},
                          {"us_per_alloc_free": 9.0, "spread_us": 0.1}],
                         "us_per_alloc_free", "spread_us")
    assert got["us_per_alloc_free"] == 9.0 and got["spread_us"] == 4.0 and len(got["runs"]) == 3
    assert memory.combine([{"error": "x"}], "us_per_alloc_free", "spread_us") == {"error": "x"}
    text = memory.markdown({"alloc": {"cudaMalloc": {"us_per_alloc_free": 80.0, "spread_us": 2},
                                      "plugin-pool": got},
                            "command": "python -m benchmarks.memory", "machine": H100,
                            "commit": "abc", "date": "today"})
    assert "- machine: 1x NVIDIA H100 80GB HBM3, 16 cores" in text
    assert "| plugin-pool | 9.00 ± 4.00 | 8.9x |" in text

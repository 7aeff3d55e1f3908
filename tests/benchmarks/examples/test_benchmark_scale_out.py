"""The scale-out benchmark's own logic on CPUs: its runs, their order, and one real run of the
etl command on the CPUs, read back from its results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.examples import scale_out

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A small classic dataset, made once by the README's generate command."""
    out = tmp_path_factory.mktemp("scale-out") / "data"
    subprocess.run([sys.executable, "-m", "examples.mortgage", "generate", "--out", str(out),
                    "--years", "2006", "--loans-per-quarter", "200"], cwd=ROOT, check=True,
                   capture_output=True)
    return out


def test_each_section_runs_on_its_configurations_alternating():
    args = scale_out.parse(["--etl", "9GiB=/d9", "--default-job", "--gpus", "1,2", "--ucx", "etl",
                            "--cpu", "default", "--runs", "2"])
    runs = [(kind, label, name) for kind, label, name, _, _ in scale_out.plan(args)]
    assert runs[:4] == [("etl", "9GiB", "1 GPU tcp"), ("etl", "9GiB", "2 GPUs tcp"),
                        ("etl", "9GiB", "2 GPUs ucx"), ("etl", "9GiB", "1 GPU tcp")]
    assert len([r for r in runs if r[0] == "etl"]) == 6  # no UCX on one GPU, no CPUs
    assert [name for kind, label, name in runs if label == "default"] == [
        "1 GPU tcp", "2 GPUs tcp", "CPUs"] * 2


def test_a_configuration_sees_only_its_gpus():
    configs = scale_out.configurations([1, 4], True, True)
    assert configs["4 GPUs ucx"] == ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                                     ["--device", "gpu", "--protocol", "ucx", "--workers", "4"])
    assert configs["CPUs"] == ({"CUDA_VISIBLE_DEVICES": ""}, ["--device", "cpu"])
    assert "1 GPU ucx" not in configs


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "1,2"], "nothing to time"),
    (["--etl", "nolabel", "--gpus", "1"], "LABEL=DIR"),
    (["--etl", "a=/d", "--gpus", "0"], "GPU counts"),
    (["--etl", "a=/d", "--cpu", "etl,train"], "--cpu"),
    (["--etl", "a=/d", "--gpus", "none", "--real-cluster", "2"], "needs GPUs"),
    (["--etl", "a=/d", "--joins", "quarter,hash"], "--joins: 'hash' is not one of"),
    (["--default-job", "--joins", "loan"], "--joins applies to --etl and --job"),
])
def test_bad_arguments_are_refused_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit):
        scale_out.parse(argv)
    assert message in capsys.readouterr().err


def test_the_etl_command_on_the_cpus_is_timed_beside_its_etl_line(tmp_path, data):
    scale_out.main(["--etl", f"tiny={data}", "--gpus", "none", "--cpu", "etl",
                    "--scratch", str(tmp_path), "--out", str(tmp_path), "--machine", "cpu-test"])
    results = json.loads((tmp_path / "scale-out-cpu-test.json").read_text())
    (run,) = results["etl"]["tiny"]["CPUs"]
    assert run["rc"] == 0 and run["first"]
    assert 0 < run["etl"]["seconds"] < run["wall"]
    text = (tmp_path / "scale-out-cpu-test.md").read_text()
    assert "| CPUs |" in text and "wall at most the work" in text
    assert "dirty pages were written to disk" in text and run["flush"] >= 0


def test_each_command_starts_after_the_machines_writes_reach_the_disk(monkeypatch):
    calls = []
    monkeypatch.setattr(scale_out.os, "sync", lambda: calls.append("sync"))

    def timed(command, env, timeout, cwd):
        calls.append("command")
        return {"wall": 1.0, "rc": 0, "output": "", "figures": None}

    monkeypatch.setattr(scale_out, "timed", timed)
    entry = scale_out.measure_one("1 GPU tcp", ["etl"], {}, 60, first=True)
    assert calls == ["sync", "command"]  # flushed first, and outside the command's clock
    assert entry["flush"] >= 0 and entry["wall"] == 1.0


def test_the_etl_table_shows_the_median_steps_of_the_last_worker_to_join():
    def run(process, joined):
        return {"wall": 5.0, "rc": 0, "first": False, "etl": {"seconds": 1.0},
                "stages": {"cluster start": joined + 0.1, "cluster stop": 0.2},
                "worker_starts": [{"address": "a", "process": process, "preloads": 1.0,
                                   "joined": joined}, {"address": "b", "process": 0.0,
                                                       "joined": 0.5}]}

    lines = scale_out.table({"2 GPUs tcp": [run(0.2, 2.0), run(0.4, 3.0), run(0.3, 2.5)],
                             "1 GPU tcp": [{"wall": 4.0, "rc": 0, "first": True,
                                            "etl": {"seconds": 2.0}, "stages": {}}]}, "etl")
    assert scale_out.WORKER_STEPS in lines[0]
    two = next(line for line in lines if line.startswith("| 2 GPUs tcp"))
    assert two.endswith("| 0.30 / 1.00 / - / 2.50 s |")  # medians; no memory step taken
    assert next(line for line in lines if line.startswith("| 1 GPU tcp")).endswith("| - |")


def test_an_etl_table_whose_one_gpu_runs_all_failed_says_so_and_compares_nothing():
    ok = {"wall": 5.0, "rc": 0, "first": False, "etl": {"seconds": 1.0}, "stages": {}}
    failed = {"wall": 2.6, "rc": 1, "first": True, "stages": {}}
    lines = scale_out.table({"1 GPU tcp": [failed, dict(failed, first=False)],
                             "2 GPUs tcp": [ok]}, "etl")  # fmt: skip
    assert next(line for line in lines if line.startswith("| 1 GPU tcp |")).startswith(
        "| 1 GPU tcp | failed |")
    two = next(line for line in lines if line.startswith("| 2 GPUs tcp |")).split(" | ")
    assert two[4] == "-"  # no 1-GPU wall clock to hold it against


def test_what_a_command_reports_is_read_from_its_figures():
    etl = {"rows": 10, "bytes": 100, "partitions": 2, "seconds": 1.5}
    assert scale_out.reported({"figures": "examples.mortgage etl", "etl": etl}) == {
        "stages": {}, "etl": etl}
    job = {"stages": {"ETL": 1.5, "training": 3.0}, "etl": etl, "auc": 0.9, "total": 9.0}
    assert scale_out.reported(job) == {"stages": job["stages"], "etl": etl, "auc": 0.9}
    streamed = {"stages": {"cluster start": 2.0, "placement": 0.25, "ETL and sketch": 1.5,
                           "quantize": 0.5, "training": 3.0, "cluster stop": 0.5}}
    assert scale_out.work_seconds(streamed, "job") == 5.0  # the ETL into the matrix, training
    ecg = {"figures": "examples.ecg", "stages": {"read": 0.5, "score": 0.25}, "pipeline": 0.75}
    found = scale_out.reported(ecg)
    assert found["stages"] == {"read": 0.5, "score": 0.25, "pipeline": 0.75}
    assert scale_out.work_seconds(found, "ecg") == 0.75
    assert "auc" not in found  # a recording of the user's: no truth to score against
    scored = {**ecg, "scores": {"detection": {"f1": 0.99}, "outliers": {"auc": 0.97}}}
    found = scale_out.reported(scored)
    assert (found["auc"], found["f1"]) == (0.97, 0.99)
    assert scale_out.reported(None) == {"stages": {}}  # a command that failed wrote none


def test_joins_run_the_etl_and_job_sections_once_with_each_join_alternating():
    args = scale_out.parse(["--etl", "9GiB=/d9", "--default-job", "--gpus", "1,2",
                            "--joins", "quarter,loan,dask", "--runs", "2"])
    runs = scale_out.plan(args)
    etl = [(name, flags) for kind, label, name, _, flags in runs if kind == "etl"]
    assert [name for name, _ in etl[:6]] == [
        "1 GPU tcp", "1 GPU tcp, join loan", "1 GPU tcp, join dask",
        "2 GPUs tcp", "2 GPUs tcp, join loan", "2 GPUs tcp, join dask"]
    assert len(etl) == 12 and [name for name, _ in etl[6:]] == [name for name, _ in etl[:6]]
    flags = dict(etl)
    assert "--join" not in flags["1 GPU tcp"]  # the per-quarter join: the commands' default
    assert flags["2 GPUs tcp, join loan"] == ["--device", "gpu", "--protocol", "tcp",
                                              "--workers", "2", "--join", "loan"]
    assert flags["1 GPU tcp, join dask"][-2:] == ["--join", "dask"]
    # the default job's section keeps its own runs
    assert [name for kind, label, name, _, _ in runs if label == "default"] == [
        "1 GPU tcp", "2 GPUs tcp"] * 2
    dry = scale_out.dry_run(args)
    assert "etl 9GiB [2 GPUs tcp, join loan]: -m examples.mortgage etl --data /d9" in dry
    assert dry.count("--join loan") == 4


def test_full_teardown_runs_each_several_gpu_configuration_again_with_quick_exit_off():
    args = scale_out.parse(["--etl", "9GiB=/d9", "--default-job", "--gpus", "1,2,4",
                            "--full-teardown", "default", "--runs", "2"])
    runs = scale_out.plan(args)
    assert [name for kind, label, name, _, _ in runs if label == "default"] == [
        "1 GPU tcp", "2 GPUs tcp", "2 GPUs tcp, full teardown", "4 GPUs tcp",
        "4 GPUs tcp, full teardown"] * 2  # one GPU's worker runs in the command's process
    assert [name for kind, _, name, _, _ in runs if kind == "etl"] == [
        "1 GPU tcp", "2 GPUs tcp", "4 GPUs tcp"] * 2  # only the sections asked for
    flags = {name: f for _, label, name, _, f in runs if label == "default"}
    assert flags["2 GPUs tcp, full teardown"] == flags["2 GPUs tcp"]
    configs = scale_out.configurations([2], False, False)
    assert scale_out.environment("2 GPUs tcp", configs) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert scale_out.environment("2 GPUs tcp, full teardown", configs) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "DASK_GPU_INTEROP__WORKER__QUICK_EXIT": "false"}


def test_spawned_runs_each_several_gpu_configuration_again_with_the_fork_server_off():
    args = scale_out.parse(["--etl", "3GiB=/d3", "--gpus", "1,2", "--spawned", "etl",
                            "--full-teardown", "etl", "--ucx", "etl"])
    names = [name for _, _, name, _, _ in scale_out.plan(args)]
    assert names == ["1 GPU tcp", "2 GPUs tcp", "2 GPUs tcp, spawned",
                     "2 GPUs tcp, full teardown", "2 GPUs ucx", "2 GPUs ucx, spawned",
                     "2 GPUs ucx, full teardown"]  # one setting off at a time
    configs = scale_out.configurations([2], True, False)
    assert scale_out.environment("2 GPUs ucx, spawned", configs) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "DASK_GPU_INTEROP__WORKER__FORK_SERVER": "false"}
    assert scale_out.environment("2 GPUs ucx", configs) == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_worker_process_runs_one_gpu_again_with_its_worker_in_a_process_of_its_own():
    args = scale_out.parse(["--etl", "3GiB=/d3", "--default-job", "--gpus", "1,2",
                            "--worker-process", "etl", "--runs", "2"])
    runs = scale_out.plan(args)
    etl = [(name, flags) for kind, _, name, _, flags in runs if kind == "etl"]
    assert [name for name, _ in etl] == ["1 GPU tcp", "1 GPU tcp, worker process",
                                         "2 GPUs tcp"] * 2
    flags = dict(etl)
    assert flags["1 GPU tcp, worker process"] == [*flags["1 GPU tcp"], "--processes"]
    assert "--processes" not in flags["2 GPUs tcp"]
    assert [name for kind, _, name, _, _ in runs if kind == "job"] == [
        "1 GPU tcp", "2 GPUs tcp"] * 2  # only the sections asked for
    configs = scale_out.configurations([1], False, False)
    assert scale_out.environment("1 GPU tcp, worker process", configs) == {
        "CUDA_VISIBLE_DEVICES": "0"}


def test_the_goals_are_the_commands_own_runs_not_a_worker_process_variant():
    entry = {"wall": 5.0, "rc": 0, "first": False, "etl": {"seconds": 2.0}}
    runs = {"1 GPU tcp": [entry], "1 GPU tcp, worker process": [{**entry, "wall": 9.0}]}
    goals = scale_out.goals({"etl": {"3GiB": runs}, "jobs": {}, "real": {}})
    assert [goal for goal, _ in goals] == ["etl 3GiB, 1 GPU tcp: wall at most the work + 4 s"]


def test_a_job_table_shows_the_cluster_stop_and_goals_leave_teardown_runs_out():
    entry = {"wall": 10.0, "rc": 0, "first": False,
             "stages": {"ETL": 1.0, "DMatrix": 1.0, "training": 2.0, "cluster stop": 0.4}}
    slow = {**entry, "wall": 11.0, "stages": {**entry["stages"], "cluster stop": 1.4}}
    runs = {"1 GPU tcp": [entry], "2 GPUs tcp": [entry],
            "2 GPUs tcp, full teardown": [slow]}
    lines = scale_out.table(runs, "job")
    assert lines[0].endswith("| cluster start | cluster stop |")
    assert lines[-1].startswith("| 2 GPUs tcp, full teardown | 11.00")
    assert lines[-1].endswith("| - | 1.40 s (1 run) |")  # no start line in these stages
    goals = scale_out.goals({"etl": {}, "jobs": {"default": runs}, "real": {}})
    assert [goal for goal, _ in goals] == ["job default, 2 GPUs tcp: at least 1x 1 GPU's speed "
                                           "(wall)"]


def test_the_join_by_loan_is_timed_on_the_cpus(tmp_path, data):
    scale_out.main(["--etl", f"tiny={data}", "--gpus", "none", "--cpu", "etl",
                    "--joins", "quarter,loan", "--scratch", str(tmp_path), "--out",
                    str(tmp_path), "--machine", "cpu-test"])
    results = json.loads((tmp_path / "scale-out-cpu-test.json").read_text())
    runs = results["etl"]["tiny"]
    (plain,), (loan,) = runs["CPUs"], runs["CPUs, join loan"]
    assert plain["rc"] == 0 and loan["rc"] == 0
    assert plain["etl"]["join"] == "quarter" and loan["etl"]["join"] == "loan"
    assert 0 < loan["etl"]["join_seconds"] < loan["etl"]["seconds"] < loan["wall"]
    assert plain["etl"]["rows"] == loan["etl"]["rows"]
    assert "| CPUs, join loan |" in (tmp_path / "scale-out-cpu-test.md").read_text()


def test_an_etl_table_shows_the_cluster_start_and_stop_lines_the_command_printed():
    entry = {"wall": 6.0, "rc": 0, "first": True, "etl": {"seconds": 1.0},
             "stages": {"start": 0.8, "cluster start": 3.5, "ETL": 1.1, "cluster stop": 0.4,
                        "other": 0.2}}
    lines = scale_out.table({"2 GPUs tcp": [entry, {**entry, "first": False}]}, "etl")
    assert lines[0].endswith(
        f"| first run on the machine | cluster start | cluster stop | {scale_out.WORKER_STEPS} |")
    cells = [c.strip() for c in lines[-1].split("|")[1:-1]]
    assert cells[0] == "2 GPUs tcp" and cells[3] == "5.00 s (5.00-5.00, 2 runs)"  # wall - ETL
    assert cells[-3:-1] == ["3.50 s (3.50-3.50, 2 runs)", "0.40 s (0.40-0.40, 2 runs)"]


def test_the_cpus_run_again_with_the_fork_server_off_when_asked():
    args = scale_out.parse(["--etl", "1GiB=/d1", "--gpus", "none", "--cpu", "etl",
                            "--spawned", "etl", "--runs", "2"])
    names = [name for _, _, name, _, _ in scale_out.plan(args)]
    assert names == ["CPUs", "CPUs, spawned"] * 2
    configs = scale_out.configurations([], False, True)
    assert scale_out.environment("CPUs, spawned", configs) == {
        "CUDA_VISIBLE_DEVICES": "", "DASK_GPU_INTEROP__WORKER__FORK_SERVER": "false"}


def project_copy(directory: Path) -> Path:
    """A copy of the project's code in ``directory``, as ``git archive`` of a commit gives it."""
    import shutil

    for name in ("dask_gpu_interop", "examples"):
        shutil.copytree(ROOT / name, directory / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return directory


def test_a_tree_runs_every_configuration_again_from_its_copy_alternating(tmp_path):
    before = project_copy(tmp_path / "before")
    args = scale_out.parse(["--etl", "3GiB=/d3", "--gpus", "1,2", "--spawned", "etl",
                            "--tree", f"before={before}", "--runs", "2"])
    names = [name for _, _, name, _, _ in scale_out.plan(args)]
    assert names == ["1 GPU tcp", "1 GPU tcp, tree before", "2 GPUs tcp",
                     "2 GPUs tcp, tree before", "2 GPUs tcp, spawned",
                     "2 GPUs tcp, spawned, tree before"] * 2
    configs = scale_out.configurations([2], False, False)
    env = scale_out.environment("2 GPUs tcp, spawned, tree before", configs, args.tree)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(before)
    assert env["DASK_GPU_INTEROP__WORKER__FORK_SERVER"] == "false"
    assert scale_out.tree_of("2 GPUs tcp, tree before", args.tree) == str(before)
    assert scale_out.tree_of("2 GPUs tcp", args.tree) == str(ROOT)
    entry = {"wall": 5.0, "rc": 0, "first": False, "etl": {"seconds": 2.0}}
    runs = {"1 GPU tcp": [entry], "2 GPUs tcp": [entry], "2 GPUs tcp, tree before": [entry]}
    goals = scale_out.goals({"etl": {"3GiB": runs}, "jobs": {}, "real": {}})
    assert not any("tree" in goal for goal, _ in goals)  # the goals are this code's


@pytest.mark.parametrize("tree, message", [
    ("before", "give NAME=DIR"),
    ("before={missing}", "holds no copy of the project"),
])
def test_a_tree_that_is_no_copy_is_refused(tmp_path, capsys, tree, message):
    with pytest.raises(SystemExit):
        scale_out.parse(["--etl", "a=/d", "--tree", tree.format(missing=tmp_path)])
    assert message in capsys.readouterr().err


def test_two_trees_of_one_name_are_refused(tmp_path, capsys):
    copy = project_copy(tmp_path / "copy")
    with pytest.raises(SystemExit):
        scale_out.parse(["--etl", "a=/d", "--tree", f"x={copy}", "--tree", f"x={copy}"])
    assert "a name of its own" in capsys.readouterr().err


def test_a_tree_run_runs_the_trees_code(tmp_path, data):
    """The copy's command ends at once with its own status: its runs fail, this code's pass."""
    copy = project_copy(tmp_path / "copy")
    (copy / "examples" / "mortgage" / "__main__.py").write_text("raise SystemExit(3)\n")
    scale_out.main(["--etl", f"tiny={data}", "--gpus", "none", "--cpu", "etl",
                    "--tree", f"broken={copy}", "--scratch", str(tmp_path), "--out",
                    str(tmp_path), "--machine", "cpu-test"])
    results = json.loads((tmp_path / "scale-out-cpu-test.json").read_text())["etl"]["tiny"]
    assert [run["rc"] for run in results["CPUs"]] == [0]
    assert [run["rc"] for run in results["CPUs, tree broken"]] == [3]


HANGS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("started", child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie waiting to be reaped) within
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_command_past_its_timeout_is_killed_with_its_children_and_kept_as_a_failure():
    run = scale_out.timed([sys.executable, "-c", HANGS], {}, timeout=3)
    assert run["rc"] == scale_out.TIMED_OUT and run["figures"] is None
    assert 3 <= run["wall"] < 60
    first = run["output"].splitlines()[0]
    assert first.startswith("started ")  # what it wrote before the limit is kept
    assert _gone(int(first.split()[1]))  # its own child (a worker process) is killed too
    assert "--timeout" in run["output"]

"""``python -m examples.mortgage`` end to end on CPUs: the default job, generate, etl, errors."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster

from dask_gpu_interop.worker import gpu_workers
from examples.mortgage import files, schema
from examples.mortgage.cli import mortgage as main

from .mortgage_sample import SAMPLE

CPU = ["--device", "cpu", "--workers", "2"]


def _run(args):
    result = CliRunner().invoke(main, [*args], catch_exceptions=False)
    return result


def test_the_default_job_runs_end_to_end(tmp_path):
    model = tmp_path / "model.json"
    result = _run([*CPU, "--years", "2007", "--loans-per-quarter", "120", "--rounds", "10",
                   "--model-out", str(model)])
    out = result.output
    assert result.exit_code == 0, out
    assert "cluster: 2 workers, device=cpu" in out
    assert re.search(r"generated .* 480 loans", out)
    stages = [m.group(1) for m in re.finditer(r"^  (\w[\w ]*?) +\d+\.\d\d s$", out, re.M)]
    assert stages == ["start", "cluster start", "generate", "imports", "placement",
                      "ETL and sketch", "quantize", "training", "report", "outputs",
                      "cluster stop", "other"]
    seconds = [float(x) for x in re.findall(r"^  \w[\w ]*? +(-?\d+\.\d\d) s$", out, re.M)]
    total = float(re.search(r"^total: (\d+\.\d\d) s since the command started$", out,
                            re.M).group(1))
    assert abs(sum(seconds) - total) <= 0.06  # every second of the command is in a stage
    assert seconds[-1] >= -0.01 and seconds[0] > 0  # "other" is what no stage measured
    assert re.search(r"rows/s", out)
    auc = float(re.search(r"test AUC: (\d\.\d+)", out).group(1))
    assert 0.5 < auc <= 1.0
    assert "(quarter 2007Q4)" in out
    assert out.count("no GPU: the plugin does nothing here") == 2
    assert "peak host memory per worker" in out
    assert model.stat().st_size > 1000


def test_generate_then_etl(tmp_path, running):
    data, out = tmp_path / "data", tmp_path / "features.parquet"
    result = _run(["generate", "--out", str(data), "--years", "2007", "--loans-per-quarter",
                   "40", "--scheduler", running[-1]])
    assert result.exit_code == 0, result.output
    assert "160 loans" in result.output
    lines = sum(sum(1 for _ in open(p)) for p in (data / "perf").iterdir())
    result = _run(["etl", *running, "--perf", str(data / "perf" / "Performance_*"),
                   "--acq", str(data / "acq"), "--names", str(data / "names.csv"),
                   "--out", str(out), "--partition-size", "1MiB"])
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert len(table) == lines
    assert list(table.columns) == [*schema.FEATURES, schema.LABEL]
    assert f"{lines:,} rows" in result.output
    again = _run(["etl", *running, "--data", str(data), "--out", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output
    again = _run(["generate", "--out", str(data), "--years", "2007"])
    assert again.exit_code == 2 and "--overwrite" in again.output


def test_etl_of_the_current_layout_by_data(tmp_path, running):
    data, out = tmp_path / "data", tmp_path / "features.parquet"
    result = _run(["generate", "--out", str(data), "--years", "2007", "--loans-per-quarter",
                   "40", "--layout", "current", "--scheduler", running[-1]])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in data.glob("2007*")) == [f"2007Q{q}.csv" for q in range(1, 5)]
    result = _run(["etl", *running, "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = sum(sum(1 for _ in open(p)) for p in data.glob("2007*"))
    assert len(pd.read_parquet(out)) == lines


def test_the_job_on_the_real_sample(running):
    result = _run([*running, "--data", SAMPLE, "--rounds", "5"])
    assert result.exit_code == 0, result.output
    assert "10,000 rows" in result.output
    assert "one quarter only" in result.output


def test_bad_rows_stop_with_file_and_line(tmp_path, running):
    perf = tmp_path / "Performance_2007Q3.txt_0"
    with open(os.path.join(SAMPLE, "Performance_2007Q3.txt_0")) as f:
        lines = f.readlines()[:100]
    lines[41] = lines[41].replace("|", "|junk|", 1)
    perf.write_text("".join(lines))
    args = ["etl", *running, "--perf", str(perf), "--acq", os.path.join(SAMPLE, "Acquisition_*"),
            "--out", str(tmp_path / "out")]
    result = _run(args)
    assert result.exit_code == 1
    assert f"{perf}:42: expected 31 fields, found 32" in result.output
    assert "--bad-rows warn" in result.output
    result = _run([*args, "--bad-rows", "skip", "--overwrite"])
    assert result.exit_code == 0 and "1 bad rows dropped" in result.output


def test_workers_that_cannot_import_the_example_are_named_before_the_work(tmp_path):
    """A worker started outside the checkout (no PYTHONPATH) cannot import the code the tasks
    call: the command says so, and where to start it, before any work."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with LocalCluster(n_workers=0, dashboard_address=None) as cluster:
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
             "--nthreads", "1", "--no-dashboard", "--no-nanny"], cwd=tmp_path,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**env, "CUDA_VISIBLE_DEVICES": ""})
        try:
            with Client(cluster) as client:
                client.wait_for_workers(1, timeout=60)
            out = tmp_path / "features"
            result = _run(["etl", "--device", "cpu", "--scheduler", cluster.scheduler_address,
                           "--data", SAMPLE, "--out", str(out)])
        finally:
            worker.terminate()
            worker.wait(30)
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "1 of 1 worker(s) of the cluster cannot import examples.mortgage.etl" in line
    assert "No module named 'examples'" in line
    assert f"start them from {root}, or with PYTHONPATH={root}" in line
    assert "ETL" not in result.output and not out.exists()


@pytest.mark.parametrize("args, message", [
    (["etl", "--device", "cpu", "--perf", "/nowhere/*", "--acq", "/nowhere", "--out", "x"],
     "no files found"),
    (["etl", "--device", "cpu", "--out", "x"], "give the files: --data PATH"),
    (["--device", "cpu", "--partition-size", "10"], "give at least 1MiB"),
    (["--device", "cpu", "--data", SAMPLE, "--holdout", "2007Q3"], "only quarter of the data"),
    (["--device", "cpu", "--years", "2010-2007"], "first <= last"),
    (["--device", "cpu", "--size", "lots"], "write a size such as"),
    (["generate", "--out", "x", "--years", "twenty"], "a year (2007) or a range"),
    (["--device", "cpu", "--xgb-param", "depthwise"], "KEY=VALUE"),
])
def test_usage_errors_say_what_to_do(args, message):
    result = _run(args)
    assert result.exit_code == 2
    assert message in result.output


def test_gpu_asked_where_there_is_none():
    from dask_gpu_interop import device

    if device.gpu_count():
        pytest.skip("this machine has a GPU")
    result = _run(["--device", "gpu"])
    assert result.exit_code == 2  # a usage error, before anything starts
    assert "no CUDA GPU is visible" in result.output and "--device 'cpu'" in result.output


def test_the_pipeline_imports_no_gpu_library():
    code = ("import sys, examples.mortgage, "
            "examples.mortgage.cli, examples.mortgage.job; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'cudf', 'cupy', 'rmm', 'dask_cudf', 'dask_cuda', 'numba', 'torch', 'cuda'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_help_lists_the_sub_commands():
    result = _run(["--help"])
    assert result.exit_code == 0
    assert "generate" in result.output and "etl" in result.output


def test_etl_help_gives_each_device_s_default_partition_size():
    result = _run(["etl", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert (f"[default: {files.PARTITION_SIZES['gpu']} on GPUs, "
            f"{files.PARTITION_SIZES['cpu']} on CPUs]") in text


class _Started(Exception):
    pass


def _given_to_the_cluster(monkeypatch, args) -> dict:
    import dask_gpu_interop.cluster.options
    import examples.mortgage.cli as cli

    seen = {}

    def fake_cluster_client(**cluster):
        seen.update(cluster)
        seen["environ"] = {name: os.environ.get(name) for name in gpu_workers.ENVIRON}
        raise _Started

    def imported(name):
        seen.setdefault("environ at imports", {name: os.environ.get(name)
                                               for name in gpu_workers.ENVIRON})

    monkeypatch.setattr(dask_gpu_interop.cluster.options, "check_local",
                        lambda device, protocol, **checks: "gpu")
    monkeypatch.setattr(cli, "cluster_client", fake_cluster_client)
    monkeypatch.setattr(cli, "resolve_device", lambda device: "gpu")
    monkeypatch.setattr(cli, "import_in_background", imported)
    with pytest.raises(_Started):
        CliRunner().invoke(main, args, catch_exceptions=False)
    return seen


def _memory_given_to_the_cluster(monkeypatch, args) -> dict | None:
    return _given_to_the_cluster(monkeypatch, args)["memory"]


@pytest.mark.parametrize("flags, memory", [
    ([], {"async_alloc": True}),
    (["--pool-size", "4GB"], {"pool_size": "4GB", "async_alloc": True}),
    (["--no-async-alloc"], {"async_alloc": False}),
    (["--no-pool"], {"pool": False}),
])
def test_the_whole_job_on_local_gpus_shares_cudas_async_pool_unless_a_mode_is_given(
        monkeypatch, flags, memory):
    assert _memory_given_to_the_cluster(monkeypatch, ["--device", "gpu", *flags]) == memory


@pytest.mark.parametrize("flags, memory", [([], None), (["--async-alloc"], {"async_alloc": True})])
def test_the_etl_command_keeps_the_plugins_default_pool(monkeypatch, flags, memory):
    args = ["etl", "--device", "gpu", *flags, "--data", SAMPLE, "--out", "unused"]
    assert _memory_given_to_the_cluster(monkeypatch, args) == memory


def test_a_running_cluster_keeps_its_own_memory_setup():
    from examples.mortgage.cli import _shared_pool

    cluster = {"scheduler": "tcp://somewhere:8786", "memory": None}
    assert _shared_pool(cluster) == cluster


@pytest.mark.parametrize("command", [[], ["etl", "--data", SAMPLE, "--out", "unused"]])
@pytest.mark.parametrize("flags, threads", [([], 2), (["--threads-per-worker", "1"], 1),
                                            (["--threads-per-worker", "3"], 3)])
def test_local_gpu_workers_run_two_tasks_at_once_unless_told(monkeypatch, command, flags,
                                                              threads):
    args = [*command[:1], "--device", "gpu", *flags, *command[1:]]
    assert _given_to_the_cluster(monkeypatch, args)["threads_per_worker"] == threads


@pytest.mark.parametrize("command", [[], ["etl", "--data", SAMPLE, "--out", "unused"]])
def test_local_gpu_workers_start_with_per_thread_streams_and_eight_io_threads(
        monkeypatch, command):
    """The command's environment has the library's GPU worker settings before it imports a GPU
    library (a worker in the command's process reads them there), and not after the command."""
    for name in gpu_workers.ENVIRON:
        monkeypatch.delenv(name, raising=False)
    args = [*command[:1], "--device", "gpu", *command[1:]]
    seen = _given_to_the_cluster(monkeypatch, args)
    assert seen["environ"] == seen["environ at imports"] == gpu_workers.ENVIRON
    assert not set(gpu_workers.ENVIRON) & set(os.environ)  # restored


def test_cpu_workers_and_running_clusters_keep_their_threads():
    from examples.mortgage.cli import _gpu_threads

    running = {"scheduler": "tcp://somewhere:8786", "threads_per_worker": None}
    assert _gpu_threads(running, "gpu") == running
    local_cpu = {"scheduler": None, "threads_per_worker": None}
    assert _gpu_threads(local_cpu, "cpu") == local_cpu


def test_a_running_cluster_keeps_the_settings_its_workers_started_with(monkeypatch):
    for name in gpu_workers.ENVIRON:
        monkeypatch.delenv(name, raising=False)
    seen = _given_to_the_cluster(monkeypatch, ["etl", "--scheduler", "tcp://127.0.0.1:1",
                                               "--device", "gpu", "--data", SAMPLE, "--out",
                                               "unused"])
    assert seen["environ"] == {name: None for name in gpu_workers.ENVIRON}


@pytest.mark.parametrize("flags, processes", [([], os.cpu_count()),
                                              (["--scheduler", "tcp://127.0.0.1:1"], None)])
def test_the_job_s_data_is_generated_in_local_processes_while_a_local_cluster_starts(
        monkeypatch, flags, processes):
    import examples.mortgage.cli as cli

    calls, generating = [], threading.Event()

    def generate(directory, spec, layout, overwrite, processes):
        calls.append(processes)
        generating.set()
        raise _Started

    class Client:
        def run(self, function, *args, **kwargs):
            return {}

    def cluster_client(**cluster):
        generating.wait(10 if processes else 0.5)  # a generation begun before the cluster
        calls.append("cluster start")
        return contextlib.nullcontext((Client(), "cpu"))

    monkeypatch.setattr(cli, "_generate", generate)
    monkeypatch.setattr(cli, "cluster_client", cluster_client)
    monkeypatch.setattr(cli, "check_workers_import", lambda client, *modules: None)
    monkeypatch.setattr(cli, "cluster_workers", lambda client: {})
    with pytest.raises(_Started):
        CliRunner().invoke(main, ["--device", "cpu", *flags], catch_exceptions=False)
    # A local cluster: local processes, begun before the cluster's start; a running cluster
    # generates on its workers once the client is connected.
    expected = [processes, "cluster start"] if processes else ["cluster start", None]
    assert calls == expected


@pytest.mark.parametrize("command", [[], ["etl", "--data", SAMPLE, "--out", "unused"]])
@pytest.mark.parametrize("gpus, flags, workers", [
    (4, [], 1), (1, [], None), (4, ["--workers", "3"], 3),
    (4, ["--scheduler", "tcp://127.0.0.1:1"], None)])
def test_small_data_takes_one_of_the_gpus_unless_told(monkeypatch, command, gpus, flags,
                                                        workers):
    import examples.mortgage.cli as cli

    monkeypatch.setattr(cli, "gpu_count", lambda: gpus)
    args = [*command[:1], "--device", "gpu", *flags, *command[1:]]
    seen = _given_to_the_cluster(monkeypatch, args)
    assert seen.get("n_workers") == workers


def test_data_of_several_gpus_takes_them_all(monkeypatch):
    import examples.mortgage.cli as cli

    monkeypatch.setattr(cli, "gpu_count", lambda: 4)
    assert cli._gpus_for({}, "gpu", cli.ONE_GPU_TEXT) == {}  # all of them: n_workers unset
    assert cli._gpus_for({}, "gpu", cli.ONE_GPU_TEXT - 1) == {"n_workers": 1}
    assert cli._gpus_for({}, "cpu", 1) == {}


def test_the_gpu_count_for_generated_data_asks_for_its_size_only_where_it_decides(monkeypatch):
    import examples.mortgage.cli as cli

    asked = []

    def size():
        asked.append(1)
        return cli.ONE_GPU_TEXT - 1, True

    monkeypatch.setattr(cli, "gpu_count", lambda: 1)
    assert cli._gpus_for({}, "gpu", size) == {} and not asked  # one GPU: nothing to choose
    monkeypatch.setattr(cli, "gpu_count", lambda: 4)
    assert cli._gpus_for({"n_workers": 2}, "gpu", size) == {"n_workers": 2} and not asked
    assert cli._gpus_for({}, "gpu", size) == {"n_workers": 1} and asked == [1]


def test_the_size_of_small_generated_data_is_bounded_without_a_sample(monkeypatch):
    import examples.mortgage.cli as cli
    from examples.mortgage.testdata import generate as gen

    def sampled(spec, layout="classic"):
        raise AssertionError("sampled")

    monkeypatch.setattr(gen, "space_needed", sampled)
    size, exact = cli._text_of(gen.Spec(2006, 2007, loans_per_quarter=500, seed=0), "classic")
    assert not exact and size == gen.space_bound(gen.Spec(2006, 2007, loans_per_quarter=500,
                                                          seed=0), "classic")
    assert size < cli.ONE_GPU_TEXT
    monkeypatch.setattr(gen, "space_needed", lambda spec, layout="classic": 123)
    big = gen.Spec(2000, 2007, loans_per_quarter=2_000_000, seed=0)
    assert gen.space_bound(big, "classic") >= cli.ONE_GPU_TEXT
    assert cli._text_of(big, "classic") == (123, True)


def test_the_start_line_counts_from_this_process_start():
    code = ("import time; time.sleep(0.5); from examples.mortgage.cli import "
            "_since_process_start as s; print(s())")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    whole = time.perf_counter() - started
    assert 0.5 <= float(out.stdout) <= whole


def test_a_worker_imports_the_etls_module_without_dask_dataframe():
    code = ("import sys, distributed; import examples.mortgage.etl; "
            "print(sorted(m for m in ('dask.dataframe', 'pandas', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command, on_the_workers", [
    (["etl", "--out", "OUT"], ("examples.mortgage.etl",)),
    # the whole job: XGBoost too, imported while the cluster starts, not in the training task
    (["--rounds", "2"], ("examples.mortgage.etl", "xgboost")),
])
def test_the_workers_import_what_their_tasks_need_once_they_are_up(monkeypatch, tmp_path,
                                                                  command, on_the_workers):
    import examples.mortgage.cli as cli

    calls = []
    real = cli.import_in_background

    def recording(*modules, client=None):
        calls.append((modules, client is not None))
        return real(*modules, client=client)

    monkeypatch.setattr(cli, "import_in_background", recording)
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in command]
    result = _run([*args, *CPU, "--data", SAMPLE])
    assert result.exit_code == 0, result.output
    # on the workers (CPUs: no cuDF), once
    assert [modules for modules, on_workers in calls if on_workers] == [on_the_workers]


@pytest.mark.parametrize("cluster, device, join, gpus, noted", [
    ({}, "gpu", "loan", 2, True),
    ({"protocol": "ucx"}, "gpu", "loan", 2, False),
    ({}, "gpu", "quarter", 2, False),
    ({}, "gpu", "dask", 1, False),
    ({"n_workers": 1}, "gpu", "loan", 4, False),
    ({}, "cpu", "loan", 0, False),
    ({"scheduler": "tcp://127.0.0.1:1"}, "gpu", "loan", 2, False),
])
def test_a_join_by_loan_over_tcp_between_local_gpus_says_ucx_moves_it_on_the_devices(
        monkeypatch, capsys, cluster, device, join, gpus, noted):
    import examples.mortgage.cli as cli

    monkeypatch.setattr(cli, "gpu_count", lambda: gpus)
    cli._join_note(cluster, device, join)
    out = capsys.readouterr().out
    assert ("--protocol ucx moves them device to device" in out) is noted



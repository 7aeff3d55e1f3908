"""The command line: the demo job and the memory report of a running cluster, on CPUs."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster

from dask_gpu_interop.cli import main


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as c:
        yield c


def test_report_of_a_running_cluster(cluster):
    result = CliRunner().invoke(main, ["report", "--scheduler", cluster.scheduler_address])
    assert result.exit_code == 0, result.output
    assert result.output.count("no GPU: the plugin does nothing here") == 2


def test_report_json(cluster):
    result = CliRunner().invoke(main, ["report", "--scheduler", cluster.scheduler_address, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    with Client(cluster) as client:
        assert set(data) == set(client.scheduler_info()["workers"])
    assert {snap["status"] for snap in data.values()} == {"no-gpu"}


def test_report_needs_a_scheduler():
    result = CliRunner().invoke(main, ["report"])
    assert result.exit_code != 0 and "--scheduler" in result.output


def test_bad_memory_option_fails_before_anything_starts():
    result = CliRunner().invoke(main, ["demo", "--device", "cpu", "--pool-size", "-1GB"])
    assert result.exit_code != 0


def test_gpu_asked_on_a_machine_without_one():
    from dask_gpu_interop import device

    if device.gpu_count():
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(main, ["demo", "--device", "gpu"])
    assert result.exit_code != 0
    assert "no CUDA GPU is visible" in str(result.exception)


@pytest.mark.slow
def test_demo_runs_end_to_end_on_cpus():
    out = subprocess.run(
        [sys.executable, "-m", "dask_gpu_interop.cli", "demo", "--device", "cpu", "--rows", "20000",
         "--workers", "2"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "train AUC" in out.stdout
    auc = float(out.stdout.split("train AUC")[1].split()[0])
    assert auc > 0.85
    assert out.stdout.count("no GPU: the plugin does nothing here") == 2

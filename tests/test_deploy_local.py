"""deploy/local/dask-gpu-cluster for real: a TLS scheduler and two CPU workers with the preload
as separate processes, a client with certificates runs a job, strangers are refused, and
``stop`` leaves no process behind."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import dask.array as da
import pandas as pd
import psutil
import pytest
from distributed import Client

from dask_gpu_interop import GPUMemoryPlugin, cluster_workers, memory_report
from dask_gpu_interop import tls as tls_mod

from .refused import refused

pytestmark = pytest.mark.slow  # real processes: several seconds

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "local" / "dask-gpu-cluster"
ENV = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}


def run_script(*args, timeout=90):
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=ENV, capture_output=True, text=True, timeout=timeout,
    )


def session_processes(state: Path) -> list[psutil.Process]:
    """Every process the script started: the pid-file processes and all their descendants."""
    procs = []
    for pidfile in (state / "pids").glob("*.pid"):
        try:
            proc = psutil.Process(int(pidfile.read_text()))
            procs += [proc, *proc.children(recursive=True)]
        except (psutil.NoSuchProcess, ValueError):
            pass
    return procs


def running(procs) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def stop_everything(state: Path) -> None:
    """Last resort for a failed test: never leave processes behind."""
    procs = session_processes(state)
    run_script("stop", "--state-dir", str(state), "--timeout", "10")
    for proc in running(procs):
        proc.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("local-cluster")
    result = run_script(
        "start", "--state-dir", str(state), "--device", "cpu", "--workers", "2", "--port", "0",
        "--dashboard-address", "127.0.0.1:0", "--timeout", "60",
        "--", "--gpu-pool-size", "0.5",
    )
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        procs = session_processes(state)
        address = json.loads((state / "scheduler.json").read_text())["address"]
        yield state, address, procs, result.stdout
    finally:
        stop_everything(state)


def test_start_prints_how_to_connect(cluster):
    state, address, procs, out = cluster
    assert address.startswith("tls://127.0.0.1:")
    assert f"scheduler:  {address}  (2 cpu workers, TLS)" in out
    assert sorted(p.name for p in (state / "pids").glob("*.pid")) == [
        "scheduler.pid", "worker-1.pid", "worker-2.pid",
    ]
    # the scheduler, two `dask worker` nannies, and their worker processes
    assert len(running(procs)) >= 5
    env = run_script("env", "--state-dir", str(state))
    assert f"export DASK_SCHEDULER_ADDRESS={address}" in env.stdout
    assert "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT" in env.stdout


def test_client_with_certificates_runs_a_job_and_sees_every_worker(cluster):
    state, address, _, _ = cluster
    with Client(address, security=tls_mod.security(state / "tls"), timeout=30) as client:
        x = da.arange(200_000, chunks=20_000)
        assert int((x * 2).sum().compute()) == 2 * sum(range(200_000))
        workers = cluster_workers(client)
        assert len(workers) == 2
        assert all(w.startswith("tls://") for w in workers)
        report = memory_report(client)
        assert set(report) == set(workers)
        assert {snap["status"] for snap in report.values()} == {"no-gpu"}
        # every worker got the preload's plugin, with the options given after `--`
        expected = GPUMemoryPlugin(pool_size="0.5").name
        plugins = client.run(lambda dask_worker: sorted(dask_worker.plugins))
        assert all(expected in names for names in plugins.values()), plugins


def test_report_command_shows_every_worker(cluster):
    state, _, _, _ = cluster
    result = run_script("report", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("no GPU: the plugin does nothing here") == 2


def test_strangers_are_refused(cluster, tmp_path):
    _, address, _, _ = cluster
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    # no certificates at all: a tls:// address needs them
    kind, text = refused(address, timeout=5)
    assert issubclass(kind, TypeError) and "ssl_context" in text
    # plain TCP to the TLS port
    assert issubclass(refused(f"tcp://{host}:{port}", timeout=5)[0], OSError)
    # certificates from another CA
    tls_mod.make_certificates(tmp_path / "other")
    assert issubclass(
        refused(address, security=tls_mod.security(tmp_path / "other"), timeout=5)[0], OSError)
    # our CA, but no client certificate: the scheduler demands one
    ctx = ssl.create_default_context(cafile=str(tls_mod.files(cluster[0] / "tls").ca_file))
    ctx.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw) as conn:
                conn.sendall(b"\0" * 16)
                if not conn.recv(1):  # TLS 1.3: the refusal arrives with the first read
                    raise ConnectionError("closed by the scheduler")


def deploy_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "dask_gpu_interop.cli", *args], env=ENV,
        capture_output=True, text=True, timeout=60,
    )


def test_wait_and_memory_plot_commands_connect_with_certificates(cluster, tmp_path):
    state, _, _, _ = cluster
    where = ["--scheduler-file", str(state / "scheduler.json"), "--tls", str(state / "tls")]
    result = deploy_cli("wait-for-workers", *where, "-n", "2", "--timeout", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 workers"
    png, csv = tmp_path / "memory.png", tmp_path / "memory.csv"
    result = deploy_cli(
        "memory-plot", *where, "--duration", "1.5", "--interval", "0.5",
        "--png", str(png), "--csv", str(csv),
    )
    assert result.returncode == 0, result.stderr
    assert "none with GPU memory (the workers report: no-gpu): no plot written" in result.stdout
    assert not png.exists()
    assert len(set(pd.read_csv(csv)["worker"])) == 2


def test_bad_preload_option_stops_the_start_and_leaves_nothing(tmp_path):
    state = tmp_path / "bad"
    result = run_script(
        "start", "--state-dir", str(state), "--device", "cpu", "--workers", "1", "--port", "0",
        "--no-dashboard", "--timeout", "60", "--", "--gpu-pool-size", "-5",
    )
    try:
        assert result.returncode != 0
        assert "a size must be more than zero" in result.stderr
        assert "the cluster was stopped" in result.stderr
        assert list((state / "pids").glob("*.pid")) == []
    finally:
        stop_everything(state)


def test_ucx_without_no_tls_is_refused_with_the_reason(tmp_path):
    result = run_script("start", "--state-dir", str(tmp_path), "--device", "cpu", "--protocol", "ucx")
    assert result.returncode != 0
    assert "ucx is for GPU workers" in result.stderr


def test_stop_leaves_no_process(cluster):
    # last in this file: stops the module's cluster
    state, _, procs, _ = cluster
    assert running(procs)
    result = run_script("stop", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 10
    while running(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running(procs) == []
    assert list((state / "pids").glob("*.pid")) == []
    assert not (state / "scheduler.json").exists()
    status = run_script("status", "--state-dir", str(state))
    assert status.returncode == 1 and "no cluster running" in status.stdout

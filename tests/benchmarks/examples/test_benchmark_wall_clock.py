"""The wall-clock benchmark on CPUs: it times the README's commands as whole processes, reads
the work their figures files report, and the fixed cost it reports is the wall clock less that
work."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.examples import wall_clock


def test_a_fresh_machine_s_caches_are_emptied(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    cache = tmp_path / ".cupy" / "kernel_cache"
    cache.mkdir(parents=True)
    (cache / "kernel.cubin").write_bytes(b"x")
    elsewhere = tmp_path / "numba"
    elsewhere.mkdir()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(elsewhere))
    assert str(cache) in wall_clock.kernel_caches()
    wall_clock.empty_kernel_caches()
    assert not cache.exists() and not elsewhere.exists()


def test_the_cpu_commands_are_timed_whole_and_their_work_subtracted(tmp_path):
    payload = wall_clock.main(["--data", str(tmp_path / "data"), "--size", "3MB", "--layouts",
                               "classic", "--runs", "0", "--fresh-runs", "0", "--cpu-runs", "1",
                               "--job-runs", "0", "--help-runs", "1", "--source-runs", "1",
                               "--out", str(tmp_path), "--machine", "cpu"])
    (run,) = payload["etl"]["classic"]["cpu"]
    (from_source,) = payload["etl"]["classic"]["cpu, from source"]
    assert 0 < run["work"] < run["wall"] and 0 < from_source["work"] < from_source["wall"]
    assert abs(run["fixed"] - (run["wall"] - run["etl"])) < 1e-9 and run["work"] == run["etl"]
    assert all(len(runs) == 1 and runs[0]["wall"] > 0 for runs in payload["help"].values())
    text = (tmp_path / "wall-clock-cpu.md").read_text()
    assert "| etl --data (classic) | 3MB | cpu | 1 |" in text
    assert "| etl --data (classic) | 3MB | cpu, from source | 1 |" in text
    assert "| `python -m examples.mortgage --help`, from source | 1 |" in text
    assert "python -m examples.mortgage --help" in text


def test_the_default_job_s_work_is_its_data_etl_matrix_and_training_either_way():
    streamed = {"generate": 1.0, "cluster start": 2.0, "placement": 0.25, "ETL and sketch": 3.0,
                "quantize": 0.5, "training": 4.0, "report": 0.125, "cluster stop": 0.5}
    assert wall_clock.job_work(streamed) == 8.5
    written = {"generate": 1.0, "ETL": 3.0, "DMatrix": 0.5, "training": 4.0, "other": 0.25}
    assert wall_clock.job_work(written) == 8.5


def test_a_from_source_variant_finds_no_bytecode_and_writes_none():
    env = wall_clock.source_env("cpu, from source")
    assert wall_clock.source_env("cpu") is None
    probe = ("import importlib.util, os, dask, sys; "
             "print(os.path.exists(importlib.util.cache_from_source(dask.__file__)), "
             "'dask' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    assert os.listdir(env["PYTHONPYCACHEPREFIX"]) == []


def test_the_ecg_command_s_stages_and_pipeline_come_from_its_figures(tmp_path):
    import pytest

    pytest.importorskip("torch", reason="the ECG example trains a PyTorch model")
    from examples.ecg.pipeline import STAGES

    run = wall_clock.one_ecg(0.02, "cpu", str(tmp_path / "ecg"))
    assert [name for name in STAGES if name in run["stages"]] == list(STAGES)
    assert run["work"] == run["stages"]["pipeline"] == sum(run["stages"][s] for s in STAGES)
    assert 0 < run["work"] < run["wall"] and run["fixed"] == run["wall"] - run["work"]
    assert run["graphed"] is False  # no CUDA graph on the CPUs

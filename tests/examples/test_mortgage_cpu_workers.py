"""The local CPU workers' malloc settings: set where the example starts the workers, never over
a choice the user made."""

from __future__ import annotations

import os

import dask
import pytest

from examples.mortgage import cpu_workers


def _spawn_environ() -> dict:
    return dict(dask.config.get(cpu_workers.KEY, default={}) or {})


def test_local_cpu_workers_get_the_thresholds(monkeypatch):
    for name in cpu_workers.ENVIRON:
        monkeypatch.delenv(name, raising=False)
    with cpu_workers.environ({}, "cpu"):
        inside = _spawn_environ()
    for name, value in cpu_workers.ENVIRON.items():
        assert inside[name] == value
    assert _spawn_environ().get("MALLOC_TRIM_THRESHOLD_") == 65536  # distributed's, back


@pytest.mark.parametrize("cluster, device", [({}, "gpu"), ({"scheduler": "tcp://x:1"}, "cpu")])
def test_gpu_workers_and_a_running_cluster_are_left_alone(cluster, device):
    before = _spawn_environ()
    with cpu_workers.environ(cluster, device):
        assert _spawn_environ() == before


def test_the_user_s_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "12345")
    with dask.config.set({cpu_workers.KEY: {**_spawn_environ(), "MALLOC_TRIM_THRESHOLD_": 777}}):
        with cpu_workers.environ({}, "cpu"):
            inside = _spawn_environ()
    assert inside["MALLOC_TRIM_THRESHOLD_"] == 777
    assert "MALLOC_MMAP_THRESHOLD_" not in inside  # the process's own value reaches the workers


def test_a_local_cluster_s_worker_processes_start_with_them(monkeypatch):
    from dask_gpu_interop import cluster_client

    for name in cpu_workers.ENVIRON:
        monkeypatch.delenv(name, raising=False)
    with cpu_workers.environ({}, "cpu"), cluster_client(device="cpu", n_workers=1) as (client, _):
        seen = client.run(lambda: {k: os.environ.get(k) for k in cpu_workers.ENVIRON})
    assert list(seen.values()) == [cpu_workers.ENVIRON]

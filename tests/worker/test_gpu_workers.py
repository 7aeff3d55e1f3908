"""How GPU workers run tasks (dask_gpu_interop.worker.gpu_workers): the settings, where they
apply, and the plugin's wait for each task's stream."""

from __future__ import annotations

import os
import sys
import types

import dask.config
import pytest

from dask_gpu_interop import device
from dask_gpu_interop.cluster import local
from dask_gpu_interop.worker import gpu_workers


@pytest.fixture
def clean_environ(monkeypatch):
    for name in [*gpu_workers.ENVIRON, "EXTRA_SETTING"]:
        monkeypatch.delenv(name, raising=False)
    yield
    for name in [*gpu_workers.ENVIRON, "EXTRA_SETTING"]:
        os.environ.pop(name, None)


def test_the_settings_are_per_thread_streams_and_kvikio_threads_by_default():
    assert gpu_workers.settings() == gpu_workers.ENVIRON
    assert gpu_workers.threads() == 1  # dask-cuda's: two only where asked
    assert device.per_thread_streams(gpu_workers.settings())
    assert not device.per_thread_streams({"CUDF_PER_THREAD_STREAM": "0"})


def test_dask_config_adds_changes_and_removes_settings():
    given = {"KVIKIO_NTHREADS": 16, "CUDF_PER_THREAD_STREAM": None, "EXTRA_SETTING": "x"}
    with dask.config.set({"gpu-interop.worker.environ": given, "gpu-interop.worker.threads": 3}):
        chosen = gpu_workers.settings()
        assert gpu_workers.threads() == 3
    assert chosen["KVIKIO_NTHREADS"] == "16" and chosen["EXTRA_SETTING"] == "x"
    assert "CUDF_PER_THREAD_STREAM" not in chosen
    assert chosen["CUPY_CUDA_PER_THREAD_DEFAULT_STREAM"] == "1"


@pytest.mark.parametrize("value", [0, -1, "two", 1.5])
def test_a_thread_count_that_is_not_a_whole_positive_number_is_refused(value):
    with dask.config.set({"gpu-interop.worker.threads": value}):
        with pytest.raises(ValueError, match="gpu-interop.worker.threads"):
            gpu_workers.threads()


def test_apply_sets_what_is_missing_and_a_set_variable_wins(clean_environ, monkeypatch):
    monkeypatch.setenv("KVIKIO_NTHREADS", "2")
    added = gpu_workers.apply()
    assert os.environ["KVIKIO_NTHREADS"] == "2"
    assert "KVIKIO_NTHREADS" not in added
    assert os.environ["CUDF_PER_THREAD_STREAM"] == "1" == added["CUDF_PER_THREAD_STREAM"]


def test_a_setting_read_by_a_library_already_imported_is_left_out(clean_environ, monkeypatch,
                                                                 caplog):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    with caplog.at_level("INFO", logger="distributed.worker.gpu_interop"):
        added = gpu_workers.apply()
    assert "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM" not in os.environ
    assert "CUPY_ACCELERATORS" not in added and "CUDF_PER_THREAD_STREAM" in added
    assert "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM" in caplog.text


def test_the_environ_context_takes_back_what_it_set(clean_environ):
    with gpu_workers.environ() as added:
        assert os.environ["KVIKIO_NTHREADS"] == "8"
        assert set(added) == set(gpu_workers.ENVIRON)
    assert not any(name in os.environ for name in gpu_workers.ENVIRON)


def test_a_worker_waits_for_its_streams_only_where_they_are_per_thread(clean_environ,
                                                                      monkeypatch):
    from distributed.threadpoolexecutor import ThreadPoolExecutor

    class Stand:
        executors = {"default": ThreadPoolExecutor(2)}

    stand = Stand()
    before = stand.executors["default"]
    assert not device.wait_for_streams(stand)  # no per-thread streams here
    assert stand.executors["default"] is before
    monkeypatch.setenv("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    assert device.wait_for_streams(stand)
    assert stand.executors["default"] is not before
    assert stand.executors["default"]._max_workers == 2


def test_the_waiting_call_waits_after_the_function(monkeypatch):
    order = []
    monkeypatch.setattr(device, "synchronize", lambda: order.append("wait"))
    assert device.waiting_call(lambda x: order.append(x) or x * 2, 21) == 42
    assert order == [21, "wait"]


def test_a_failing_task_is_not_waited_for(monkeypatch):
    order = []
    monkeypatch.setattr(device, "synchronize", lambda: order.append("wait"))
    with pytest.raises(KeyError):
        device.waiting_call(lambda: {}["missing"])
    assert order == []


class _Recorded(Exception):
    pass


def _recording_cluster(monkeypatch, seen):
    class Recorded:  # dask-cuda's cluster, recording its arguments instead of starting
        def __init__(self, **kwargs):
            seen["kwargs"] = kwargs
            seen["nanny_environ"] = dict(dask.config.get(local.NANNY_ENVIRON, default={}))
            raise _Recorded

    fake = types.ModuleType("dask_cuda")
    fake.LocalCUDACluster = Recorded
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(local, "check_local", lambda device, protocol, **checks: "gpu")
    monkeypatch.setattr(device, "gpu_count", lambda: 2)


def test_local_gpu_worker_processes_get_the_settings_and_the_configured_threads(monkeypatch):
    seen = {}
    _recording_cluster(monkeypatch, seen)
    with dask.config.set({local.NANNY_ENVIRON: {"OTHER": "1"},
                          "gpu-interop.worker.threads": 2}):
        with pytest.raises(_Recorded):
            local.local_cluster("gpu")
    assert seen["kwargs"]["threads_per_worker"] == 2
    assert seen["nanny_environ"] == {**gpu_workers.ENVIRON, "OTHER": "1"}


def test_threads_asked_for_win_over_the_gpu_workers_default(monkeypatch):
    seen = {}
    _recording_cluster(monkeypatch, seen)
    with pytest.raises(_Recorded), dask.config.set({"gpu-interop.worker.threads": 2}):
        local.local_cluster("gpu", threads_per_worker=3)
    assert seen["kwargs"]["threads_per_worker"] == 3


def _executor_kind(dask_worker):
    return type(dask_worker.executors["default"]).__name__


def _worker_settings():
    return {name: os.environ.get(name) for name in gpu_workers.ENVIRON}


def _doubled(n):
    import cupy

    return cupy.arange(n, dtype="int64") * 2


def _total(x):
    return int(x.sum())


@pytest.mark.gpu
def test_local_gpu_workers_run_two_tasks_on_their_own_streams_and_wait_for_them():
    """A worker process (this test process may have used PyTorch on the GPU already, which an
    in-process worker's plugin would refuse)."""
    from dask_gpu_interop import cluster_client

    with cluster_client(device="gpu", n_workers=1, threads_per_worker=2,
                        processes=True) as (client, device):
        assert device == "gpu"
        assert set(client.nthreads().values()) == {2}
        assert list(client.run(_worker_settings).values()) == [gpu_workers.ENVIRON]
        assert set(client.run(_executor_kind).values()) == {"CallingThreadPoolExecutor"}
        sizes = [20_000_000 + i for i in range(8)]
        made = client.map(_doubled, sizes)  # each result read by a task on either thread
        totals = client.gather(client.map(_total, made))
    assert totals == [n * (n - 1) for n in sizes]

"""When each worker started, step by step (dask_gpu_interop.worker_starts), on CPU workers: the
steps' order and bounds, a worker in the client's process, a process's own start time."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import WorkerStart, cluster_client, cluster_workers, worker_starts
from dask_gpu_interop.worker.start import MARKS, mark, process_started


def test_each_worker_process_starts_then_preloads_then_joins_within_the_clusters_start():
    since = time.time()
    with cluster_client(device="cpu", n_workers=2) as (client, _):
        ready = time.time() - since
        starts = worker_starts(client, since=since)
        workers = sorted(cluster_workers(client))
    assert sorted(s.address for s in starts) == workers and len(workers) == 2
    for start in starts:
        assert list(start.steps()) == ["process", "preloads", "joined"]  # no memory plugin
        assert 0 <= start.process < start.preloads <= start.joined <= ready
    assert starts[0].joined >= starts[1].joined  # the last to join first


def test_a_worker_in_the_clients_process_has_no_process_of_its_own():
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:  # fmt: skip
        (start,) = worker_starts(client)
    assert start.process is None and start.preloads is None  # no preload of the library's
    assert start.joined == pytest.approx(time.time(), abs=60)  # from the epoch by default


def test_a_process_start_is_when_the_process_began():
    before = time.time()
    done = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3); from "
                           "dask_gpu_interop.worker.start import process_started; "
                           "print(process_started())"], capture_output=True, text=True,
                          check=True)
    after = time.time()
    started = float(done.stdout)
    assert before - 0.05 <= started <= after - 0.3  # at the start, not when asked
    assert process_started() < before  # this process began earlier


def test_a_step_is_marked_once():
    class Worker:
        pass

    worker = Worker()
    mark(worker, "preloads")
    first = getattr(worker, MARKS)["preloads"]
    time.sleep(0.01)
    mark(worker, "preloads")
    assert getattr(worker, MARKS) == {"preloads": first}
    mark(object(), "preloads")  # an object without attributes: nothing kept, no error


def test_a_worker_start_says_its_steps_in_order():
    start = WorkerStart("tcp://w:1", process=0.1, joined=0.9)
    assert start.steps() == {"process": 0.1, "joined": 0.9}
    assert str(start) == "tcp://w:1: process 0.10 s, joined 0.90 s"
    assert str(WorkerStart("tcp://w:2")) == "tcp://w:2: no step recorded"


def test_a_workers_memory_step_is_when_its_memory_was_set_up(monkeypatch):
    """The memory plugin records when it set the memory up; the start's account reads it."""
    import os
    import types

    from dask_gpu_interop.memory import state
    from dask_gpu_interop.worker.start import _marks

    monkeypatch.setattr(state, "_active", types.SimpleNamespace(installed_at=1234.5))
    worker = types.SimpleNamespace()
    mark(worker, "preloads")
    assert _marks(os.getpid(), worker) == {"preloads": getattr(worker, MARKS)["preloads"],
                                           "memory": 1234.5}
    monkeypatch.setattr(state, "_active", None)  # no GPU, or no plugin: no such step
    assert "memory" not in _marks(os.getpid(), worker)

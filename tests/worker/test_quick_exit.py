"""A nanny's worker process ends as soon as its worker has closed, skipping Python's teardown;
a worker in the client's process, or without a nanny, is left alone."""

from __future__ import annotations

import atexit
import os
import types

import dask
import pytest
from distributed import Client

from dask_gpu_interop import local_cluster, preload
from dask_gpu_interop.worker import quick_exit


def _leave_a_mark_at_exit(path: str) -> None:
    """In a worker: an exit handler that writes ``path`` (registered before the worker closes,
    as a library imported by a task registers its own)."""
    atexit.register(lambda: open(path, "w").close())


def _close_a_cluster_whose_workers_mark_their_exit(tmp_path) -> list[bool]:
    with local_cluster("cpu", n_workers=2) as local, Client(local) as client:
        workers = sorted(client.nthreads())
        for i, address in enumerate(workers):
            client.run(_leave_a_mark_at_exit, str(tmp_path / f"mark-{i}"), workers=[address])
    # the cluster's close joins the worker processes: whatever they ran at exit has run
    return [os.path.exists(tmp_path / f"mark-{i}") for i in range(len(workers))]


def test_a_closed_worker_process_ends_without_pythons_teardown(tmp_path):
    assert _close_a_cluster_whose_workers_mark_their_exit(tmp_path) == [False, False]


def test_quick_exit_off_keeps_pythons_teardown(tmp_path):
    with dask.config.set({quick_exit.CONFIG_KEY: False}):
        assert _close_a_cluster_whose_workers_mark_their_exit(tmp_path) == [True, True]


@pytest.fixture
def registered(monkeypatch):
    handlers = []
    monkeypatch.setattr(quick_exit, "_registered", False)
    monkeypatch.setattr(quick_exit.atexit, "register", handlers.append)
    return handlers


@pytest.mark.parametrize("nanny, child, ends", [("tcp://127.0.0.1:1", True, True),
                                                (None, True, False),  # no nanny
                                                ("tcp://127.0.0.1:1", False, False)])
def test_only_a_nannys_worker_process_ends_quickly(monkeypatch, registered, nanny, child, ends):
    monkeypatch.setattr(quick_exit.multiprocessing, "parent_process",
                        lambda: object() if child else None)
    assert quick_exit.end_process_at_exit(types.SimpleNamespace(nanny=nanny)) is ends
    assert registered == ([quick_exit._end_now] if ends else [])


@pytest.mark.parametrize("setting, ends", [(True, True), (False, False), ("false", False),
                                           ("False", False), ("0", False), ("true", True)])
def test_the_setting_turns_it_off_in_config_or_the_environment(monkeypatch, registered,
                                                               setting, ends):
    monkeypatch.setattr(quick_exit.multiprocessing, "parent_process", lambda: object())
    with dask.config.set({quick_exit.CONFIG_KEY: setting}):
        assert quick_exit.applies(types.SimpleNamespace(nanny="tcp://127.0.0.1:1")) is ends


def test_the_library_preload_ends_its_workers_process_once(monkeypatch, registered):
    monkeypatch.setattr(quick_exit.multiprocessing, "parent_process", lambda: object())
    worker = types.SimpleNamespace(nanny="tcp://127.0.0.1:1")
    preload.dask_teardown(worker)
    quick_exit.dask_teardown(worker)  # both preloads on one worker: one handler
    assert registered == [quick_exit._end_now]


def test_a_worker_in_the_clients_process_is_left_alone(registered):
    with local_cluster("cpu", n_workers=1, processes=False) as local, \
            Client(local) as client:
        assert client.submit(sum, [1, 2]).result() == 3
    assert registered == []

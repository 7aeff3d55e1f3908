"""The ETL's stage marks: a profile of one thread, or of the whole process (worker threads)."""

from __future__ import annotations

import threading

from examples.mortgage import stages


def _work(calls: int = 1):
    for _ in range(calls):
        with stages.stage("read"):
            with stages.stage("parse"):
                pass


def test_a_process_profile_records_what_other_threads_run():
    stages.start_process_profile("cpu")
    try:
        threads = [threading.Thread(target=_work, args=(3,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        records = stages.stop_process_profile()
    assert set(records) == {"read", "read/parse"}  # each thread nests its own stages
    assert records["read"]["calls"] == 6 and records["read/parse"]["calls"] == 6
    assert records["read"]["seconds"] >= records["read/parse"]["seconds"] >= 0


def test_stopped_process_profile_records_nothing_more():
    stages.start_process_profile("cpu")
    _work()
    assert stages.stop_process_profile()["read"]["calls"] == 1
    _work()  # free again: nothing is recording
    assert stages.stop_process_profile() == {}


def test_a_threads_own_profile_wins_over_the_process_profile():
    stages.start_process_profile("cpu")
    try:
        with stages.Profile("cpu") as mine:
            _work(2)
    finally:
        process = stages.stop_process_profile()
    assert mine.as_dict()["read"]["calls"] == 2
    assert process == {}

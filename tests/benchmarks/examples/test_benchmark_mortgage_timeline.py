"""The ETL timeline's logic on CPUs: what it derives from dask's task stream, that it records
the etl command's ETL as the command runs it, and how it tells that cuDF is imported."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from benchmarks.examples import mortgage_timeline

ROOT = Path(__file__).resolve().parents[3]


def _task(name: str, thread: int, start: float, stop: float) -> dict:
    return {"key": (f"{name}-abc", 0), "worker": "w1", "thread": thread,
            "startstops": [{"action": "transfer", "start": start - 0.5, "stop": start},
                           {"action": "compute", "start": start, "stop": stop}]}


def test_the_timeline_of_two_threads():
    started = 100.0
    records = [_task("load_acquisitions", 1, 100.1, 100.2),
               _task("process_part", 2, 100.1, 100.6),
               _task("process_part", 1, 100.2, 101.0),
               _task("process_part", 2, 100.6, 100.8),
               _task("getitem", 2, 100.8, 100.8),
               _task("finalize", 1, 99.9, 99.95),  # the previous computation's, not the ETL's
               {"key": "no-compute", "startstops": [{"action": "transfer", "start": 100.0,
                                                     "stop": 100.1}]}]
    got = mortgage_timeline.timeline(records, started, 101.1)
    assert got["etl_seconds"] == pytest.approx(1.1)
    assert got["first_start"] == pytest.approx(0.1)  # the first partition or acquisition task
    assert got["partitions"] == 3 and got["threads"] == 2
    assert got["partition_first"] == pytest.approx(0.5)
    assert got["partition_median"] == pytest.approx(0.5)
    assert got["partition_max"] == pytest.approx(0.8)
    assert got["acquisitions"] == [pytest.approx(0.1)]
    assert got["idle_at_end"] == pytest.approx(0.2)  # thread 2 ends at 0.8, thread 1 at 1.0
    assert got["after_last"] == pytest.approx(0.1)
    assert got["busy"] == pytest.approx((0.05 + 0.1 + 0.5 + 0.8 + 0.2) / (2 * 1.1))  # compute


def test_it_records_the_etl_command_on_cpus(tmp_path):
    from examples.mortgage.testdata import generate as gen

    made = gen.generate(str(tmp_path / "data"), gen.Spec(2007, 2007, loans_per_quarter=50),
                        layout="current")
    runs = mortgage_timeline.record(
        ["--data", made.directory, "--out", str(tmp_path / "out"), "--device", "cpu",
         "--workers", "1", "--threads-per-worker", "2"], warm=True)
    assert [run["repeat"] for run in runs] == [0, 1]
    assert all(run["partitions"] == 4 and 1 <= run["threads"] <= 2 for run in runs)  # 4 quarters
    assert all(0 <= run["first_start"] < run["etl_seconds"] for run in runs)
    assert (tmp_path / "out").is_dir()  # the command went on to write the table


@pytest.mark.parametrize("state, imported", [("absent", False), ("importing", False),
                                             ("done", True)])
def test_cudf_counts_as_imported_only_once_its_import_has_finished(monkeypatch, state, imported):
    monkeypatch.delitem(sys.modules, "cudf", raising=False)
    if state != "absent":
        module = types.ModuleType("cudf")
        module.__spec__ = types.SimpleNamespace(_initializing=state == "importing")
        monkeypatch.setitem(sys.modules, "cudf", module)
    assert mortgage_timeline._cudf_imported() is imported


def test_results_name_the_checkout_commit():
    import subprocess

    from benchmarks import common

    want = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert want and common.commit() == want

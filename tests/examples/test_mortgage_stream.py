"""The etl command streams: each task writes its partition's table to a Parquet file of its own
and hands back only its report, so that what the workers and the command hold does not grow
with the data; a run that fails leaves nothing, and a quarter's acquisitions are released once
its partitions are done."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster, get_worker

from examples.mortgage import cpu_workers, etl, features, files, job, output
from examples.mortgage.testdata import generate as gen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("stream"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=400, loans_per_part=100, seed=4)
    with dask.config.set(scheduler="synchronous"):
        return gen.generate(directory, spec)


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def test_each_partition_is_a_parquet_file_of_its_own_in_partition_order(dataset, tmp_path):
    plan = files.plan(dataset.directory, partition_size="1MiB").balanced(4, 2**20)
    out = str(tmp_path / "features")
    with dask.config.set(scheduler="threads"):
        written = etl.write(out, plan)
        kept = etl.run(plan)
    names = sorted(os.listdir(out))
    parts = [f"part.{i:05d}.parquet" for i in range(len(plan.parts))]
    assert names == sorted([*parts, output.MARKER]) and len(parts) > 4
    tables = kept.frame.to_delayed()
    for name, table in zip(parts, tables, strict=True):  # each file: its partition's table
        pd.testing.assert_frame_equal(pd.read_parquet(os.path.join(out, name)),
                                      table.compute().reset_index(drop=True))
    want = kept.frame.compute().reset_index(drop=True)
    for got in (dd.read_parquet(out).compute(), pd.read_parquet(out),
                pq.read_table(out).to_pandas()):
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    pd.testing.assert_series_equal(pd.read_parquet(out).dtypes, features.meta().dtypes)
    assert written.rows == len(want) and written.frame is None
    assert written.written_bytes == sum(os.path.getsize(os.path.join(out, n)) for n in parts)
    line = written.summary()
    assert line.startswith(f"{len(want):,} rows from ") and "read and written in one stage" in line
    assert "written in" not in line.replace("read and written in one stage", "")


# ------------------------------------------------------------- a task fails half way

SLOW = 1.0  # seconds a partition's task waits before it writes, beside the one that fails


def fails_on_the_third(path, part, *args):
    """``write_part``, except that partition 2 fails at once and the others write late."""
    if path.endswith("part.00002.parquet"):
        raise RuntimeError("a task that fails")
    time.sleep(SLOW)
    report = etl.write_part.__wrapped__(path, part, *args)
    get_worker().last_write_ended = time.monotonic()
    return report


def test_a_failed_task_leaves_nothing_and_no_task_writes_after_the_run(dataset, tmp_path,
                                                                          client, monkeypatch):
    plan = files.plan(dataset.directory, partition_size="1MiB").balanced(4, 2**20)
    fails_on_the_third.__wrapped__ = etl.write_part
    monkeypatch.setattr(etl, "write_part", fails_on_the_third)
    out = tmp_path / "features"
    with pytest.raises(RuntimeError, match="a task that fails"):
        etl.write(str(out), plan)
    raised = time.monotonic()
    assert os.listdir(tmp_path) == []  # neither the output nor its staging folder
    ended = client.run(lambda dask_worker: getattr(dask_worker, "last_write_ended", 0.0))
    assert max(ended.values()) <= raised  # the writes under way ended before the folder went
    time.sleep(SLOW + 0.5)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------- acquisitions held


def _acquisitions_in(worker) -> list:
    """The acquisitions tables a worker holds (alone, or in their task's result)."""
    for _ in range(100):
        try:
            values = list(worker.data.values())
            break
        except RuntimeError:  # changed by the worker meanwhile
            continue
    values += [v[0] for v in values if isinstance(v, tuple) and v]
    return [v for v in values if isinstance(v, features.Acquisitions)]


def records_what_is_held(path, part, acquisitions, *args):
    """``write_part``, noting the quarters whose acquisitions the worker holds meanwhile."""
    worker = get_worker()
    log = worker.__dict__.setdefault("held_log", {"quarter_of": {}, "done": [], "held": []})
    log["quarter_of"][id(acquisitions)] = part.quarter
    held = [id(table) for table in _acquisitions_in(worker)]
    log["held"].append((list(log["done"]), held))
    report = etl.write_part.__wrapped__(path, part, acquisitions, *args)
    log["done"].append(part.quarter)
    return report


def test_a_quarter_s_acquisitions_are_released_once_its_partitions_are_written(
        dataset, tmp_path, client, monkeypatch):
    plan = files.plan(dataset.directory, partition_size="1MiB").balanced(16, 2**20)
    per_quarter = {q: plan.quarters.count(q) for q in set(plan.quarters)}
    assert len(per_quarter) == 8 and min(per_quarter.values()) >= 2
    records_what_is_held.__wrapped__ = etl.write_part
    monkeypatch.setattr(etl, "write_part", records_what_is_held)
    etl.write(str(tmp_path / "features"), plan)
    (log,) = client.run(lambda dask_worker: dask_worker.__dict__.pop("held_log")).values()
    for done, held in log["held"]:
        for key in held:
            quarter = log["quarter_of"].get(key)  # None: none of its partitions began yet
            assert quarter is None or done.count(quarter) < per_quarter[quarter], (
                f"{quarter}'s acquisitions held after its {per_quarter[quarter]} partitions")
    assert client.run(lambda dask_worker: len(_acquisitions_in(dask_worker))).popitem()[1] == 0


# ------------------------------------------------------------- memory against data


def _etl_command(data: str, out: str, scheduler: str) -> tuple[str, int]:
    """(output, peak resident bytes) of the README's etl command on a running cluster."""
    command = [sys.executable, "-m", "examples.mortgage", "etl", "--data", data, "--out", out,
               "--scheduler", scheduler, "--device", "cpu", "--partition-size", "2MiB"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    said = []
    reader = threading.Thread(target=lambda: said.append(process.stdout.read()))
    reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    reader.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    text = said[0].decode()
    assert process.returncode == 0, text[-3000:]
    return text, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def test_the_etl_command_s_memory_does_not_grow_with_its_data(tmp_path):
    """A dataset and one four times larger, the etl command on a cluster of two worker
    processes (the command's own local CPU workers' memory settings), partitions of 2 MiB:
    the workers' and the command's peak resident memory together grow by at most 0.25 byte
    per byte of text added (holding the whole table before writing it fails this)."""
    sizes = {}
    for name, loans in (("small", 2000), ("large", 8000)):
        spec = gen.Spec(2007, 2007, loans_per_quarter=loans, loans_per_part=2000, seed=9)
        with dask.config.set(scheduler="threads"):
            made = gen.generate(str(tmp_path / name), spec)
        sizes[name] = sum(os.path.getsize(p) for p in made.performance + made.acquisition)
    assert 3.5 < sizes["large"] / sizes["small"] < 4.5 and sizes["small"] > 15e6
    peaks = {}
    with cpu_workers.environ({"scheduler": None}, "cpu"), LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None,
            env={"CUDA_VISIBLE_DEVICES": ""}) as cluster, Client(cluster) as c:
        for name in ("small", "large"):  # each run's peak over the workers' start and before
            text, command = _etl_command(str(tmp_path / name), str(tmp_path / f"{name}.out"),
                                         cluster.scheduler_address)
            assert "read and written in one stage" in text
            workers = sum(m["peak_rss"] for m in c.run(job._host_memory).values())
            peaks[name] = workers + command
    growth = (peaks["large"] - peaks["small"]) / (sizes["large"] - sizes["small"])
    assert growth <= 0.25, f"{growth:.2f} bytes of peak memory per byte of text added"

"""Reading a worker's next chunk ahead: the lent buffers, the background read, and the ETL's
assignment of chunks to workers (on CPUs; the page-locked variant runs in test_mortgage_gpu)."""

from __future__ import annotations

import os

import dask
import numpy as np
import pandas as pd
import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop.pipelines.mortgage import chunk_bytes, etl, read, stages
from dask_gpu_interop.pipelines.mortgage import generate as gen


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("ahead"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=60, loans_per_part=30, seed=11)
    with dask.config.set(scheduler="synchronous"):
        gen.generate(directory, spec)
    return etl.find_dataset(directory)


@pytest.fixture()
def text_file(tmp_path):
    path = tmp_path / "chunk.txt"
    path.write_bytes(bytes(range(256)) * 100)
    return str(path)


# ---------------------------------------------------------------------------------------------
# Buffers


def test_buffers_are_lent_again_the_smallest_that_fits():
    buffers = chunk_bytes.Buffers(pinned=False, keep=2)
    big = buffers.take(800)
    small = buffers.take(80)
    assert buffers.allocated == 2 and big.size == 800 and small.size == 80
    assert buffers.lent(big[10:20]) and not buffers.lent(np.zeros(3, np.uint8))
    buffers.give(big)
    buffers.give(small)
    assert not buffers.lent(big)
    again = buffers.take(50)  # the small one fits: the big one stays idle
    assert np.may_share_memory(again, small) and buffers.allocated == 2
    larger = buffers.take(850)  # an eighth more than 800 was made: still fits
    assert np.may_share_memory(larger, big) and buffers.allocated == 2
    buffers.take(2000)
    assert buffers.allocated == 3


def test_buffers_keep_only_the_largest_idle_ones():
    buffers = chunk_bytes.Buffers(pinned=False, keep=1)
    views = [buffers.take(n) for n in (10, 20, 30)]
    for view in views:
        buffers.give(view)
    kept = buffers.take(1)  # only the largest idle buffer is left to lend
    assert np.may_share_memory(kept, views[2])
    buffers.take(1)
    assert buffers.allocated == 4


# ---------------------------------------------------------------------------------------------
# The background read


def test_a_chunk_read_ahead_is_the_file_and_goes_to_its_own_task_only(text_file):
    buffers = chunk_bytes.Buffers(pinned=False)
    ahead = chunk_bytes.ReadAhead()
    source = read.Source(text_file)
    other = read.Source(text_file, 0, 1000)
    ahead.start(source, buffers)
    assert ahead.claim(other) is None  # not the chunk read ahead: that read is kept
    data, offset = ahead.claim(source).result()
    assert offset == 0 and data.tobytes() == open(text_file, "rb").read()
    assert buffers.lent(data)
    assert ahead.claim(source) is None  # claimed once


def test_a_hint_that_did_not_come_true_gives_its_buffer_back(text_file):
    buffers = chunk_bytes.Buffers(pinned=False)
    ahead = chunk_bytes.ReadAhead()
    ahead.start(read.Source(text_file, 0, 1000), buffers)
    ahead.start(read.Source(text_file), buffers)  # the first read is dropped
    data, _ = ahead.claim(read.Source(text_file)).result()
    assert data.tobytes() == open(text_file, "rb").read()
    buffers.give(data)
    assert not buffers._lent  # the dropped read's buffer is back too (or was lent again)
    assert len(buffers._idle) == buffers.allocated


def test_a_failed_read_ahead_raises_in_the_task_that_claims_it(tmp_path):
    buffers = chunk_bytes.Buffers(pinned=False)
    ahead = chunk_bytes.ReadAhead()
    missing = read.Source(str(tmp_path / "gone.txt"))
    ahead.start(missing, buffers)
    with pytest.raises(FileNotFoundError, match="gone.txt"):
        ahead.claim(missing).result()
    assert not buffers._lent


def test_a_short_file_read_ahead_fails_and_gives_its_buffer_back(text_file):
    buffers = chunk_bytes.Buffers(pinned=False)
    ahead = chunk_bytes.ReadAhead()

    class Truncated(read.Source):
        def extent(self):
            return 0, os.path.getsize(self.path) + 10  # more than the file holds

    source = Truncated(text_file)
    ahead.start(source, buffers)
    with pytest.raises(EOFError, match="chunk.txt ended at byte"):
        ahead.claim(source).result()
    assert buffers.allocated == 1 and not buffers._lent and len(buffers._idle) == 1


def test_fetch_takes_the_chunk_read_ahead_and_release_gives_its_buffer_back(text_file):
    buffers = chunk_bytes.BUFFERS[False]
    source = read.Source(text_file, 0, 5000)
    want, _ = source.read()
    chunk_bytes.read_ahead(source, gpu=False)
    chunk = chunk_bytes.fetch(source, gpu=False)
    assert chunk.data.tobytes() == want.tobytes() and buffers.lent(chunk.data)
    chunk.release()
    assert not buffers.lent(chunk.data)
    plain = chunk_bytes.fetch(source, gpu=False)  # nothing read ahead: read now, not lent
    assert plain.data.tobytes() == want.tobytes() and plain.buffers is None


# ---------------------------------------------------------------------------------------------
# Chunks given to workers


def _sources(sizes):
    return [read.Source(f"/f{i}", 0, size) for i, size in enumerate(sizes)]


@pytest.mark.parametrize("sizes, workers, want", [
    ([10] * 12, ["a", "b"], ["a"] * 6 + ["b"] * 6),
    ([10] * 5, ["a", "b"], ["a", "a", "b", "b", "b"]),
    ([10] * 3, ["a"], ["a"] * 3),
    ([10] * 3, ["a", "b", "c", "d"], ["a", "c", "d"]),  # by the middle of each chunk
    ([100, 10, 10, 10, 10, 10], ["a", "b"], ["a", "b", "b", "b", "b", "b"]),
])
def test_workers_get_runs_of_chunks_of_about_the_same_bytes(sizes, workers, want):
    assert etl.assign(_sources(sizes), workers) == want


def test_each_chunk_task_names_the_next_chunk_of_its_worker(dataset):
    perf, acq, names = dataset
    the_plan = etl.plan(perf, acq, names, "2KiB")
    assert len(the_plan.chunks) >= 6
    owners = etl.assign(the_plan.chunks, ["w0", "w1"])
    chunks, _ = etl._tasks(the_plan, "cpu", "error", False, workers=["w0", "w1"])
    for i, task in enumerate(chunks):
        graph = dict(task.__dask_graph__())
        (call,) = [t for k, t in graph.items() if k == task.key]
        later = [c for c, o in zip(the_plan.chunks[i + 1:], owners[i + 1:], strict=True)
                 if o == owners[i]]
        assert call.args[-1] == (later[0] if later else None)


def test_read_ahead_needs_a_cluster_of_one_thread_workers():
    class FakeClient:
        def __init__(self, threads):
            self.threads = threads

        def scheduler_info(self, n_workers=None):
            return {"workers": {f"tcp://w{i}": {"nthreads": t}
                                for i, t in enumerate(self.threads)}}

    assert etl.read_ahead_workers(FakeClient([1, 1]), "gpu") == ["tcp://w0", "tcp://w1"]
    assert etl.read_ahead_workers(FakeClient([1, 2]), "gpu") is None
    assert etl.read_ahead_workers(FakeClient([1]), "cpu") is None  # off by default on CPUs
    assert etl.read_ahead_workers(FakeClient([1]), "cpu", True) == ["tcp://w0"]
    assert etl.read_ahead_workers(FakeClient([1]), "gpu", False) is None
    assert etl.read_ahead_workers(None, "gpu") is None


def test_etl_with_read_ahead_on_a_cluster_is_the_plain_etl_and_reads_ahead(dataset):
    """Every worker runs its run of chunks in order, each chunk's task after the first finds
    its bytes read ahead, and the table is the one the local scheduler makes without reading
    ahead. (Work stealing is off here: a stolen chunk is read by its thief.)"""
    perf, acq, names = dataset
    the_plan = etl.plan(perf, acq, names, "64KiB")
    assert len(the_plan.chunks) >= 16
    with dask.config.set(scheduler="threads"):
        want = etl.run_plan(the_plan).frame.compute()
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                         env={"CUDA_VISIBLE_DEVICES": ""}) as cluster, Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        client.run(stages.start_process_profile, "cpu")
        result = etl.run_plan(the_plan, read_ahead=True)
        profiles = client.run(stages.stop_process_profile)
        got = result.frame.compute()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    owners = etl.assign(the_plan.chunks, workers)
    for worker in workers:
        profile = profiles[worker]
        assert profile["read/file"]["calls"] == owners.count(worker)
        hits = profile["read/file/waiting for the read ahead"]["calls"]
        assert hits == owners.count(worker) - 1  # all but its first chunk

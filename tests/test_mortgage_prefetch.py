"""Chunks read ahead (prefetch): the chunk's task takes the bytes the read task left in this
process, or reads the file itself; the ETL's table is the same either way (on CPUs here)."""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
from dask.sizeof import sizeof

from dask_gpu_interop.pipelines.mortgage import etl, prefetch, read
from dask_gpu_interop.pipelines.mortgage import generate as gen


@pytest.fixture(autouse=True)
def empty_buffers(monkeypatch):
    monkeypatch.setattr(prefetch, "_held", type(prefetch._held)())
    monkeypatch.setattr(prefetch, "_spare", [])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("prefetch"))
    with dask.config.set(scheduler="synchronous"):
        gen.generate(directory, gen.Spec(2007, 2007, loans_per_quarter=40, loans_per_part=20,
                                         end_year=2009, seed=5))
    return etl.find_dataset(directory)


def _reads(monkeypatch) -> list:
    calls = []
    original = read.read_range
    monkeypatch.setattr(read, "read_range", lambda *a: calls.append(a[0]) or original(*a))
    return calls


def test_the_chunk_task_takes_the_bytes_read_ahead_without_reading_again(dataset, monkeypatch):
    source = etl.plan(*dataset, partition_size="4KiB").chunks[1]
    want = source.read()
    calls = _reads(monkeypatch)
    ticket = prefetch.read_ahead(source, "cpu")
    assert sizeof(ticket) == ticket.nbytes == len(want[0])  # dask places the task by it
    with prefetch.take(ticket) as (got_source, data):
        assert got_source == source
        assert bytes(data[0]) == bytes(want[0]) and data[1] == want[1]
    assert len(calls) == 1
    with prefetch.take(ticket) as (_, data):  # taken once: a second take reads itself
        assert data is None
    assert len(prefetch._spare) == 1  # the buffer waits for the next read


def test_a_ticket_of_another_process_or_one_dropped_means_reading_the_file(dataset):
    chunks = etl.plan(*dataset, partition_size="4KiB").chunks
    ticket = prefetch.read_ahead(chunks[0], "cpu")
    elsewhere = prefetch.Ticket(ticket.source, ticket.token, ticket.pid + 1, ticket.nbytes)
    with prefetch.take(elsewhere) as (source, data):
        assert source == chunks[0] and data is None
    later = [prefetch.read_ahead(c, "cpu") for c in chunks[1:prefetch.HELD + 1]]
    assert len(prefetch._held) == prefetch.HELD  # the first was dropped
    with prefetch.take(ticket) as (_, data):
        assert data is None
    with prefetch.take(later[-1]) as (_, data):
        assert bytes(data[0]) == bytes(chunks[prefetch.HELD].read()[0])


def test_a_spare_buffer_is_reused_for_a_chunk_it_fits(dataset):
    big, small = sorted(etl.plan(*dataset, partition_size="4KiB").chunks,
                        key=lambda c: -len(c.read()[0]))[:2]
    with prefetch.take(prefetch.read_ahead(big, "cpu")):
        pass
    (spare,) = prefetch._spare
    ticket = prefetch.read_ahead(small, "cpu")
    assert prefetch._held[ticket.token][2] is spare and not prefetch._spare


def test_the_smallest_spare_that_fits_is_taken_among_several(dataset):
    chunk = etl.plan(*dataset, partition_size="4KiB").chunks[0]
    size = len(chunk.read()[0])
    tiny, fits, huge = (np.empty(n, dtype=np.uint8) for n in (size // 2, size, size * 3))
    prefetch._spare[:] = [tiny, fits, huge]
    ticket = prefetch.read_ahead(chunk, "cpu")
    assert prefetch._held[ticket.token][2] is fits
    assert [b is tiny or b is huge for b in prefetch._spare] == [True, True]


def test_the_etl_with_reads_ahead_gives_the_same_table(dataset):
    the_plan = etl.plan(*dataset, partition_size="8KiB")
    assert len(the_plan.chunks) > 3
    frames = {}
    for ahead in (False, True):
        chunks, _ = etl._tasks(the_plan, "cpu", "error", False, read_ahead=ahead)
        with dask.config.set(scheduler="threads", num_workers=2):
            frames[ahead] = pd.concat([f for f, _ in dask.compute(*chunks)], ignore_index=True)
    pd.testing.assert_frame_equal(frames[True], frames[False])
    assert len(frames[True]) > 0


def test_the_gpu_turn_is_one_task_at_a_time_and_free_on_cpus():
    with prefetch.gpu_turn("gpu"):
        assert prefetch._gpu.locked()
    assert not prefetch._gpu.locked()
    with prefetch.gpu_turn("cpu"):
        assert not prefetch._gpu.locked()

"""The all-to-all's direct exchange (``gpu-interop.shuffle.exchange: direct``) on pandas
partitions and CPU worker processes: each split sends its batches to their workers' inboxes
itself. Its graph, its result, its inboxes emptied, its setting, its fallback in steps, a
failed send, two shuffles at once, and an output partition lost after the shuffle ended (a
worker killed in the middle of it: tests/all_to_all/test_faults.py)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.utils import key_split
from distributed import get_task_stream, wait

from dask_gpu_interop import ShuffleError, shuffle, shuffle_merge
from dask_gpu_interop.all_to_all import inbox
from dask_gpu_interop.all_to_all.driver import _persisted_partitions
from dask_gpu_interop.all_to_all.graph import build_direct_graph, send_keys
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY, TIMEOUT_KEY, Plan

from .helpers import (
    SlowSplit,
    StuckReceive,
    assert_each_key_in_one_partition,
    assert_same_rows,
    dask_frame,
    frame,
    inboxes_empty,
    own_cluster,
    partitions_of,
    tasks_by_step,
)

DIRECT = {EXCHANGE_KEY: "direct"}


@pytest.fixture(scope="module")
def client():
    with own_cluster(3) as client:
        yield client


def test_the_direct_graph_has_a_send_per_source_and_outputs_that_depend_on_every_send():
    plan = Plan(workers=("a", "b", "c"), owners=("a", "a", "c", "a", "c"), npartitions=4)
    graph, keys = build_direct_graph(plan, [f"in-{i}" for i in range(5)], "0f" * 16, ["key"],
                                     {}, False, 30.0)  # fmt: skip
    tasks_of = graph.to_dict()
    found, annotations = tasks_by_step(graph)
    assert sorted(found) == ["gpu-shuffle-output", "gpu-shuffle-send"]
    sends = sorted(found["gpu-shuffle-send"])
    assert [k[1] for k in sends] == [0, 2]  # sources a and c
    # a's send splits its inputs 0, 1 and 3 and sends to every destination's run, each batch
    # to be taken within the timeout
    send_a = tasks_of[sends[0]]
    assert send_a[1] == ["in-0", "in-1", "in-3"]
    assert send_a[-2:] == ([("0/0", "a", 0, 2), ("1/0", "b", 2, 3), ("2/0", "c", 3, 4)], 30.0)
    assert keys == [(k[0], j) for j, k in enumerate(sorted(found["gpu-shuffle-output"]))]
    for j, key in enumerate(keys):
        d = plan.destination(j)
        task = tasks_of[key]
        first, stop = plan.outputs_of(d)
        # made from its run's batches of both sources, once both sends ended (their receipts)
        assert task[2:8] == (f"{d}/0", j - first, stop - first, False, j, (0, 2))
        assert list(task[8:]) == sends
        assert annotations[key]["workers"] == [plan.workers[d]]
    assert send_keys(plan, "0f" * 16) == sends  # what the client watches beside the outputs
    assert all(k[0] == f"{inbox.SEND}-{'0f' * 16}" for k in sends)  # what the inboxes ask for
    # b is no source: its outputs depend on both sends all the same
    for d in range(3):
        assert graph.dependencies[f"gpu-shuffle-output-{'0f' * 16}-on-{d}"] == {
            f"gpu-shuffle-send-{'0f' * 16}-on-0", f"gpu-shuffle-send-{'0f' * 16}-on-2"}
    for key in sends:
        assert annotations[key] == {"workers": [plan.workers[key[1]]],
                                    "allow_other_workers": False}
    with pytest.raises(ValueError, match="one step"):
        build_direct_graph(Plan(workers=("a",), owners=("a",), npartitions=2, sizes=(10,),
                                step_bytes=5), ["in-0"], "0f" * 16, ["key"], {}, False)


@pytest.mark.parametrize("npartitions", [None, 5, 1])
@pytest.mark.parametrize("ignore_index", [False, True])
def test_the_direct_exchange_gives_every_row_once_each_key_in_one_partition(
        client, npartitions, ignore_index):
    blocks = frame(7, rows=800, empty=(2,))
    with dask.config.set(DIRECT), get_task_stream(client=client) as stream:
        shuffled = shuffle(dask_frame(blocks), ["key", "name"], npartitions,
                           ignore_index=ignore_index)
    parts = partitions_of(client, shuffled)
    assert len(parts) == (npartitions or 7)
    if ignore_index:
        parts = [p.rename_axis(None) for p in parts]
        assert all(list(p.index) == list(range(len(p))) for p in parts)
        got = sorted(tuple(r) for p in parts for r in p.itertuples(index=False))
        want = sorted(tuple(r) for b in blocks for r in b.itertuples(index=False))
        assert got == want
    else:
        assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, ["key", "name"])
    ran = {key_split(task["key"]) for task in stream.data}
    assert {"gpu-shuffle-send", "gpu-shuffle-output"} <= ran
    assert "gpu-shuffle-batch" not in ran and "gpu-shuffle-split" not in ran
    # every batch left its inbox with its run's last output partition
    assert inboxes_empty(client)


def test_the_direct_exchange_says_what_crossed_between_workers(client):
    blocks = frame(6, rows=2_000)
    with dask.config.set(DIRECT):
        shuffled, stats = shuffle(dask_frame(blocks), "key", 6, return_stats=True)
    assert 0.3 * stats.output_bytes < stats.crossing_bytes < stats.output_bytes
    assert all(source != destination for source, destination in stats.crossed)
    assert {s for s, _ in stats.crossed} <= set(stats.workers)
    assert_same_rows(partitions_of(client, shuffled), blocks)


def test_in_steps_the_direct_exchange_leaves_it_to_the_batch_tasks(client):
    blocks = frame(8, rows=400)
    with dask.config.set({**DIRECT, STEP_KEY: "40 kB"}), \
            get_task_stream(client=client) as stream:  # fmt: skip
        parts = partitions_of(client, shuffle(dask_frame(blocks), "key", 6))
    ran = {key_split(task["key"]) for task in stream.data}
    assert "gpu-shuffle-batch" in ran and "gpu-shuffle-send" not in ran
    assert_same_rows(parts, blocks)


def test_an_unknown_exchange_is_refused_in_one_line_before_any_work(client):
    with dask.config.set({EXCHANGE_KEY: "carrier pigeon"}), \
            get_task_stream(client=client) as stream:  # fmt: skip
        with pytest.raises(ValueError, match="choose one of batches, direct") as refused:
            shuffle(dask_frame(frame(2, rows=10)), "key")
    assert "\n" not in str(refused.value) and EXCHANGE_KEY in str(refused.value)
    assert stream.data == []


def test_a_failed_send_ends_the_outputs_waiting_for_it_in_one_line(client):
    def not_a_frame():
        return {"key": [1, 2, 3]}  # a partition that is no DataFrame: its split fails

    # one input partition: the other workers' outputs depend on no send and wait for its batch
    source = dd.from_delayed([dask.delayed(not_a_frame)()], meta=frame(1, rows=0)[0],
                             verify_meta=False)  # fmt: skip
    with dask.config.set(DIRECT), pytest.raises(ShuffleError, match="gpu-shuffle-send task "
                                                "failed") as failed:  # fmt: skip
        shuffle(source, "key", npartitions=6)
    assert "TypeError" in str(failed.value) and "\n" not in str(failed.value)
    # the waiting outputs ended: the workers' threads are free and their inboxes empty
    blocks = frame(3, rows=300)
    with dask.config.set(DIRECT):
        assert_same_rows(partitions_of(client, shuffle(dask_frame(blocks), "key", 3)), blocks)
    assert inboxes_empty(client)


def unpinned(keys, dask_scheduler=None):
    return all(dask_scheduler.tasks[key].worker_restrictions is None for key in keys)


def wait_unpinned(client, shuffled) -> None:
    """Until the scheduler no longer pins the shuffle's output partitions (the client lifts
    the pins as the shuffle returns, without waiting for the answer); at most 10 s."""
    wait_unpinned_keys(client, [future.key for future in _persisted_partitions(shuffled)])


def wait_unpinned_keys(client, keys) -> None:
    """Until the scheduler no longer pins ``keys``; at most 10 s."""
    deadline = time.monotonic() + 10
    while not client.run_on_scheduler(unpinned, keys) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.run_on_scheduler(unpinned, keys)


@pytest.mark.slow
@pytest.mark.parametrize("placed", ["spread", "on one worker"])
@pytest.mark.parametrize("exchange", ["direct", "batches"])
def test_an_output_lost_after_its_shuffle_ended_is_made_again(exchange, placed):
    # its worker lost after the shuffle returned, the scheduler computes the output again from
    # its lineage: pinned to the worker gone, it would wait for that worker forever. The batch
    # tasks make it again; with the direct exchange the sends run again, hold their splits,
    # and the output partitions made again pull their rows from them. With every input on one
    # worker, the other worker's output partitions come from the first worker's send alone.
    blocks = frame(8, rows=1_000)
    with own_cluster(2) as client, dask.config.set({EXCHANGE_KEY: exchange}):
        holder, other = sorted(client.nthreads())
        source = client.persist(dask_frame(blocks),
                                workers=[holder] if placed == "on one worker" else None)
        wait(source)
        shuffled = shuffle(source, "key", 4)
        wait_unpinned(client, shuffled)
        assert {w for ws in client.who_has(shuffled).values() for w in ws} == {holder, other}
        client.run(os._exit, 1, workers=[other], on_error="ignore")  # its nanny restarts it
        futures = client.compute(shuffled.to_delayed())
        wait(futures, timeout=60)  # not pinned to the worker gone: made again elsewhere
        got = client.gather(futures)
        assert_same_rows(got, blocks)
        assert_each_key_in_one_partition(got, ["key"])
        del futures, got
        client.wait_for_workers(2, timeout=60)
        # the splits held for the partitions made again leave once they are made
        assert inboxes_empty(client, within=20)


@pytest.mark.slow
def test_a_merge_on_a_direct_shuffle_whose_worker_was_lost_still_joins():
    rng = np.random.default_rng(5)
    left = pd.DataFrame({"id": rng.integers(0, 200, 3_000), "v": rng.random(3_000)})
    right = pd.DataFrame({"id": np.arange(200), "w": np.arange(200) * 2.0})
    with own_cluster(2) as client, dask.config.set(DIRECT):
        joined = shuffle_merge(dd.from_pandas(left, npartitions=4),
                               dd.from_pandas(right, npartitions=2), on="id")
        shuffled = [f for f in client.futures.values()
                    if str(f.key[0]).startswith("gpu-shuffle-output")]
        assert shuffled and wait_unpinned_keys(client, [f.key for f in shuffled]) is None
        victim = sorted(client.nthreads())[1]
        client.run(os._exit, 1, workers=[victim], on_error="ignore")  # its nanny restarts it
        got = joined.compute().sort_values(["id", "v"]).reset_index(drop=True)
    want = left.merge(right, on="id").sort_values(["id", "v"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_two_shuffles_at_once_on_one_thread_per_worker_both_end(client):
    # an output waiting for its batches leaves its worker's only thread to the other
    # shuffle's send, which the first one's batches may wait for
    blocks = [frame(6, rows=600, seed=seed) for seed in (1, 2)]
    with dask.config.set(DIRECT), ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(shuffle, dask_frame(b), "key", 5) for b in blocks]
        outs = [run.result(timeout=60) for run in runs]
    for out, b in zip(outs, blocks, strict=True):
        assert_same_rows(partitions_of(client, out), b)


def _sample_threads(dask_worker=None, seconds: float = 0.0):
    """On a worker: start counting its threads every 10 ms until ``_most_threads`` is asked."""
    import threading

    most = dask_worker._most_threads = [threading.active_count(), True]

    def sample():
        while most[1]:
            most[0] = max(most[0], threading.active_count())
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    return most[0]


def _most_threads(dask_worker=None):
    most = dask_worker._most_threads
    most[1] = False
    return most[0]


def _count_status_calls(dask_scheduler=None):
    """On the scheduler: count the calls of its ``get_task_status`` handler from now on."""
    handler = dask_scheduler.handlers["get_task_status"]
    calls = dask_scheduler._status_calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return handler(*args, **kwargs)

    dask_scheduler.handlers["get_task_status"] = counted


def _status_calls(dask_scheduler=None):
    return dask_scheduler._status_calls[0]


@pytest.mark.slow
def test_outputs_whose_batches_are_on_their_way_take_no_thread_and_ask_nothing():
    # 400 output partitions, one source slow: while its batches are on their way, the other
    # worker's 200 output partitions neither run in threads of their own nor ask the
    # scheduler about their shuffle
    blocks = frame(8, rows=2_000)
    with own_cluster(2) as client, dask.config.set(DIRECT):
        fast, slow = sorted(client.nthreads())
        source = dask_frame(blocks).persist()
        wait(source)
        client.register_plugin(SlowSplit(slow, 3.0))
        before = client.run(_sample_threads, workers=[fast])[fast]
        client.run_on_scheduler(_count_status_calls)
        shuffled = shuffle(source, "key", 400)
        most = client.run(_most_threads, workers=[fast])[fast]
        calls = client.run_on_scheduler(_status_calls)
        assert_same_rows(partitions_of(client, shuffled), blocks)
    assert most <= before + 8, (before, most)
    assert calls <= 10


@pytest.mark.slow
def test_a_send_that_never_ends_is_one_shuffle_error_after_the_timeout():
    blocks = frame(4, rows=500)
    pool = ThreadPoolExecutor(1)  # a call that never returns is left to end with the cluster
    try:
        with own_cluster(2) as client, dask.config.set({**DIRECT, TIMEOUT_KEY: "3s"}):
            shuffle(dask_frame(blocks), "key")  # the inboxes are there
            stuck = sorted(client.nthreads())[1]
            client.register_plugin(StuckReceive(stuck))
            call = pool.submit(shuffle, dask_frame(blocks), "key")
            with pytest.raises(ShuffleError, match="3 s") as failed:
                call.result(timeout=60)
    finally:
        pool.shutdown(wait=False)
    assert "\n" not in str(failed.value) and "gpu-interop.shuffle.timeout" in str(failed.value)


class _Worker:
    def __init__(self):
        self.handlers = {}


def test_the_inbox_hands_a_run_over_once_every_source_has_sent():
    worker = _Worker()
    box = inbox.ShuffleInbox()
    box.setup(worker)
    assert worker.handlers[inbox.HANDLER] == box.receive
    assert box.receive("t1", "0/0", 1, "batch-1", sender="w1", nbytes=10) == "OK"
    with pytest.raises(RuntimeError, match="no longer on its worker"):
        box.take("t1", "0/0", (0, 1))  # source 0 has not sent
    box.put("t1", "0/0", 0, "batch-0")
    assert box.take("t1", "0/0", (0, 1)) == ["batch-0", "batch-1"]  # by source
    assert box.received("t1") == [("w1", 10)]
    # a run's batches leave with its last output partition; asked for again, it says so
    box.made("t1", "0/0", 2)
    assert box.take("t1", "0/0", (0, 1)) == ["batch-0", "batch-1"]
    box.made("t1", "0/0", 2)
    assert box._boxes == {} and box._left == {}
    with pytest.raises(RuntimeError, match="no longer on its worker"):
        box.take("t1", "0/0", (0, 1))
    box.put("t1", "0/0", 0, "again")  # a send computed again for a run made: not kept
    assert box._boxes == {}
    box.teardown(worker)
    assert inbox.HANDLER not in worker.handlers and inbox.PULL not in worker.handlers


def test_a_stopped_shuffle_turns_late_batches_away_and_says_why_it_stopped():
    box = inbox.ShuffleInbox()
    box.setup(_Worker())
    box.put("t1", "0/0", 0, "batch-0")
    assert box.drop("t1") == 1
    box.put("t1", "0/0", 1, "late")  # a send that ended after the shuffle stopped
    assert box._boxes == {}
    with pytest.raises(RuntimeError, match="shuffle stopped"):
        box.take("t1", "0/0", (0, 1))
    box.drop("t3", inbox.EXPIRED)
    box.drop("t3")  # a later drop keeps the first reason
    with pytest.raises(RuntimeError, match="client went away"):
        box.take("t3", "0/0", (0,))


def test_a_send_run_again_holds_its_split_and_gives_each_output_its_rows():
    from dask_gpu_interop.all_to_all import tasks

    box = inbox.ShuffleInbox()
    box.setup(_Worker())
    assert box.sent("t1") is False and box.sent("t1") is True  # the second run is again
    groups = tasks.split(frame(2, rows=100), ["key"], {}, 4, False)
    box.hold("t1", 3, groups)
    for j in range(4):
        frames, offsets = box.rows("t1", 3, j)
        want = tasks.batch(groups, j, j + 1)
        assert [len(f) for f in frames] == [len(f) for f in want[0]]
        assert [list(o) for o in offsets] == [list(o) for o in want[1]]
    answer = box.pull("t1", 3, 2)
    assert answer["status"] == "OK"
    assert box.pull("t1", 4, 2) == {"status": "gone", "why": inbox.GONE}
    assert box.watched() == {"t1": [(f"{inbox.SEND}-t1", 3)]}
    assert box.drop("t1") == 1 and box.watched() == {}


class _Scheduler:
    def __init__(self, states):
        self.states, self.asked = states, []

    async def get_task_status(self, keys):
        self.asked.append(list(keys))
        return {key: self.states.get(key) for key in keys}


def test_an_inbox_lets_go_of_what_no_running_shuffle_wants():
    import asyncio

    worker = _Worker()
    box = inbox.ShuffleInbox()
    box.setup(worker)
    worker.scheduler = _Scheduler({(f"{inbox.SEND}-live", 0): "memory",
                                   (f"{inbox.SEND}-live", 1): "processing",
                                   (f"{inbox.SEND}-gone", 0): "memory"})  # fmt: skip
    asyncio.run(box.expire())
    assert worker.scheduler.asked == []  # nothing held: nothing asked
    box.put("live", "0/0", 0, "a")
    box.put("live", "0/0", 1, "b")
    box.put("gone", "0/0", 0, "c")
    box.put("gone", "0/0", 1, "d")  # its send 1 is forgotten: its client went away
    box.hold("ended", 0, "split")  # its send released: the partitions made again are made
    worker.scheduler.states[(f"{inbox.SEND}-ended", 0)] = "released"
    asyncio.run(box.expire())
    assert set(box._boxes) == {"live"} and box._held == {}
    with pytest.raises(RuntimeError, match="client went away"):
        box.take("gone", "0/0", (0, 1))

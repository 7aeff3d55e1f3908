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
import pytest
from dask.utils import key_split
from distributed import get_task_stream, wait

from dask_gpu_interop import ShuffleError, shuffle
from dask_gpu_interop.all_to_all import inbox
from dask_gpu_interop.all_to_all.driver import _persisted_partitions
from dask_gpu_interop.all_to_all.graph import build_direct_graph, send_keys
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY, Plan

from .helpers import (
    assert_each_key_in_one_partition,
    assert_same_rows,
    boxes,
    cpu_client,
    dask_frame,
    frame,
    partitions_of,
)

DIRECT = {EXCHANGE_KEY: "direct"}


@pytest.fixture(scope="module")
def client():
    with cpu_client(3) as client:
        yield client


def test_the_direct_graph_has_a_send_per_source_and_outputs_on_their_workers_send_alone():
    plan = Plan(workers=("a", "b", "c"), owners=("a", "a", "c", "a", "c"), npartitions=4)
    graph, keys = build_direct_graph(plan, [f"in-{i}" for i in range(5)], "0f" * 16, ["key"],
                                     {}, False)  # fmt: skip
    tasks_of = graph.to_dict()
    found = {}
    annotations = {}
    for layer in graph.layers.values():
        for key in layer:
            found.setdefault(key_split(key), []).append(key)
            annotations[key] = layer.annotations
    assert sorted(found) == ["gpu-shuffle-output", "gpu-shuffle-send"]
    sends = sorted(found["gpu-shuffle-send"])
    assert [k[1] for k in sends] == [0, 2]  # sources a and c
    # a's send splits its inputs 0, 1 and 3 and sends to every destination's run
    send_a = tasks_of[sends[0]]
    assert send_a[1] == ["in-0", "in-1", "in-3"]
    assert send_a[-1] == [("0/0", "a", 0, 2), ("1/0", "b", 2, 3), ("2/0", "c", 3, 4)]
    assert keys == [(k[0], j) for j, k in enumerate(sorted(found["gpu-shuffle-output"]))]
    for j, key in enumerate(keys):
        d = plan.destination(j)
        task = tasks_of[key]
        first, stop = plan.outputs_of(d)
        # it waits in the inbox for the batches of both sources, after its own worker's send
        assert task[2:7] == (f"{d}/0", j - first, stop - first, False, (0, 2))
        assert list(task[7:]) == [k for k in sends if k[1] == d]
        assert annotations[key]["workers"] == [plan.workers[d]]
    assert send_keys(plan, "0f" * 16) == sends  # what the client watches beside the outputs
    assert all(k[0] == f"{inbox.SEND}-{'0f' * 16}" for k in sends)  # what the outputs ask for
    # b is no source: its output depends on no task
    assert graph.dependencies["gpu-shuffle-output-" + "0f" * 16 + "-on-1"] == set()
    assert graph.dependencies["gpu-shuffle-output-" + "0f" * 16 + "-on-2"] == {
        "gpu-shuffle-send-" + "0f" * 16 + "-on-2"}
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
    assert set(client.run(boxes).values()) == {(0, 0)}


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
    assert set(client.run(boxes).values()) == {(0, 0)}


def unpinned(keys, dask_scheduler=None):
    return all(dask_scheduler.tasks[key].worker_restrictions is None for key in keys)


def wait_unpinned(client, shuffled) -> None:
    """Until the scheduler no longer pins the shuffle's output partitions (the client lifts
    the pins as the shuffle returns, without waiting for the answer); at most 10 s."""
    keys = [future.key for future in _persisted_partitions(shuffled)]
    deadline = time.monotonic() + 10
    while not client.run_on_scheduler(unpinned, keys) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.run_on_scheduler(unpinned, keys)


@pytest.mark.slow
@pytest.mark.parametrize("exchange", ["direct", "batches"])
def test_an_output_lost_after_its_shuffle_ended_is_made_again_or_one_clear_error(exchange):
    # its worker lost after the shuffle returned, the scheduler computes the output again from
    # its lineage: pinned to the worker gone, it would wait for that worker forever. The batch
    # tasks make it again; the direct exchange cannot send its batches again and says so.
    blocks = frame(8, rows=1_000)
    with cpu_client(2) as client, dask.config.set({EXCHANGE_KEY: exchange}):
        source = dask_frame(blocks).persist()
        shuffled = shuffle(source, "key", 4)
        wait_unpinned(client, shuffled)
        victim = next(iter(client.who_has(shuffled).values()))[0]
        client.run(os._exit, 1, workers=[victim], on_error="ignore")  # its nanny restarts it
        if exchange == "batches":
            futures = client.compute(shuffled.to_delayed())
            wait(futures, timeout=60)  # not pinned to the worker gone: made again elsewhere
            got = client.gather(futures)
            assert_same_rows(got, blocks)
            assert_each_key_in_one_partition(got, ["key"])
            return
        with pytest.raises(Exception, match="computed again after its shuffle ended") as failed:
            client.compute(shuffled).result(timeout=60)
        assert "\n" not in str(failed.value)
        client.wait_for_workers(2, timeout=60)
        # nothing of it is left in an inbox
        assert set(client.run(boxes).values()) <= {(0, 0), None}


@pytest.mark.slow
def test_an_output_of_a_worker_without_input_lost_after_the_shuffle_is_one_clear_error():
    # every input on one worker: the other's output partitions depend on no send. Lost with
    # their worker after the shuffle, they are computed again on the first, wait there for
    # batches that no send will make again, and learn from the scheduler that the shuffle ended
    blocks = frame(6, rows=1_000)
    with cpu_client(2) as client, dask.config.set(DIRECT):
        holder, other = sorted(client.nthreads())
        source = client.persist(dask_frame(blocks), workers=[holder])
        wait(source)
        shuffled, stats = shuffle(source, "key", 6, return_stats=True)
        assert {s for s, _ in stats.crossed} == {holder}  # one source
        wait_unpinned(client, shuffled)
        assert other in {w for ws in client.who_has(shuffled).values() for w in ws}
        client.run(os._exit, 1, workers=[other], on_error="ignore")  # its nanny restarts it
        with pytest.raises(Exception, match="computed again after its shuffle ended") as failed:
            client.compute(shuffled).result(timeout=60)
        assert "\n" not in str(failed.value)


def test_two_shuffles_at_once_on_one_thread_per_worker_both_end(client):
    # an output waiting for its batches leaves its worker's only thread to the other
    # shuffle's send, which the first one's batches may wait for
    blocks = [frame(6, rows=600, seed=seed) for seed in (1, 2)]
    with dask.config.set(DIRECT), ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(shuffle, dask_frame(b), "key", 5) for b in blocks]
        outs = [run.result(timeout=60) for run in runs]
    for out, b in zip(outs, blocks, strict=True):
        assert_same_rows(partitions_of(client, out), b)


class _Worker:
    def __init__(self):
        self.handlers = {}


def test_the_inbox_hands_a_run_over_once_every_source_has_sent():
    worker = _Worker()
    box = inbox.ShuffleInbox()
    box.setup(worker)
    assert worker.handlers[inbox.HANDLER] == box.receive
    assert box.receive("t1", "0/0", 1, "batch-1", sender="w1", nbytes=10) == "OK"
    assert not box.arrived("t1", "0/0", 2)
    waiting = ThreadPoolExecutor(1).submit(box.wait_for, "t1", "0/0", 2)
    time.sleep(0.2)
    assert not waiting.done()  # source 0 has not sent yet
    box.put("t1", "0/0", 0, "batch-0")
    assert waiting.result(timeout=5) == ["batch-0", "batch-1"]  # by source
    assert box.arrived("t1", "0/0", 2)
    assert box.received("t1") == [("w1", 10)]
    # a run's batches leave with its last output partition; asked for again, it says so
    box.made("t1", "0/0", 2)
    assert box.wait_for("t1", "0/0", 2) == ["batch-0", "batch-1"]
    box.made("t1", "0/0", 2)
    assert box._boxes == {} and box._left == {}
    with pytest.raises(RuntimeError, match="no longer on its worker"):
        box.wait_for("t1", "0/0", 2)
    box.teardown(worker)
    assert inbox.HANDLER not in worker.handlers


def test_a_stopped_shuffle_ends_its_waiting_outputs_and_turns_late_batches_away():
    box = inbox.ShuffleInbox()
    box.setup(_Worker())
    box.put("t1", "0/0", 0, "batch-0")
    waiting = ThreadPoolExecutor(1).submit(box.wait_for, "t1", "0/0", 2, None, 30.0)
    time.sleep(0.2)
    assert box.drop("t1") == 1
    with pytest.raises(RuntimeError, match="shuffle stopped"):
        waiting.result(timeout=5)  # woken by the drop, not by its poll
    box.put("t1", "0/0", 1, "late")  # a send that ended after the shuffle stopped
    assert box._boxes == {}
    # a cancelled task stops waiting at its next poll
    wanted = [True]
    waiting = ThreadPoolExecutor(1).submit(box.wait_for, "t2", "0/0", 1, lambda: wanted[0],
                                           0.05)  # fmt: skip
    time.sleep(0.2)
    assert not waiting.done()
    wanted[0] = False
    with pytest.raises(RuntimeError, match="cancelled"):
        waiting.result(timeout=5)
    # a shuffle dropped for a reason ends every output partition waiting for it with that reason
    box.drop("t3", inbox.ENDED)
    box.drop("t3")  # a later drop keeps the first reason
    with pytest.raises(RuntimeError, match="computed again after its shuffle ended"):
        box.wait_for("t3", "0/0", 1)

"""The all-to-all (dask_gpu_interop.shuffle) on pandas partitions and CPU worker processes: the
protocol the GPU path runs, with its plan, its graph, its tasks, its result, what it reports,
its errors and a worker killed in the middle of it."""

from __future__ import annotations

import logging
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.sizeof import sizeof
from dask.utils import key_split
from distributed import Client, LocalCluster, get_task_stream, wait

import dask_gpu_interop
from dask_gpu_interop import ShuffleError, shuffle, shuffle_merge
from dask_gpu_interop.all_to_all import tasks
from dask_gpu_interop.all_to_all.checks import hash_casts
from dask_gpu_interop.all_to_all.graph import build_graph
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, TIMEOUT_KEY, Plan, timeout_setting

from .helpers import (
    assert_each_key_in_one_partition,
    assert_same_rows,
    dask_frame,
    frame,
    own_cluster,
    partitions_of,
    sorted_rows,
    tasks_by_step,
)

# --------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("workers, npartitions", [(2, 8), (3, 8), (4, 3), (3, 1), (1, 5)])
def test_each_worker_gets_a_contiguous_run_of_outputs_and_every_output_one_worker(workers,
                                                                                  npartitions):
    plan = Plan(workers=tuple(f"w{i}" for i in range(workers)), owners=("w0",),
                npartitions=npartitions)
    runs = [plan.outputs_of(d) for d in range(workers)]
    assert runs[0][0] == 0 and runs[-1][1] == npartitions
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))
    sizes = [stop - first for first, stop in runs]
    assert max(sizes) - min(sizes) <= 1
    for j in range(npartitions):
        d = plan.destination(j)
        assert runs[d][0] <= j < runs[d][1]
    assert plan.destinations == [d for d, size in enumerate(sizes) if size]


def test_a_plan_with_an_input_on_no_known_worker_is_refused():
    with pytest.raises(ValueError, match="not among the workers"):
        Plan(workers=("a", "b"), owners=("a", "gone"), npartitions=2)


def test_the_graph_has_a_split_per_worker_a_batch_per_pair_an_output_per_partition():
    plan = Plan(workers=("a", "b", "c"), owners=("a", "a", "c", "a", "c"), npartitions=4)
    graph, keys = build_graph(plan, [f"in-{i}" for i in range(5)], "0f" * 16, ["key"], {},
                              False)  # fmt: skip
    tasks_by_prefix, restrictions = tasks_by_step(graph)
    assert sorted(tasks_by_prefix) == ["gpu-shuffle-batch", "gpu-shuffle-output",
                                       "gpu-shuffle-split"]
    # sources a and c, each splitting its inputs in one task
    assert sorted(k[1:] for k in tasks_by_prefix["gpu-shuffle-split"]) == [(0, 0), (2, 0)]
    split_a = graph.to_dict()[(tasks_by_prefix["gpu-shuffle-split"][0][0], 0, 0)]
    assert [i for i in range(5) if f"in-{i}" in str(split_a)] == [0, 1, 3]
    # destinations a, b, c (outputs 0-1, 2, 3): one batch per pair
    assert sorted((k[1], k[3]) for k in tasks_by_prefix["gpu-shuffle-batch"]) == [
        (0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)]
    assert keys == [(k[0], j) for j, k in enumerate(sorted(tasks_by_prefix["gpu-shuffle-output"]))]
    # each output partition made from the batches bound for its worker, from every source,
    # at its place among them (outputs 0 and 1 are the first and second of a's run)
    tasks_of = graph.to_dict()
    for j, key in enumerate(keys):
        d = plan.destination(j)
        task = tasks_of[key]
        assert sorted(k[1:] for k in task[1]) == [(0, 0, d, 0), (2, 0, d, 0)]
        assert task[2] == j - plan.outputs_of(d)[0]
    for key, annotated in restrictions.items():
        assert annotated["allow_other_workers"] is False  # pinned: never stolen
        name = key_split(key)
        if name == "gpu-shuffle-output":
            assert annotated["workers"] == [plan.workers[plan.destination(key[1])]]
        else:  # split and batch on their source
            assert annotated["workers"] == [plan.workers[key[1]]]


# --------------------------------------------------------------------------- the tasks


def test_rows_are_ordered_by_output_partition_with_where_each_starts():
    block = frame(1, rows=500)[0]
    ordered, offsets = tasks.order_by_partition(block, ["key"], {"key": "float64"}, 7, False)
    ids = tasks.partition_ids(block, ["key"], {"key": "float64"}, 7)
    assert offsets[0] == 0 and offsets[-1] == 500 and (np.diff(offsets) >= 0).all()
    assert list(np.diff(offsets)) == list(np.bincount(ids, minlength=7))
    for j in range(7):
        rows = ordered.iloc[offsets[j]:offsets[j + 1]]
        assert set(rows.index) == set(block.index[ids == j])
        assert list(rows["n"]) == sorted(rows["n"])  # stable: the input's order kept


def test_groups_hold_at_most_the_bytes_and_rows_allowed(monkeypatch):
    monkeypatch.setattr(tasks, "GROUP_BYTES", 100)
    monkeypatch.setattr(tasks, "GROUP_ROWS", 10)
    assert tasks.groups([(1, 40), (1, 40), (1, 40), (1, 200), (1, 10)]) == [
        range(0, 2), range(2, 3), range(3, 4), range(4, 5)]  # a large one alone
    assert tasks.groups([(6, 1), (4, 1), (1, 1), (12, 1)]) == [range(0, 2), range(2, 3),
                                                              range(3, 4)]
    assert tasks.groups([]) == []


@pytest.mark.parametrize("group_bytes", [1 << 40, 1])  # one group; a group per partition
def test_a_workers_partitions_split_in_groups_keep_every_row_in_its_partition(
        monkeypatch, group_bytes):
    monkeypatch.setattr(tasks, "GROUP_BYTES", group_bytes)
    blocks = frame(3, rows=200)
    frames, offsets = tasks.split(blocks, ["key"], {"key": "float64"}, 5, False)
    assert len(frames) == (1 if group_bytes > 1 else 3)
    whole = pd.concat(blocks)
    ids = tasks.partition_ids(whole, ["key"], {"key": "float64"}, 5)
    for j in range(5):
        got = pd.concat([f.iloc[o[j]:o[j + 1]] for f, o in zip(frames, offsets, strict=True)])
        pd.testing.assert_frame_equal(got.sort_values("n"), whole[ids == j].sort_values("n"))


def test_partition_ids_are_dasks_own_hash_partitioning():
    from dask.dataframe.shuffle import partitioning_index

    block = frame(1, rows=300)[0]
    ours = tasks.partition_ids(block, ["key", "name"], {"key": "float64"}, 5)
    theirs = partitioning_index(block[["key", "name"]].astype({"key": "float64"}), 5)
    assert list(ours) == list(theirs)
    as_int = tasks.partition_ids(block.astype({"key": "float64"}), ["key"], {"key": "float64"}, 5)
    assert list(tasks.partition_ids(block, ["key"], {"key": "float64"}, 5)) == list(as_int)


@pytest.mark.parametrize("group_bytes", [1 << 40, 1])
def test_batch_and_output_put_every_row_of_a_partition_together(monkeypatch, group_bytes):
    monkeypatch.setattr(tasks, "GROUP_BYTES", group_bytes)
    blocks = frame(4, rows=200)
    sources = [tasks.split(blocks[:3], ["key"], {}, 5, False),
               tasks.split(blocks[3:], ["key"], {}, 5, False)]
    # outputs 1-3 go to one destination: one slice of each group, offsets inside it
    batches = [tasks.batch(groups, 1, 4) for groups in sources]
    for (frames, offsets), groups in zip(batches, sources, strict=True):
        assert len(frames) == len(groups[0]) and all(len(o) == 4 for o in offsets)
    for j in range(1, 4):
        got = tasks.output(batches, j - 1, False)
        want = pd.concat([o.iloc[s[j]:s[j + 1]] for groups in sources
                          for o, s in zip(*groups, strict=True)])
        pd.testing.assert_frame_equal(got, want)
        assert list(tasks.output(batches, j - 1, True).index) == list(range(len(want)))


def _held_bytes(column) -> int:
    """The bytes of the allocation that ``column``'s values live in."""
    values = column.to_numpy()
    while isinstance(values.base, np.ndarray):
        values = values.base
    return values.nbytes


@pytest.mark.parametrize("ignore_index", [False, True])
def test_an_output_made_of_one_piece_holds_its_own_rows_only(ignore_index):
    # one source: each output partition is one piece of its split, which holds every output's
    # rows; a slice of it would keep them all alive as long as that output partition lives
    groups = tasks.split(frame(4, rows=500), ["key"], {}, 8, ignore_index)
    whole = _held_bytes(groups[0][0]["x"])
    for j in range(8):
        out = tasks.output([tasks.batch(groups, 0, 8)], j, ignore_index)
        assert 0 < len(out) < 2_000
        assert _held_bytes(out["x"]) == out["x"].nbytes < whole


def test_numbers_in_object_columns_are_hashed_as_floats():
    keys = pd.DataFrame({"k": pd.Series([1, 2.0, True, "a", None, np.int64(7), np.nan],
                                        dtype=object)})
    floats = pd.DataFrame({"k": pd.Series([1.0, 2.0, 1.0, "a", None, 7.0, np.nan],
                                          dtype=object)})
    assert list(tasks.partition_ids(keys, ["k"], {}, 13)) == list(
        tasks.partition_ids(floats, ["k"], {}, 13))
    # each row alike whatever else its partition holds
    for i in range(len(keys)):
        assert list(tasks.partition_ids(keys.iloc[i:i + 1], ["k"], {}, 13)) == [
            tasks.partition_ids(floats, ["k"], {}, 13)[i]]


def test_a_batch_of_empty_slices_keeps_one_so_the_types_travel():
    block = frame(1, rows=0)[0]
    groups = tasks.split([block, block], ["key"], {}, 3, False)
    frames, offsets = tasks.batch(groups, 0, 3)
    assert len(frames) == 1 and len(frames[0]) == 0 and list(offsets[0]) == [0, 0, 0, 0]
    out = tasks.output([(frames, offsets)], 1, True)
    assert len(out) == 0 and list(out.dtypes) == list(block.dtypes)


def test_numbers_are_hashed_as_floats_as_dask_does():
    meta = pd.DataFrame({"i": pd.Series([], dtype="int32"), "f": pd.Series([], dtype="float64"),
                         "s": pd.Series([], dtype=object), "b": pd.Series([], dtype=bool),
                         "c": pd.Series([], dtype="category")})  # fmt: skip
    meta["c"] = meta["c"].cat.set_categories([1, 2, 3])
    assert hash_casts(meta, ["i", "f", "s", "b", "c"]) == {"i": "float64", "f": "float64",
                                                           "b": "float64", "c": "float64"}


# --------------------------------------------------------------------------- on a cluster


CASES = {
    "int key": dict(on="key"),
    "two keys": dict(on=["key", "name"]),
    "text key": dict(on="name"),
    "all keys the same": dict(on="key", keys=1),
    "empty partitions": dict(on="key", empty=(0, 3, 4)),
    "more outputs": dict(on="key", npartitions=11),
    "fewer outputs": dict(on="key", npartitions=2),
    "one output": dict(on="key", npartitions=1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_row_arrives_once_and_every_key_in_one_partition(client, case):
    options = dict(CASES[case])
    on = options.pop("on")
    npartitions = options.pop("npartitions", None)
    blocks = frame(**options)
    shuffled = shuffle(dask_frame(blocks), on, npartitions)
    parts = partitions_of(client, shuffled)
    assert len(parts) == shuffled.npartitions == (npartitions or len(blocks))
    assert_same_rows(parts, blocks)  # the index travelled with its row
    assert_each_key_in_one_partition(parts, on)
    assert shuffled.divisions == (None,) * (len(parts) + 1)
    pd.testing.assert_series_equal(shuffled._meta.dtypes, dask_frame(blocks)._meta.dtypes)
    if case == "all keys the same":
        assert sorted(len(p) for p in parts)[:-1] == [0] * (len(parts) - 1)


def _set_group_bytes(value: int) -> int:
    before, tasks.GROUP_BYTES = tasks.GROUP_BYTES, value
    return before


def test_partitions_split_and_concatenated_in_many_groups_give_every_row_once(client):
    before = client.run(_set_group_bytes, 1)  # every partition and output a group of its own
    try:
        blocks = frame(8, rows=300)
        parts = partitions_of(client, shuffle(dask_frame(blocks), "key", 5))
    finally:
        client.run(_set_group_bytes, next(iter(before.values())))
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "key")


def test_rows_land_where_dasks_task_shuffle_puts_them(client):
    source = dask_frame(frame())
    ours = partitions_of(client, shuffle(source, ["key", "name"], npartitions=5))
    theirs = partitions_of(client, source.shuffle(["key", "name"], npartitions=5,
                                                  shuffle_method="tasks"))  # fmt: skip
    for mine, dasks in zip(ours, theirs, strict=True):
        pd.testing.assert_frame_equal(sorted_rows(mine), sorted_rows(dasks), check_dtype=False)


def test_ignore_index_drops_the_index(client):
    blocks = frame()
    shuffled = shuffle(dask_frame(blocks), "key", ignore_index=True)
    parts = partitions_of(client, shuffled)
    for part in parts:
        assert list(part.index) == list(range(len(part)))
    whole = pd.concat(parts).sort_values("n")
    assert list(whole["n"]) == list(pd.concat(blocks).sort_values("n")["n"])


def test_stats_count_the_bytes_that_crossed_and_the_log_says_so(client, caplog):
    blocks = frame(8, rows=5_000)
    with caplog.at_level(logging.INFO, logger="dask_gpu_interop.all_to_all"):
        shuffled, stats = shuffle(dask_frame(blocks), "key", return_stats=True)
    workers = sorted(client.nthreads())
    assert stats.workers == tuple(workers) and stats.npartitions_in == 8
    assert stats.npartitions_out == 8 and stats.seconds > 0
    assert set(stats.crossed) <= {(a, b) for a in workers for b in workers if a != b}
    # keys spread evenly: about half of what each worker holds belongs on the other
    assert 0.2 * stats.output_bytes < stats.crossing_bytes < 0.8 * stats.output_bytes
    parts = partitions_of(client, shuffled)
    assert stats.output_bytes == pytest.approx(sum(sizeof(p) for p in parts), rel=0.05)
    assert str(stats) in caplog.text and "crossed between workers" in caplog.text


def test_nothing_but_the_output_is_left_in_memory(client):
    shuffled = shuffle(dask_frame(frame()), "key")

    def held(dask_scheduler):
        return sorted({ts.prefix.name for ts in dask_scheduler.tasks.values()
                       if ts.state == "memory"})  # fmt: skip

    # the client lets go of the sends' small results as the shuffle returns: the scheduler
    # frees them as that message reaches it
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in client.run_on_scheduler(held) if p.startswith("gpu-shuffle")]
        if left == ["gpu-shuffle-output"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == ["gpu-shuffle-output"]
    del shuffled


@pytest.mark.parametrize("exchange,steps", [
    ("direct", {"gpu-shuffle-send", "gpu-shuffle-output"}),
    ("batches", {"gpu-shuffle-split", "gpu-shuffle-batch", "gpu-shuffle-output"})])
def test_each_task_runs_on_the_worker_the_plan_gives_it(exchange, steps):
    # work stealing may move a loosely restricted task to an idle worker: off, the plan shows
    with dask.config.set({"distributed.scheduler.work-stealing": False,
                          EXCHANGE_KEY: exchange}), \
            LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip
        source = dask_frame(frame(6, rows=500)).persist()
        inputs = client.compute(source.to_delayed())  # the partitions the shuffle reads
        wait(inputs)
        held = client.who_has(inputs)
        with get_task_stream(client=client) as stream:
            shuffled, stats = shuffle(source, "key", 7, return_stats=True)
        ran = {task["key"]: task["worker"] for task in stream.data}
        plan = Plan(workers=stats.workers, owners=stats.workers[:1], npartitions=7)
        seen = set()
        holders = {worker for future in inputs for worker in held[future.key]}
        for key, worker in ran.items():
            step = key_split(key)
            seen.add(step)
            if step == "gpu-shuffle-output":
                assert worker == stats.workers[plan.destination(key[1])], key
            elif step == "gpu-shuffle-batch":
                assert worker == stats.workers[key[1]], key
            elif step in ("gpu-shuffle-split", "gpu-shuffle-send"):
                assert worker == stats.workers[key[1]] and worker in holders, key
        assert steps <= seen
        assert len(partitions_of(client, shuffled)) == 7


def test_a_persisted_input_is_used_and_left_as_it_was(client):
    blocks = frame(4)
    source = dask_frame(blocks).persist()
    parts = partitions_of(client, shuffle(source, "key", 3))
    assert_same_rows(parts, blocks)
    assert_same_rows(partitions_of(client, source), blocks)


def test_a_persisted_inputs_partitions_are_taken_from_its_graph_in_order(client, monkeypatch):
    from distributed import wait

    from dask_gpu_interop.all_to_all import driver

    blocks = frame(5)
    source = dask_frame(blocks).persist()
    wait(source)
    futures = driver._persisted_partitions(source)
    assert [len(f.result()) for f in futures] == [len(b) for b in blocks]
    for got, block in zip(client.gather(futures), blocks, strict=True):
        pd.testing.assert_frame_equal(got, block)
    assert driver._persisted_partitions(dask_frame(blocks)) is None  # not persisted

    assert driver._persisted_partitions(source[source["x"] > 0.5]) is None

    def no_compute(*args, **kwargs):
        raise AssertionError("the persisted input was computed again")

    monkeypatch.setattr(client, "compute", no_compute)
    shuffled = shuffle(source, "key", 3)
    monkeypatch.undo()
    assert_same_rows(partitions_of(client, shuffled), blocks)


def test_a_shuffled_frame_shuffled_again_is_taken_as_it_is_in_memory(client, monkeypatch):
    """The output is a persisted frame: shuffling it again (on another key, or merging it)
    takes its partitions as they are, and computes nothing again."""
    blocks = frame(4)
    once = shuffle(dask_frame(blocks), "key", 3)
    assert once.npartitions == 3 and once.divisions == (None,) * 4

    def no_compute(*args, **kwargs):
        raise AssertionError("the shuffled frame was computed again")

    monkeypatch.setattr(client, "compute", no_compute)
    twice = shuffle(once, "x", 5)
    monkeypatch.undo()
    parts = partitions_of(client, twice)
    assert len(parts) == 5
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "x")


def test_the_output_is_named_by_the_shuffles_token_without_tokenizing_its_meta(client,
                                                                             monkeypatch):
    """Tokenizing a cuDF meta costs a hash on the device and a copy to the host: the output
    frame takes the shuffle's own token instead."""
    from dask.tokenize import normalize_token

    from dask_gpu_interop.all_to_all import driver

    class Meta(pd.DataFrame):
        pass

    def refuse(meta):
        raise AssertionError("the meta was tokenized")

    monkeypatch.setitem(normalize_token._lookup, Meta, refuse)
    blocks = frame(3)
    futures = client.scatter(blocks)
    out = driver._persisted_frame(futures, Meta(blocks[0].iloc[:0]), "ab" * 16)
    assert out._name == "gpu-shuffle-" + "ab" * 16 and out.npartitions == 3
    assert_same_rows(partitions_of(client, out), blocks)
    assert driver._persisted_partitions(out) == futures  # shuffled again as it is


def test_workers_leaving_every_attempt_end_in_one_shuffle_error(client, monkeypatch):
    from dask_gpu_interop import ShuffleError
    from dask_gpu_interop.all_to_all import driver

    attempts = []

    def workers_left(futures, client=None, workers=(), timeout=None):
        attempts.append(sum(key_split(f.key) == "gpu-shuffle-output" for f in futures))
        raise driver._WorkersLeft("tcp://10.0.0.9:1234")

    monkeypatch.setattr(driver, "_wait", workers_left)
    with pytest.raises(ShuffleError, match=r"workers left the cluster during each of 3 "
                                           r"attempts .*tcp://10\.0\.0\.9:1234"):
        shuffle(dask_frame(frame(4)), "key", 3)
    assert attempts == [3] * driver.ATTEMPTS


def test_one_worker_moves_nothing_between_workers():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip
        blocks = frame(4)
        shuffled, stats = shuffle(dask_frame(blocks), "key", 3, return_stats=True)
        parts = partitions_of(client, shuffled)
        assert_same_rows(parts, blocks)
        assert_each_key_in_one_partition(parts, "key")
        assert stats.crossed == {} and stats.crossing_bytes == 0


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_shuffle_merge_equals_pandas_merge(client, how):
    rng = np.random.default_rng(3)
    left = pd.DataFrame({"id": rng.integers(0, 300, 4_000), "v": rng.random(4_000)})
    right = pd.DataFrame({"id": np.arange(0, 400, 2).astype("int32"),
                          "w": np.arange(200) * 1.5})
    joined = shuffle_merge(dd.from_pandas(left, npartitions=5),
                           dd.from_pandas(right, npartitions=2), on="id", how=how)
    assert joined.npartitions == 5
    got = joined.compute().sort_values(["id", "v"]).reset_index(drop=True)
    want = left.merge(right, on="id", how=how).sort_values(["id", "v"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_shuffle_merge_of_object_keys_meets_an_int_and_an_equal_float(client):
    with dask.config.set({"dataframe.convert-string": False}):
        left = dd.from_pandas(pd.DataFrame({"k": pd.Series([1, 2, 3, 4, 5], dtype=object),
                                            "a": range(5)}), npartitions=2)
        right = dd.from_pandas(pd.DataFrame({"k": pd.Series([1.0, 2.0, 3.0, 4.0, 5.0],
                                                            dtype=object),
                                             "b": range(5)}), npartitions=3)
        got = shuffle_merge(left, right, on="k", npartitions=7).compute()
        want = left.compute().merge(right.compute(), on="k")
    assert len(want) == 5
    assert sorted(zip(got["a"], got["b"], strict=True)) == sorted(
        zip(want["a"], want["b"], strict=True))


def test_shuffle_merge_with_keys_named_apart(client):
    left = pd.DataFrame({"a": [1, 2, 3, 4], "x": [1.0, 2.0, 3.0, 4.0]})
    right = pd.DataFrame({"b": [2.0, 4.0, 6.0], "y": ["two", "four", "six"]})
    got = shuffle_merge(dd.from_pandas(left, npartitions=2), dd.from_pandas(right, npartitions=2),
                        left_on="a", right_on="b", npartitions=3).compute()
    assert sorted(zip(got["a"], got["y"], strict=True)) == [(2, "two"), (4, "four")]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("call, error, words", [
    (lambda f: shuffle(f, "nope"), ValueError, "'nope' not a column of the frame"),
    (lambda f: shuffle(f, []), ValueError, "name at least one column"),
    (lambda f: shuffle(f, "key", npartitions=0), ValueError, "npartitions=0"),
    (lambda f: shuffle(f, "key", npartitions=2.5), ValueError, "positive whole number"),
    (lambda f: shuffle(f["key"], "key"), TypeError, "not a dask Series"),
    (lambda f: shuffle_merge(f, f, on="key", how="cross"), ValueError, "how='cross'"),
    (lambda f: shuffle_merge(f, f), ValueError, "give on="),
    (lambda f: shuffle_merge(f, f, on="key", left_on="key"), ValueError, "give on="),
    (lambda f: shuffle_merge(f, f, left_on="key", right_on="name"), ValueError,
     "would hash differently"),
    (lambda f: shuffle(f, "key", npartitions=100_000), ValueError, "at most 16384"),
    (lambda f: shuffle(f.compute(), "key"), TypeError,
     "not a pandas DataFrame: make one with dask.dataframe.from_pandas(frame, npartitions"),
    (lambda f: shuffle(f["key"].compute(), "key"), TypeError,
     "dask.dataframe.from_pandas(series.to_frame(), npartitions"),
    (lambda f: shuffle(None, "key"), TypeError, "takes a dask DataFrame, not NoneType"),
    (lambda f: shuffle(f, None), ValueError, "on=None: name the key column"),
    (lambda f: shuffle(f, f["key"]), TypeError, "not a Series: give the key column's name, "
                                                "such as on='key'"),
    (lambda f: shuffle(f.rename(columns={"x": "key"}), "key"), ValueError,
     "more than one column named 'key'"),
    (lambda f: shuffle_merge(f.compute(), f, on="key"), TypeError,
     "shuffle_merge (left) takes a dask DataFrame, not a pandas DataFrame"),
    (lambda f: shuffle_merge(f, f, on="key", suffixes=None), ValueError, "suffixes=None"),
    (lambda f: shuffle_merge(f, f, on="key", npartitions="4"), ValueError, "npartitions='4'"),
    (lambda f: shuffle(f, {"key", "name"}), TypeError, "not a set: such as on=['key', 'name']"),
])
def test_bad_arguments_are_refused_in_one_line_before_any_work(call, error, words):
    with pytest.raises(error) as refused:
        call(dask_frame(frame(2, rows=10)))  # checked before a client is even looked for
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_key_named_twice_is_hashed_once_per_place(client):
    blocks = frame(3, rows=200)
    parts = partitions_of(client, shuffle(dask_frame(blocks), ["key", "key"], 4))
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "key")


def test_a_numpy_int_is_a_whole_number_of_partitions(client):
    blocks = frame(3, rows=100)
    shuffled = shuffle(dask_frame(blocks), "key", np.int64(4))
    assert shuffled.npartitions == 4 and type(shuffled.npartitions) is int
    assert_same_rows(partitions_of(client, shuffled), blocks)


def test_a_client_argument_that_is_no_running_client_is_refused_in_one_line(client):
    source = dask_frame(frame(2, rows=10))
    closed = Client(client.scheduler.address)
    closed.close()
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        cases = [(cluster, TypeError, "not a LocalCluster: pass its client: Client(cluster)"),
                 (client.scheduler.address, TypeError,
                  f"not an address: Client({client.scheduler.address!r})"),
                 (closed, ValueError, "was given a closed Client")]
        with get_task_stream(client=client) as stream:
            for given, error, words in cases:
                for call in (shuffle, shuffle_merge):
                    keys = {"on": "key"} if call is shuffle_merge else {}
                    with pytest.raises(error) as refused:
                        call(source, *(["key"] if call is shuffle else [source]), **keys,
                             client=given)
                    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert stream.data == []


def test_a_frame_persisted_by_another_client_is_refused_in_one_line(client):
    with Client(client.scheduler.address, set_as_default=False) as other:
        source = other.persist(dask_frame(frame(3, rows=100)))
        with pytest.raises(ValueError, match="persisted by another client") as refused:
            shuffle(source, "key", client=client)  # its partitions still being made
        assert "\n" not in str(refused.value)
        wait(source)
        with pytest.raises(ValueError, match="persisted by another client"):
            shuffle(source, "key", client=client)  # in memory


def _shuffled_in_a_task(blocks) -> int:
    return shuffle(dask_frame(blocks), "key", 3).npartitions


@pytest.mark.slow
def test_a_shuffle_called_inside_a_task_leaves_its_thread_to_the_shuffles_tasks():
    # one thread per worker: the task's, which the shuffle's own tasks need on its worker
    blocks = frame(4, rows=100)
    with own_cluster(2) as client:
        assert client.submit(_shuffled_in_a_task, blocks).result(timeout=60) == 3


def test_a_bad_timeout_setting_is_refused_in_one_line_before_any_work(client):
    for value in ("banana", 0, "-3s", True):
        with dask.config.set({TIMEOUT_KEY: value}), pytest.raises(ValueError) as refused:
            shuffle(dask_frame(frame(2, rows=10)), "key")
        assert TIMEOUT_KEY in str(refused.value) and "\n" not in str(refused.value)
    for value, seconds in (("5 minutes", 300.0), ("30s", 30.0), (None, None), ("none", None)):
        with dask.config.set({TIMEOUT_KEY: value}):
            assert timeout_setting() == seconds


def test_no_client_is_refused_in_one_line(monkeypatch):
    import distributed

    def no_client():
        raise ValueError("No clients found")  # what distributed says where none runs

    monkeypatch.setattr(distributed, "get_client", no_client)
    with pytest.raises(ValueError, match="create a Client first") as refused:
        shuffle(dask_frame(frame(2, rows=10)), "key")
    assert "\n" not in str(refused.value)


def test_a_cluster_without_workers_is_refused_in_one_line():
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:  # fmt: skip
        with pytest.raises(ValueError, match="no worker is connected") as refused:
            shuffle(dask_frame(frame(2, rows=10)), "key", client=client)
    assert "\n" not in str(refused.value)


def test_the_inputs_own_error_comes_through(client):
    def broken():
        raise ZeroDivisionError("a partition that cannot be made")

    source = dd.from_delayed([dask.delayed(broken)()], meta=frame(1, rows=0)[0])
    with pytest.raises(ZeroDivisionError, match="cannot be made"):
        shuffle(source, "key")


@pytest.mark.parametrize("exchange,step", [("direct", "gpu-shuffle-send"),
                                           ("batches", "gpu-shuffle-split")])
def test_a_failing_task_is_one_shuffle_error_naming_it(client, exchange, step):
    def not_a_frame():
        return {"key": [1, 2, 3]}  # a partition that is no DataFrame: its split fails

    source = dd.from_delayed([dask.delayed(not_a_frame)()], meta=frame(1, rows=0)[0],
                             verify_meta=False)  # fmt: skip
    with pytest.raises(ShuffleError, match=f"{step} task failed") as failed, \
            dask.config.set({EXCHANGE_KEY: exchange}):  # fmt: skip
        shuffle(source, "key", npartitions=2)
    assert "TypeError" in str(failed.value) and "\n" not in str(failed.value)


# --------------------------------------------------------------------------- dask's own method


def test_shuffle_config_sets_the_task_shuffle_unless_a_method_is_set():
    with dask.config.set({"dataframe.shuffle.method": None}):
        assert dask_gpu_interop.shuffle_config() == {"dataframe.shuffle.method": "tasks"}
        assert dask_gpu_interop.shuffle_config("cpu") == {}
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        assert dask_gpu_interop.shuffle_config() == {}
    with pytest.raises(ValueError, match="device='tpu'"):
        dask_gpu_interop.shuffle_config("tpu")


def _lowered_names(collection) -> set[str]:
    return {type(e).__name__ for e in collection.optimize().expr.walk()}


def test_a_gpu_cluster_client_keeps_dasks_own_shuffles_off_p2p(client, monkeypatch):
    from dask_gpu_interop.cluster import session

    address = client.scheduler.address
    source = dd.from_pandas(pd.DataFrame({"key": range(40), "x": 1.0}), npartitions=4)
    other = dd.from_pandas(pd.DataFrame({"key": range(40), "y": 2.0}), npartitions=3)
    with dask.config.set({"dataframe.shuffle.method": None}):
        # dask's own default with a client: p2p (host memory), as the issue measured
        assert "P2PShuffle" in _lowered_names(source.shuffle("key"))
        monkeypatch.setattr(session, "workers_device", lambda client, device: "gpu")
        with dask_gpu_interop.cluster_client(address) as (_, device):
            assert device == "gpu"
            assert dask.config.get("dataframe.shuffle.method") == "tasks"
            assert "P2PShuffle" not in _lowered_names(source.shuffle("key"))
            assert "TaskShuffle" in _lowered_names(source.shuffle("key"))
            merged = _lowered_names(source.merge(other, on="key"))
            assert not any("P2P" in name for name in merged), merged
        assert dask.config.get("dataframe.shuffle.method") is None
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):  # the user's choice is kept
        with dask_gpu_interop.cluster_client(address):
            assert dask.config.get("dataframe.shuffle.method") == "p2p"


def test_a_cpu_cluster_client_leaves_dasks_choice_alone(client):
    with dask.config.set({"dataframe.shuffle.method": None}):
        with dask_gpu_interop.cluster_client(client.scheduler.address) as (_, device):
            assert device == "cpu"
            assert dask.config.get("dataframe.shuffle.method") is None

"""The all-to-all in steps (``gpu-interop.shuffle.step-bytes``): a worker's share split and
concatenated a part at a time, each a task of its own, so that what it holds at once stays
bounded; on pandas partitions and CPU worker processes."""

from __future__ import annotations

import gc
import time

import dask
import dask.dataframe as dd
import pytest
from dask.utils import key_split
from distributed import WorkerPlugin, get_task_stream

from dask_gpu_interop import shuffle
from dask_gpu_interop.all_to_all.graph import build_graph
from dask_gpu_interop.all_to_all.plan import (
    ONE_STEP_PART,
    STEP_KEY,
    STEP_MOST,
    Plan,
    auto_step,
    shares,
    step_setting,
    workers_memory,
)

from .helpers import (
    assert_each_key_in_one_partition,
    assert_same_rows,
    dask_frame,
    frame,
    own_cluster,
    partitions_of,
    tasks_by_step,
)

# --------------------------------------------------------------------------- the plan


def test_a_workers_inputs_go_in_runs_of_at_most_the_step_and_a_large_one_alone():
    plan = Plan(workers=("a", "b"), owners=("a", "b", "a", "a", "a", "a"), npartitions=4,
                sizes=(40, 10, 50, 100, 30, 30), step_bytes=90)
    assert plan.input_groups(0) == [[0, 2], [3], [4, 5]]
    assert plan.input_groups(1) == [[1]]
    assert Plan(workers=("a", "b"), owners=("a", "b", "a"), npartitions=4,
                sizes=(40, 10, 50)).input_groups(0) == [[0, 2]]  # no step: one group


def test_a_workers_outputs_go_in_runs_of_about_the_step():
    # 1200 bytes over 12 outputs: 100 each; a step of 250 takes two at a time
    plan = Plan(workers=("a", "b"), owners=("a",), npartitions=12, sizes=(1200,),
                step_bytes=250)
    assert plan.output_groups(0) == [(0, 2), (2, 4), (4, 6)]
    assert plan.output_groups(1) == [(6, 8), (8, 10), (10, 12)]
    small = Plan(workers=("a", "b"), owners=("a",), npartitions=12, sizes=(1200,),
                 step_bytes=10)  # less than one output: one at a time
    assert small.output_groups(1) == [(j, j + 1) for j in range(6, 12)]
    assert Plan(workers=("a", "b"), owners=("a",), npartitions=12,
                sizes=(1200,)).output_groups(1) == [(6, 12)]


def test_in_steps_the_graph_has_a_split_per_group_a_batch_per_pair_of_steps_copied():
    plan = Plan(workers=("a", "b"), owners=("a", "a", "b"), npartitions=4,
                sizes=(100, 100, 100), step_bytes=100)
    graph, keys = build_graph(plan, [f"in-{i}" for i in range(3)], "0f" * 16, ["key"], {},
                              False)  # fmt: skip
    found, _ = tasks_by_step(graph)
    assert sorted(k[1:] for k in found["gpu-shuffle-split"]) == [(0, 0), (0, 1), (1, 0)]
    # outputs: 75 bytes each, a step of 100 takes one: two runs on each destination
    assert len(found["gpu-shuffle-batch"]) == 3 * 4  # every split group to every run
    tasks_of = graph.to_dict()
    for key in found["gpu-shuffle-batch"]:
        assert tasks_of[key][-1] is True  # a copy: the split is freed once its batches exist
    assert len(keys) == 4 and [k[1] for k in keys] == [0, 1, 2, 3]
    # output 3, the second run of destination b: from that run's batch of every split group
    last = tasks_of[keys[3]]
    assert sorted(k[1:] for k in last[1]) == [(0, 0, 1, 1), (0, 1, 1, 1), (1, 0, 1, 1)]
    assert last[2] == 0  # the first (only) partition of its run


def test_shares_are_what_a_worker_holds_or_gets_whichever_is_more():
    plan = Plan(workers=("a", "b"), owners=("a", "a", "a", "b"), npartitions=4,
                sizes=(100, 100, 100, 100))
    assert shares(plan) == {"a": 300, "b": 200}


# --------------------------------------------------------------------------- the setting


@pytest.mark.parametrize("value, size", [("auto", None), (None, None), (" Auto ", None),
                                         ("1 MiB", 2**20), (4096, 4096)])
def test_the_step_setting_reads_auto_or_a_size(value, size):
    with dask.config.set({STEP_KEY: value}):
        assert step_setting() == size


@pytest.mark.parametrize("value", ["lots", 0, -5, True, "0 B"])
def test_a_bad_step_setting_is_refused_in_one_line_before_any_work(client, value):
    source = dask_frame(frame(2, rows=50))
    with dask.config.set({STEP_KEY: value}), get_task_stream(client=client) as stream, \
            pytest.raises(ValueError) as info:  # fmt: skip
        shuffle(source, "key")
    assert str(info.value).count("\n") == 0
    assert STEP_KEY in str(info.value) and "auto" in str(info.value)
    assert stream.data == []  # not even the input computed


def test_auto_takes_one_step_while_the_share_is_small_beside_the_workers_memory():
    gib = 2**30
    assert auto_step({"a": 8 * gib, "b": 8 * gib}, {"a": 80 * gib, "b": 80 * gib}) is None
    # a share beyond an eighth of a worker's memory: steps of a sixteenth, at most 2 GiB
    assert STEP_MOST == 2 * gib
    assert auto_step({"a": 11 * gib, "b": 4 * gib},
                     {"a": 80 * gib, "b": 80 * gib}) == STEP_MOST
    assert auto_step({"a": 10 * gib}, {"a": 16 * gib}) == gib
    assert auto_step({"a": 10 * gib}, {"a": None}) is None  # memory not known: one step


class _Info:
    """A client whose scheduler knows ``workers`` and whose workers' devices have ``devices``
    bytes in all (an exception for a worker without one); ``asked``: who was asked."""

    def __init__(self, workers, devices=None):
        self.workers, self.devices, self.asked = workers, devices or {}, []

    @property
    def scheduler(self):
        return self  # the scheduler's calls are this object's

    def sync(self, function, *args, **kwargs):
        return function(*args, **kwargs)

    def identity(self):
        self.infos = getattr(self, "infos", 0) + 1
        return {"workers": self.workers}

    def run(self, function, workers, on_error="raise"):
        assert on_error == "return"
        self.asked += workers
        return {w: (0, self.devices[w]) if w in self.devices else RuntimeError("no GPU")
                for w in workers}  # (free, total), as device.memory_info answers


@pytest.fixture(autouse=True)
def _no_device_memory_known(monkeypatch):
    """Each test starts with no worker's device memory remembered."""
    from dask_gpu_interop.all_to_all import plan

    monkeypatch.setattr(plan, "_DEVICE_MEMORY", {})


def test_a_workers_memory_is_its_gpus_for_cudf_and_its_limit_for_pandas():
    fake = _Info({"a": {"memory_limit": 64, "gpu": {"memory-total": 80, "name": "GPU"}},
                  "b": {"memory_limit": 0}})
    assert workers_memory(fake, ("a", "b"), gpu=True) == {"a": 80, "b": None}
    assert workers_memory(fake, ("a", "b", "gone"), gpu=False) == {"a": 64, "b": None,
                                                                  "gone": None}
    assert fake.asked == ["b"]  # only for the GPU, only where the scheduler has no figure


def test_a_gpu_the_scheduler_knows_nothing_of_is_asked_on_its_worker():
    """distributed's scheduler has GPU figures only where its NVML diagnostics run: the
    workers it has none for are asked for their device's memory."""
    fake = _Info({"a": {"memory_limit": 64}, "b": {"memory_limit": 64}, "c": {}},
                 devices={"a": 80, "b": 96})
    assert workers_memory(fake, ("a", "b", "c"), gpu=True) == {"a": 80, "b": 96, "c": None}
    assert sorted(fake.asked) == ["a", "b", "c"]


def test_a_gpu_workers_memory_is_asked_once():
    """A worker keeps its device: what it or the scheduler said is remembered by its address;
    only the workers not known (or that had no answer) are asked at the next shuffle, and
    once all are known, nothing is asked."""
    fake = _Info({"a": {}, "b": {}, "c": {"gpu": {"memory-total": 64}}}, devices={"a": 80})
    assert workers_memory(fake, ("a", "b", "c"), gpu=True) == {"a": 80, "b": None, "c": 64}
    fake.devices["b"] = 96
    assert workers_memory(fake, ("a", "b", "c"), gpu=True) == {"a": 80, "b": 96, "c": 64}
    assert fake.asked == ["a", "b", "b"] and fake.infos == 2
    # every worker known: neither the scheduler nor a worker is asked again
    assert workers_memory(fake, ("a", "b", "c"), gpu=True) == {"a": 80, "b": 96, "c": 64}
    assert fake.asked == ["a", "b", "b"] and fake.infos == 2


# --------------------------------------------------------------------------- on a cluster


def test_in_steps_every_row_arrives_once_and_every_key_in_one_partition(client):
    blocks = frame(8, rows=400)
    with dask.config.set({STEP_KEY: "40 kB"}), get_task_stream(client=client) as stream:
        parts = partitions_of(client, shuffle(dask_frame(blocks), "key", 10))
    assert len(parts) == 10
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "key")
    ran = [key_split(task["key"]) for task in stream.data]
    # several splits per worker, where one step makes one each
    assert ran.count("gpu-shuffle-split") > 2 and ran.count("gpu-shuffle-output") == 10
    with dask.config.set({STEP_KEY: "auto"}):
        one = partitions_of(client, shuffle(dask_frame(blocks), "key", 10))
    for a, b in zip(parts, one, strict=True):  # the same rows in each output partition
        assert sorted(a["n"]) == sorted(b["n"])


def _block(i: int, rows: int = 100_000):
    """Partition ``i`` of a frame (about 3.6 MB), made where it is called."""
    block = frame(1, rows=rows, seed=i)[0]
    block["n"] += i * rows
    return block.set_axis(block.index + i * rows * 3)


class _TracedMemory(WorkerPlugin):
    """Python's own count of the bytes a worker process allocated (NumPy's arrays included)."""

    name = "traced-memory"

    def setup(self, worker):
        import tracemalloc

        tracemalloc.start()


def _start_peak(dask_worker):
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.reset_peak()
    return tracemalloc.get_traced_memory()[0]


def _peak(dask_worker):
    import tracemalloc

    return tracemalloc.get_traced_memory()[1]


def _most_above_start(client, setting: str) -> int:
    """The most bytes a worker allocated at once beyond what it held before, during a shuffle
    of 8 partitions made on the workers, with ``setting``."""
    gc.collect()
    for _ in range(200):  # until the last shuffle's tasks are released
        if not client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
            break
        time.sleep(0.05)
    start = client.run(_start_peak)
    made = dd.from_delayed([dask.delayed(_block)(i) for i in range(8)], meta=_block(0).iloc[:0],
                           verify_meta=False)  # fmt: skip
    with dask.config.set({STEP_KEY: setting}):
        shuffled = shuffle(made, "key")
    peaks = client.run(_peak)
    parts = partitions_of(client, shuffled)
    assert_same_rows(parts, [_block(i) for i in range(8)])
    return max(peaks[w] - start[w] for w in peaks)


#: Worker memory settings under which a small memory limit ends no worker: the limit is then
#: only what the shuffle's steps are measured against.
NO_MEMORY_MANAGER = {f"distributed.worker.memory.{name}": False
                     for name in ("target", "spill", "pause", "terminate")}


@pytest.mark.slow
def test_a_share_beyond_an_eighth_of_the_workers_memory_takes_steps_at_every_size():
    # 32 MiB workers, a share of about 7 MB each: more than an eighth of their memory, however
    # small it is beside anything else
    blocks = [_block(i) for i in range(4)]
    share = sum(dask.sizeof.sizeof(b) for b in blocks) / 2
    assert ONE_STEP_PART * 32 * 2**20 < share < 32 * 2**20
    with dask.config.set(NO_MEMORY_MANAGER), own_cluster(2, memory_limit="32MiB") as client:
        source = dd.from_delayed([dask.delayed(_block)(i) for i in range(4)],
                                 meta=blocks[0].iloc[:0], verify_meta=False).persist()
        with get_task_stream(client=client) as stream:
            parts = partitions_of(client, shuffle(source, "key"))
    ran = [key_split(task["key"]) for task in stream.data]
    assert "gpu-shuffle-send" not in ran  # the direct exchange holds a share in one step
    assert ran.count("gpu-shuffle-split") > 2 and "gpu-shuffle-batch" in ran
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "key")


def test_in_steps_a_worker_allocates_less_at_once_than_in_one_step():
    with own_cluster(2) as client:
        client.register_plugin(_TracedMemory())
        one_step = _most_above_start(client, "auto")
        in_steps = _most_above_start(client, "1 MB")
    share = 4 * dask.sizeof.sizeof(_block(0))
    # one step holds a worker's inputs, their ordered copy (alive in its batches until every
    # destination has made its outputs), what arrives and the outputs: about 3 shares; in
    # steps each input group and its split are freed once its batches are copied out
    assert one_step > 2.2 * share
    assert in_steps < 0.7 * one_step

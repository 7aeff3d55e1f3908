"""Per-task device memory and out-of-memory explanations, on CPUs: RMM's counter stack is
stood in for by a model of it, and the worker is a real distributed worker."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import GPUMemoryPlugin, GPUOutOfMemoryError, memory_report
from dask_gpu_interop.memory import oom, state
from dask_gpu_interop.memory.report import MemoryReport
from dask_gpu_interop.memory.tasks import TaskMemory
from dask_gpu_interop.memory.timeline import prefix_peaks

GiB = 1 << 30


class CounterStack:
    """RMM's statistics adaptor's counters: allocations move the top frame; a popped frame's
    rise is added to the one below (peak = max(peak, value + popped peak))."""

    def __init__(self):
        self.frames = [[0, 0]]
        self.lock = threading.Lock()

    def alloc(self, n):
        with self.lock:
            top = self.frames[-1]
            top[0] += n
            top[1] = max(top[1], top[0])

    def free(self, n):
        self.alloc(-n)

    def push(self):
        with self.lock:
            self.frames.append([0, 0])

    def pop(self):
        with self.lock:
            value, peak = self.frames.pop()
            below = self.frames[-1]
            below[1] = max(below[1], below[0] + peak)
            below[0] += value
            return value, peak


def test_a_task_alone_gets_its_own_peak_and_what_it_left():
    counters = CounterStack()
    counters.alloc(5 * GiB)  # allocated before: not the task's
    tasks = TaskMemory(counters)
    tasks.transition(("read-csv-0123456789abcdef0123456789abcdef", 0), "ready", "executing")
    counters.alloc(3 * GiB)
    counters.alloc(1 * GiB)
    counters.free(3 * GiB)
    record = tasks.transition(("read-csv-0123456789abcdef0123456789abcdef", 0), "executing", "memory")
    assert (record.prefix, record.peak_bytes, record.left_bytes) == ("read-csv", 4 * GiB, 1 * GiB)
    assert not record.overlapped
    assert counters.frames == [[6 * GiB, 9 * GiB]], "the adaptor's own counters must be whole"


def test_a_task_that_frees_older_buffers_leaves_a_negative_balance():
    counters = CounterStack()
    counters.alloc(2 * GiB)
    tasks = TaskMemory(counters)
    tasks.started("del-x")
    counters.free(2 * GiB)
    record = tasks.finished("del-x")
    assert (record.peak_bytes, record.left_bytes) == (0, -2 * GiB)


def test_tasks_side_by_side_are_marked_and_include_each_other():
    counters = CounterStack()
    tasks = TaskMemory(counters)
    tasks.started("a-1")
    counters.alloc(1 * GiB)  # a
    tasks.started("b-1")
    counters.alloc(2 * GiB)  # b
    counters.free(2 * GiB)
    b = tasks.finished("b-1")
    counters.alloc(1 * GiB)  # a again
    a = tasks.finished("a-1")
    assert a.overlapped and b.overlapped
    assert b.peak_bytes == 2 * GiB  # its own rise
    assert a.peak_bytes == 3 * GiB  # includes b's 2 GiB: the report says they overlap
    assert a.left_bytes == 2 * GiB
    tasks.started("c-1")
    counters.alloc(1 * GiB)
    c = tasks.finished("c-1")
    assert not c.overlapped and c.peak_bytes == 1 * GiB
    assert len(counters.frames) == 1


def test_long_running_is_still_running_and_prefixes_aggregate():
    counters = CounterStack()
    tasks = TaskMemory(counters)
    for i, size in enumerate((1, 3, 2)):
        key = f"train-{i}"
        tasks.transition(key, "ready", "executing")
        assert tasks.transition(key, "executing", "long-running") is None
        counters.alloc(size * GiB)
        counters.free(size * GiB)
        tasks.transition(key, "long-running", "error" if i == 2 else "memory")
    stats = tasks.prefixes["train"]
    assert (stats.count, stats.errors, stats.peak_bytes_max, stats.largest_key) == (
        3, 1, 3 * GiB, "train-1")
    assert stats.peak_bytes_total == 6 * GiB
    assert tasks.largest(1) == [("train", 3 * GiB)]
    tasks.started("noop-1")
    tasks.finished("noop-1")
    assert tasks.largest(5) == [("train", 3 * GiB)]  # nothing allocated: not a suspect


def test_a_task_started_before_setup_is_ignored_and_close_pops_the_frame():
    counters = CounterStack()
    tasks = TaskMemory(counters)
    assert tasks.finished("unknown-1") is None
    tasks.started("x-1")
    counters.alloc(GiB)
    assert tasks.running() == {"x-1": GiB}
    tasks.close()
    assert counters.frames == [[GiB, GiB]]
    assert tasks.snapshot() == {"prefixes": {}, "running": {}}


@pytest.mark.parametrize("error, device", [
    (MemoryError("std::bad_alloc: out_of_memory: RMM failure at: pool_memory_resource.hpp"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (type("OutOfMemoryError", (MemoryError,), {})("Out of memory allocating 1,024 bytes"), True),
    (Exception("[CUDA_ERROR_OUT_OF_MEMORY] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"), True),
    (Exception("XGBoostError: cudaErrorMemoryAllocation: out of memory"), True),
    (Exception("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes"), True),
    (MemoryError("Unable to allocate 8.00 GiB for an array with shape (1073741824,)"), False),
    (MemoryError(), False),
    (ValueError("out of range"), False),
    (GPUOutOfMemoryError("GPU out of memory in task 'x'"), False),
])
def test_device_out_of_memory_is_told_from_host_and_other_errors(error, device):
    assert oom.is_device_oom(error) is device


def test_a_bare_memory_error_is_the_devices_after_rmm_refused_an_allocation():
    assert oom.is_device_oom(MemoryError(), recent_failure=True)
    assert not oom.is_device_oom(ValueError("x"), recent_failure=True)


def test_failure_log_keeps_the_refused_request_and_what_was_in_use():
    log = oom.FailureLog(in_use=lambda: 7 * GiB)
    assert log(2 * GiB) is False  # no retry
    assert log.since(0.0) == (2 * GiB, 7 * GiB)
    assert log.since(float("inf")) is None


def test_the_message_names_pool_use_largest_tasks_and_the_option():
    message = oom.explain(
        MemoryError("std::bad_alloc: out_of_memory: RMM failure"),
        key="features-3", worker="tcp://10.0.0.1:4000", mode="pool", pool_bytes=8 * GiB,
        maximum_bytes=10 * GiB, in_use_bytes=7 * GiB, device_total=80 * GiB,
        asked_bytes=2 * GiB, largest=[("features", 5 * GiB), ("read-csv", 2 * GiB)],
        overlapped=True,
    )
    for part in ("'features-3'", "tcp://10.0.0.1:4000", "a request for 2.00 GiB",
                 "RMM pool of 8.00 GiB (maximum 10.00 GiB)", "7.00 GiB in use",
                 "features 5.00 GiB, read-csv 2.00 GiB", "peaks overlap", "maximum_pool_size",
                 "managed=True", "MemoryError: std::bad_alloc"):
        assert part in message, (part, message)
    assert "\n" not in message


@pytest.mark.parametrize("mode, maximum, advice", [
    ("pool", None, "managed=True"),
    ("managed", None, "smaller partitions"),
    ("async", 4 * GiB, "raise maximum_pool_size"),
])
def test_the_advice_fits_the_mode(mode, maximum, advice):
    message = oom.explain(
        MemoryError("out_of_memory"), key="k", worker="w", mode=mode, pool_bytes=None,
        maximum_bytes=maximum, in_use_bytes=None, device_total=None, asked_bytes=None,
        largest=[], overlapped=False,
    )
    assert advice in message


def _advice(**numbers) -> str:
    """The message for a device of 80 GiB and a pool without a maximum, with ``numbers``."""
    given = dict(key="k", worker="w", mode="pool", pool_bytes=None, maximum_bytes=None,
                 in_use_bytes=None, device_total=80 * GiB, asked_bytes=None, largest=[],
                 overlapped=False)
    return oom.explain(MemoryError("out_of_memory"), **{**given, **numbers})


def test_a_task_larger_than_the_device_is_told_to_split_the_work():
    text = _advice(in_use_bytes=60 * GiB, asked_bytes=30 * GiB, task_bytes=60 * GiB)
    assert ("This task alone needs more than the 80.00 GiB the device has (at least 90.00 GiB):"
            " split the work into smaller partitions.") in text
    assert "managed=True" not in text and "maximum_pool_size" not in text
    # beside other tasks its own share is not known: the refused request alone decides
    beside = _advice(in_use_bytes=60 * GiB, asked_bytes=30 * GiB, task_bytes=60 * GiB,
                     overlapped=True)
    assert "This task alone" not in beside
    assert "at least 90.00 GiB" in _advice(asked_bytes=90 * GiB, task_bytes=GiB, overlapped=True)
    # a pool capped below the device: its maximum is the limit, and raising it helps too
    capped = _advice(maximum_bytes=16 * GiB, in_use_bytes=14 * GiB, asked_bytes=4 * GiB,
                     task_bytes=14 * GiB)
    assert ("more than the 16.00 GiB its pool may grow to (at least 18.00 GiB): split the work "
            "into smaller partitions, or raise maximum_pool_size (--gpu-maximum-pool-size).") in (
        capped)


def test_memory_held_by_the_workers_results_is_told_to_be_released_or_streamed():
    text = _advice(in_use_bytes=70 * GiB, asked_bytes=2 * GiB, task_bytes=5 * GiB)
    assert ("Most of it is not this task's: 65.00 GiB held by results this worker keeps, this "
            "task 5.00 GiB.") in text
    for part in ("Release the results you no longer need", "write them out as they are made "
                 "instead of persisting them", "spill=True, --gpu-spill", "more GPUs"):
        assert part in text, (part, text)
    assert "managed=True" not in text
    stored = _advice(in_use_bytes=70 * GiB, asked_bytes=2 * GiB, stored_bytes=55 * GiB)
    assert "55.00 GiB held by results this worker keeps." in stored  # the store says
    beside = _advice(in_use_bytes=70 * GiB, asked_bytes=2 * GiB, task_bytes=20 * GiB,
                     overlapped=True)
    assert "50.00 GiB held by results this worker keeps and the tasks beside it" in beside
    assert oom.cause(mode="pool", maximum_bytes=None, device_total=80 * GiB,
                     in_use_bytes=70 * GiB, asked_bytes=GiB, task_bytes=35 * GiB,
                     stored_bytes=None, overlapped=False) == oom.HELD  # half: held
    assert oom.cause(mode="pool", maximum_bytes=None, device_total=80 * GiB,
                     in_use_bytes=70 * GiB, asked_bytes=GiB, task_bytes=36 * GiB,
                     stored_bytes=None, overlapped=False) == oom.PRESSURE


def test_with_cudfs_spilling_on_held_results_are_not_told_to_spill_again():
    text = _advice(in_use_bytes=70 * GiB, asked_bytes=2 * GiB, task_bytes=5 * GiB,
                   spilling=True)
    assert "cuDF's spilling is on and could not move them" in text
    assert "spill=True" not in text
    for part in ("Release the results you no longer need", "more GPUs"):
        assert part in text, (part, text)


def test_a_task_that_fits_the_device_but_not_beside_the_rest_may_oversubscribe():
    text = _advice(in_use_bytes=70 * GiB, asked_bytes=12 * GiB, task_bytes=60 * GiB)
    assert ("Use managed=True (--gpu-managed) to oversubscribe the device (slower), or split "
            "the work into smaller partitions.") in text
    beside = _advice(in_use_bytes=70 * GiB, asked_bytes=12 * GiB, task_bytes=60 * GiB,
                     overlapped=True)
    assert "run fewer tasks at once per GPU" in beside
    unknown = _advice(asked_bytes=GiB)  # nothing else known: the mode's advice
    assert "managed=True" in unknown and "This task alone" not in unknown
    managed = _advice(mode="managed", in_use_bytes=70 * GiB, asked_bytes=90 * GiB,
                      task_bytes=GiB)
    assert "Managed memory already oversubscribes the device" in managed


def test_the_results_a_worker_keeps_on_the_device_are_read_from_its_store():
    import numpy as np

    from dask_gpu_interop import compat

    store = SimpleNamespace(device={"a": np.zeros(1000, "u1"), "b": np.zeros(24, "u1")})
    assert compat.device_data_bytes(SimpleNamespace(data=store)) == 1024
    assert compat.device_data_bytes(SimpleNamespace(data={"a": np.zeros(8)})) is None


# ------------------------------------------------------------- on a real distributed worker

WORKER = {}  # the fake worker's counters and state, for the tasks below (run in-process)


def uses(n):
    WORKER["counters"].alloc(n)
    WORKER["counters"].free(n)
    return n


def runs_out_of_device_memory():
    WORKER["counters"].alloc(5 * GiB)
    WORKER["fake"].stack.failures(4 * GiB)  # RMM's failure callback, as the pool refuses
    WORKER["counters"].free(5 * GiB)
    raise MemoryError("std::bad_alloc: out_of_memory: RMM failure at: pool")


def keeps(n):
    WORKER["counters"].alloc(n)  # a result held on the device
    return n


def runs_out_beside_held_results():
    WORKER["counters"].alloc(GiB)
    WORKER["fake"].stack.failures(2 * GiB)
    WORKER["counters"].free(GiB)
    raise MemoryError("std::bad_alloc: out_of_memory: RMM failure at: pool")


def runs_out_of_host_memory():
    raise MemoryError("Unable to allocate 8.00 GiB for an array")


def has_a_bug():
    raise ValueError("a plain bug")


@pytest.fixture
def fake_gpu_worker(monkeypatch):
    """A worker whose memory state is the plugin's, with RMM's counters modelled."""
    plugin = GPUMemoryPlugin(pool_size="8GB", maximum_pool_size="10GB")
    counters = CounterStack()
    failures = oom.FailureLog()
    fake = SimpleNamespace(
        owner=plugin.name, mode="pool", tasks=TaskMemory(counters),
        plan=SimpleNamespace(initial=8 * GiB, maximum=10 * GiB, failure_callback=True),
        device=SimpleNamespace(total=80 * GiB),
        stack=SimpleNamespace(
            pool=SimpleNamespace(pool_size=lambda: 8 * GiB),
            live_bytes=lambda: counters.frames[0][0], failures=failures),
    )
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(plugin)
        monkeypatch.setattr(state, "_active", fake)
        WORKER.update(counters=counters, fake=fake)
        yield client, counters, fake
        state._active = None  # before the workers' teardown looks at it


def test_each_task_is_recorded_through_the_worker_transitions(fake_gpu_worker):
    client, counters, fake = fake_gpu_worker
    client.gather([client.submit(uses, n * GiB, key=f"load-{n}") for n in (1, 2)])
    client.submit(uses, 3 * GiB, key="fit-0").result()
    stats = fake.tasks.prefixes
    assert (stats["load"].count, stats["load"].peak_bytes_max) == (2, 2 * GiB)
    assert (stats["fit"].count, stats["fit"].peak_bytes_max) == (1, 3 * GiB)
    assert not stats["load"].overlapped


def test_a_device_out_of_memory_reaches_the_client_explained(fake_gpu_worker):
    client, _, _ = fake_gpu_worker
    client.submit(uses, 2 * GiB, key="load-0").result()
    with pytest.raises(GPUOutOfMemoryError) as info:
        client.submit(runs_out_of_device_memory, key="features-0").result()
    text = str(info.value)
    for part in ("'features-0'", "a request for 4.00 GiB", "RMM pool of 8.00 GiB",
                 "largest tasks by peak here: features 5.00 GiB, load 2.00 GiB",
                 "maximum_pool_size", "out_of_memory"):
        assert part in text, (part, text)
    assert isinstance(info.value, MemoryError)


@pytest.mark.parametrize("spilling", [False, True])
def test_results_held_on_the_worker_are_named_in_the_clients_error(fake_gpu_worker, spilling):
    """The advice follows cuDF's spilling as the worker's plan has it (the plugin's spill=, or
    cuDF's own setting where the plugin leaves it)."""
    client, counters, fake = fake_gpu_worker
    fake.plan.failure_callback = not spilling
    held = client.submit(keeps, 6 * GiB, key="persisted-0")
    held.result()
    with pytest.raises(GPUOutOfMemoryError) as info:
        client.submit(runs_out_beside_held_results, key="features-1").result()
    text = str(info.value)
    assert "6.00 GiB in use" in text
    assert ("Most of it is not this task's: 5.00 GiB held by results this worker keeps, this "
            "task 1.00 GiB.") in text, text
    assert ("cuDF's spilling is on and could not move them" in text) is spilling, text
    assert ("let the worker spill them to host memory" in text) is not spilling, text
    counters.free(6 * GiB)


def test_other_errors_reach_the_client_unchanged(fake_gpu_worker):
    client, _, _ = fake_gpu_worker
    with pytest.raises(MemoryError, match="Unable to allocate") as info:
        client.submit(runs_out_of_host_memory, key="host-0").result()
    assert not isinstance(info.value, GPUOutOfMemoryError)
    with pytest.raises(ValueError, match="a plain bug"):
        client.submit(has_a_bug, key="bad-0").result()


def test_the_report_lists_prefixes_by_peak_and_says_when_they_overlap():
    snapshot = {
        "status": "active", "mode": "pool", "device": {"name": "GPU", "total": 80 * GiB},
        "pool_size": 8 * GiB, "frameworks": {},
        "tasks": {
            "prefixes": {
                "load": {"count": 4, "overlapped": 2, "errors": 0, "peak_bytes_max": 2 * GiB,
                         "peak_bytes_total": 6 * GiB, "left_bytes_total": GiB,
                         "largest_key": "load-1"},
                "fit": {"count": 1, "overlapped": 0, "errors": 1, "peak_bytes_max": 5 * GiB,
                        "peak_bytes_total": 5 * GiB, "left_bytes_total": -GiB,
                        "largest_key": "fit-0"},
            },
            "running": {"fit-1": GiB},
        },
    }
    report = MemoryReport({"tcp://w:1": snapshot})
    text = str(report)
    assert text.index("fit ") < text.index("load ")  # highest peak first
    assert "peak 5.00 GiB (mean 5.00 GiB)  left -1.00 GiB  1 failed" in text
    assert "peak 2.00 GiB (mean 1.50 GiB)" in text
    assert "2 of 5 tasks ran beside others" in text
    assert "running now (peak so far): fit-1 1.00 GiB" in text
    frame = report.tasks_frame()
    assert list(frame["prefix"]) == ["fit", "load"]
    assert frame.loc[1, "peak_bytes_mean"] == 1.5 * GiB
    assert prefix_peaks({"tcp://w:1": snapshot["tasks"]}) == [
        ("fit", 5 * GiB, 1, 0), ("load", 2 * GiB, 4, 2)]


def _store_worker(device_keys, on_device, disk, sizes):
    """A worker whose data store keeps device results as dask-cuda's does."""
    store = SimpleNamespace(device_keys=set(device_keys), device=dict.fromkeys(on_device),
                            disk=dict.fromkeys(disk))  # fmt: skip
    tasks = {key: SimpleNamespace(nbytes=size) for key, size in sizes.items()}
    return SimpleNamespace(data=store, state=SimpleNamespace(tasks=tasks))


def test_results_the_store_moved_off_the_gpu_are_counted_with_their_sizes(monkeypatch):
    from dask_gpu_interop.memory.report import spilled

    monkeypatch.delitem(sys.modules, "cudf", raising=False)
    worker = _store_worker(["a", "b", "c", "d"], ["a"], ["d"],
                           {"a": GiB, "b": 2 * GiB, "c": 3 * GiB, "d": 4 * GiB})
    assert spilled(worker) == {"results": {"host_keys": 2, "host_bytes": 5 * GiB,
                                           "disk_keys": 1, "disk_bytes": 4 * GiB}}
    assert spilled(SimpleNamespace(data={"a": 1})) == {}  # distributed's own store: nothing


def test_buffers_cudfs_spilling_moved_are_counted_only_where_it_is_on(monkeypatch):
    from dask_gpu_interop.memory.report import spilled

    buffers = [SimpleNamespace(is_spilled=True, size=GiB), SimpleNamespace(is_spilled=False,
               size=5 * GiB), SimpleNamespace(is_spilled=True, size=2 * GiB)]  # fmt: skip
    manager = SimpleNamespace(buffers=lambda: buffers)
    options = {"spill": True}
    monkeypatch.setitem(sys.modules, "cudf", SimpleNamespace(get_option=options.get))
    monkeypatch.setitem(sys.modules, "cudf.core.buffer.spill_manager",
                        SimpleNamespace(get_global_manager=lambda: manager))  # fmt: skip
    assert spilled(None) == {"cudf": {"host_buffers": 2, "host_bytes": 3 * GiB}}
    options["spill"] = False
    assert spilled(None) == {}


def test_the_report_says_what_is_off_the_gpu():
    snapshot = {
        "status": "active", "mode": "pool", "device": {"name": "GPU", "total": 80 * GiB},
        "pool_size": 8 * GiB, "frameworks": {},
        "spilled": {"cudf": {"host_buffers": 3, "host_bytes": 6 * GiB},
                    "results": {"host_keys": 2, "host_bytes": GiB, "disk_keys": 0,
                                "disk_bytes": 0}},
    }
    report = MemoryReport({"tcp://w:1": snapshot})
    assert "off the GPU: cuDF's spilling 6.00 GiB in 3 buffers; results 1.00 GiB (2 keys)" \
        in str(report)  # fmt: skip
    row = report.to_frame().loc["tcp://w:1"]
    assert (row["spilled_cudf_bytes"], row["spilled_results_bytes"]) == (6 * GiB, GiB)
    del snapshot["spilled"]
    assert "off the GPU" not in str(MemoryReport({"tcp://w:1": snapshot}))


def test_a_worker_without_the_plugin_reports_no_tasks(fake_gpu_worker):
    client, _, _ = fake_gpu_worker
    state._active = None
    report = memory_report(client)
    assert report.tasks_frame().empty

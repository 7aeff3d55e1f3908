"""The all-to-all (dask_gpu_interop.shuffle) on cuDF partitions and GPU workers: every row
once, every key in one partition, libcudf's split and concatenation against cuDF's own
(indexes, an int key meeting an equal float key), partitions that stay cuDF frames, the per-task memory report of each step; with two GPUs,
over TCP and UCX, what crossed between the workers (with either exchange), a join, and a
worker killed in the middle.
Skipped without a GPU (two for the multi_gpu tests)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pandas as pd
import pytest

from dask_gpu_interop.device import gpu_count

from .helpers import assert_each_key_in_one_partition, sorted_rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("dask_cudf") is None, reason="needs dask-cudf"),
]

PROTOCOLS = [
    "tcp",
    pytest.param("ucx", marks=pytest.mark.skipif(
        importlib.util.find_spec("distributed_ucxx") is None, reason="needs distributed-ucxx")),
]


def pandas_frame(rows: int = 40_000, keys: int = 501, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "key": rng.integers(0, keys, rows),
        "name": rng.choice(["ash", "birch", "cedar", "damson", "elm"], rows),
        "x": rng.random(rows),
        "n": np.arange(rows),
    }, index=pd.RangeIndex(0, 3 * rows, 3))


def gpu_frame(pdf: pd.DataFrame, npartitions: int = 8):
    import dask.dataframe as dd

    return dd.from_pandas(pdf, npartitions=npartitions, sort=False).to_backend("cudf")


def library_of(part) -> str:
    return type(part).__module__.split(".")[0]


def gathered(client, shuffled) -> list[pd.DataFrame]:
    """The output partitions as pandas frames, after checking on the workers that each is a
    cuDF frame (every call names its client: two clusters can be up at once here)."""
    import dask

    parts = shuffled.to_delayed()
    kinds = client.compute([dask.delayed(library_of)(p) for p in parts], sync=True)
    assert set(kinds) == {"cudf"}, set(kinds)
    return [p.to_pandas() for p in client.compute(parts, sync=True)]


def assert_rows(parts, pdf):
    pd.testing.assert_frame_equal(sorted_rows(pd.concat(parts)), sorted_rows(pdf),
                                  check_dtype=False)  # fmt: skip


@pytest.fixture(scope="module")
def one_gpu():
    from dask_gpu_interop import cluster_client

    with cluster_client(device="gpu", n_workers=1, processes=True,
                        memory={"pool_size": "0.2"}) as (client, device):  # fmt: skip
        assert device == "gpu"
        yield client


@pytest.mark.parametrize("on, npartitions", [("key", None), (["key", "name"], 5),
                                             ("name", 3), ("key", 1)])
def test_every_row_once_and_every_key_in_one_partition_on_a_gpu(one_gpu, on, npartitions):
    from dask_gpu_interop import shuffle

    pdf = pandas_frame()
    shuffled = shuffle(gpu_frame(pdf), on, npartitions, client=one_gpu)
    parts = gathered(one_gpu, shuffled)
    assert len(parts) == (npartitions or 8)
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, on)


def test_all_keys_equal_and_empty_partitions_on_a_gpu(one_gpu):
    from dask_gpu_interop import shuffle

    pdf = pandas_frame(rows=1_000, keys=1)
    source = gpu_frame(pdf, 4)
    source = source[source["n"] >= 500]  # the first partitions are empty
    parts = gathered(one_gpu, shuffle(source, "key", 4, ignore_index=True, client=one_gpu))
    assert sorted(len(p) for p in parts) == [0, 0, 0, 500]
    assert sorted(pd.concat(parts)["n"]) == list(range(500, 1000))


def runs(ordered, offsets) -> list[pd.DataFrame]:
    """The output partitions' runs of one split, as pandas frames."""
    host = ordered.to_pandas()
    return [host.iloc[offsets[j]:offsets[j + 1]] for j in range(len(offsets) - 1)]


@pytest.mark.parametrize("index", ["range", "named", "multi", "ignored"])
def test_a_cudf_split_in_libcudf_keeps_every_row_its_index_and_each_key_in_one_run(index):
    import cudf

    from dask_gpu_interop.all_to_all import tasks

    pdf = pandas_frame(rows=20_000)
    if index == "named":
        pdf = pdf.rename_axis("row")
    elif index == "multi":
        pdf = pdf.set_index(["name", pdf.index])
    frame = cudf.from_pandas(pdf)
    ignore = index == "ignored"
    assert tasks._in_libcudf(frame, ignore)
    ordered, offsets = tasks.order_by_partition(frame, ["key"], {"key": "float64"}, 7, ignore)
    assert offsets[0] == 0 and offsets[-1] == len(pdf) and (np.diff(offsets) >= 0).all()
    assert list(ordered.columns) == list(pdf.columns)
    assert dict(ordered.dtypes) == dict(frame.dtypes)
    parts = runs(ordered, offsets)
    assert_each_key_in_one_partition(parts, "key")
    got = pd.concat(parts).sort_values("n")
    want = pdf.sort_values("n")
    if ignore:
        got, want = got.reset_index(drop=True), want.reset_index(drop=True)
    assert got.index.names == want.index.names
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_index_type=False)


def test_an_int_key_meets_an_equal_float_key_in_a_cudf_split():
    import cudf

    from dask_gpu_interop.all_to_all import tasks

    ints = cudf.DataFrame({"key": np.arange(1_000, dtype=np.int64)})
    floats = cudf.DataFrame({"key": np.arange(1_000, dtype=np.float64)})
    where = []
    for frame in (ints, floats):
        ordered, offsets = tasks.order_by_partition(frame, ["key"], {"key": "float64"}, 9, True)
        where.append({int(k): j for j, part in enumerate(runs(ordered, offsets))
                      for k in part["key"]})
    assert where[0] == where[1] and len(set(where[0].values())) == 9


INDEXES = {  # the index levels travel as the first columns of libcudf's tables
    "named": lambda pdf: pdf.rename_axis("row"),
    "unnamed": lambda pdf: pdf,
    "two levels": lambda pdf: pdf.set_index([pdf.index.rename("row"), pdf["n"].rename(None)]),
}


@pytest.mark.parametrize("group_bytes", [1 << 40, 1])  # one group per worker; one per part
@pytest.mark.parametrize("ignore_index", [False, True])
@pytest.mark.parametrize("index", sorted(INDEXES))
def test_cudf_splits_batches_and_outputs_in_libcudf_equal_cudfs_own(monkeypatch, ignore_index,
                                                                   group_bytes, index):
    import cudf

    from dask_gpu_interop.all_to_all import tasks

    monkeypatch.setattr(tasks, "GROUP_BYTES", group_bytes)
    pdf = INDEXES[index](pandas_frame(rows=10_000))
    frame = cudf.from_pandas(pdf)
    assert tasks._in_libcudf(frame, ignore_index)
    parts = [frame.iloc[i::3] for i in range(3)]
    sources = [tasks.split(parts[:2], ["key"], {"key": "float64"}, 4, ignore_index),
               tasks.split(parts[2:], ["key"], {"key": "float64"}, 4, ignore_index)]
    assert [len(frames) for frames, _ in sources] == ([1, 1] if group_bytes > 1 else [2, 1])
    batches = [tasks.batch(groups, 1, 4) for groups in sources]
    outputs = []
    for position in range(3):
        j = 1 + position
        got = tasks.output(batches, position, ignore_index)
        pieces = [ordered.iloc[int(offsets[j]):int(offsets[j + 1])]
                  for groups in sources for ordered, offsets in zip(*groups, strict=True)]
        want = cudf.concat(pieces, ignore_index=ignore_index)
        assert len(want) > 0
        pd.testing.assert_frame_equal(got.to_pandas(), want.to_pandas())
        outputs.append(got.to_pandas())
    # every row once, each key in one output partition, the index as it was
    _, whole = tasks.order_by_partition(frame, ["key"], {"key": "float64"}, 4, True)
    assert sum(len(o) for o in outputs) == int(whole[4] - whole[1])  # outputs 1-3 of the frame
    assert_each_key_in_one_partition(outputs, "key")
    if not ignore_index:
        rows = pd.concat(outputs)
        assert rows.index.names == pdf.index.names
        pd.testing.assert_frame_equal(rows, pdf.loc[rows.index])


def test_a_cudf_frame_of_categories_is_split_by_the_same_hash(one_gpu):
    import cudf

    from dask_gpu_interop import shuffle
    from dask_gpu_interop.all_to_all import tasks

    pdf = pandas_frame()
    categories = pdf.astype({"name": "category"})
    plain, other = cudf.from_pandas(pdf), cudf.from_pandas(categories)
    assert tasks._in_libcudf(plain, False) and not tasks._in_libcudf(other, False)
    where = []
    for frame in (plain, other):  # a join's two sides: the same key, the same partition
        ordered, offsets = tasks.order_by_partition(frame, ["key", "name"], {"key": "float64"}, 6,
                                                    False)
        where.append({key: j for j, part in enumerate(runs(ordered, offsets))
                      for key in part[["key", "name"]].astype({"name": str}).itertuples(
                          index=False, name=None)})
    assert where[0] == where[1]
    parts = gathered(one_gpu, shuffle(gpu_frame(categories), "key", 5, client=one_gpu))
    assert_rows([p.astype({"name": str}) for p in parts], pdf)
    assert_each_key_in_one_partition(parts, "key")


@pytest.mark.parametrize("exchange,split,others", [
    ("direct", "gpu-shuffle-send", ["gpu-shuffle-output"]),
    ("batches", "gpu-shuffle-split", ["gpu-shuffle-batch", "gpu-shuffle-output"])])
def test_each_step_has_its_line_in_the_per_task_memory_report(one_gpu, exchange, split, others):
    import dask

    from dask_gpu_interop import memory_report, shuffle
    from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY

    with dask.config.set({EXCHANGE_KEY: exchange}):
        shuffled = shuffle(gpu_frame(pandas_frame(rows=200_000)), "key", 4, client=one_gpu)
    frame = memory_report(one_gpu).tasks_frame().set_index("prefix")
    assert frame.loc[split, "tasks"] >= 1  # one per worker
    assert frame.loc[split, "peak_bytes_max"] > 0  # the split's ordered copy
    for prefix in others:
        assert frame.loc[prefix, "tasks"] >= 1
    assert frame.loc["gpu-shuffle-output", "tasks"] >= 4
    del shuffled


def test_dasks_own_shuffle_of_cudf_takes_the_task_shuffle_in_a_gpu_cluster_client(one_gpu):
    import dask

    source = gpu_frame(pandas_frame(rows=1_000))
    assert dask.config.get("dataframe.shuffle.method") == "tasks"
    lowered = {type(e).__name__ for e in source.shuffle("key").optimize().expr.walk()}
    assert "TaskShuffle" in lowered and "P2PShuffle" not in lowered


def test_in_steps_every_row_once_and_partitions_that_stay_cudf_on_a_gpu(one_gpu):
    import dask

    from dask_gpu_interop import shuffle
    from dask_gpu_interop.all_to_all.plan import STEP_KEY

    pdf = pandas_frame(rows=200_000)
    with dask.config.set({STEP_KEY: "500 kB"}):
        parts = gathered(one_gpu, shuffle(gpu_frame(pdf, 8), "key", 12, client=one_gpu))
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, "key")


def test_with_cudfs_spilling_a_frame_larger_than_the_pool_shuffles_in_steps():
    """spill=True and a pool smaller than the frame and its shuffle together: cuDF moves
    frames to host memory and back as the steps need them (libcudf must get them back on the
    device); every row once, each key in one partition."""
    import dask

    from dask_gpu_interop import cluster_client, shuffle
    from dask_gpu_interop.all_to_all.plan import STEP_KEY

    pool = 256 * 2**20
    pdf = pandas_frame(rows=6_000_000)
    with cluster_client(device="gpu", n_workers=1, processes=True,
                        memory={"pool_size": "128MiB", "maximum_pool_size": "256MiB",
                                "spill": True}) as (client, _):  # fmt: skip
        frame = client.persist(gpu_frame(pdf, 8))
        with dask.config.set({STEP_KEY: "16MB"}):
            shuffled, stats = shuffle(frame, "key", 12, return_stats=True, client=client)
        # to pandas on the worker: a client without cuDF's spilling cannot take spillable frames
        parts = client.compute([dask.delayed(_to_pandas)(p) for p in shuffled.to_delayed()],
                               sync=True)  # fmt: skip
    assert 2 * stats.output_bytes > pool  # the frame and its shuffle do not fit the pool
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, "key")


def _to_pandas(part):
    return part.to_pandas()


# --------------------------------------------------------------------------- two GPUs


@pytest.fixture(scope="module", params=PROTOCOLS)
def two_gpus(request):
    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    from dask_gpu_interop import cluster_client

    with cluster_client(device="gpu", n_workers=2, protocol=request.param,
                        memory={"pool_size": "0.2"}) as (client, device):  # fmt: skip
        assert device == "gpu" and len(client.nthreads()) == 2
        yield client


@pytest.mark.multi_gpu
@pytest.mark.parametrize("exchange", ["direct", "batches"])
def test_between_two_gpus_about_half_crosses_and_every_row_arrives(two_gpus, exchange):
    import dask

    from dask_gpu_interop import shuffle
    from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY

    pdf = pandas_frame(rows=400_000)
    with dask.config.set({EXCHANGE_KEY: exchange}):
        shuffled, stats = shuffle(gpu_frame(pdf, 8), ["key", "name"], 6, return_stats=True,
                                  client=two_gpus)
    workers = sorted(two_gpus.nthreads())
    assert set(stats.crossed) <= {(workers[0], workers[1]), (workers[1], workers[0])}
    assert 0.3 * stats.output_bytes < stats.crossing_bytes < 0.7 * stats.output_bytes
    parts = gathered(two_gpus, shuffled)
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, ["key", "name"])


@pytest.mark.multi_gpu
def test_in_steps_between_two_gpus_every_row_arrives_once(two_gpus):
    import dask

    from dask_gpu_interop import shuffle
    from dask_gpu_interop.all_to_all.plan import STEP_KEY

    pdf = pandas_frame(rows=400_000)
    with dask.config.set({STEP_KEY: "1 MB"}):
        shuffled, stats = shuffle(gpu_frame(pdf, 8), "key", 10, return_stats=True,
                                  client=two_gpus)
    assert 0.3 * stats.output_bytes < stats.crossing_bytes < 0.7 * stats.output_bytes
    parts = gathered(two_gpus, shuffled)
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, "key")


@pytest.mark.multi_gpu
@pytest.mark.skipif(importlib.util.find_spec("distributed_ucxx") is None,
                    reason="needs distributed-ucxx")  # fmt: skip
def test_with_cudfs_spilling_frames_cross_between_gpus_on_the_devices():
    """With cuDF's spilling on the workers, a frame, and a list of frames (as the shuffle's
    batches are), that cross over UCX arrive in device memory (the "cuda" family), not
    pickled through host memory, where cuDF would hold them as spilled; the shuffle gives
    every row once."""
    import dask

    from dask_gpu_interop import cluster_client, shuffle

    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    pdf = pandas_frame(rows=400_000)
    with cluster_client(device="gpu", n_workers=2, protocol="ucx",
                        memory={"pool_size": "0.2", "spill": True}) as (client, _):  # fmt: skip
        first, second = sorted(client.nthreads())
        made = client.submit(_cudf_frame, pdf, workers=[first])
        arrived = client.submit(_spilled_buffers, made, workers=[second]).result()
        listed = client.submit(_cudf_frames, pdf, workers=[first])
        arrived_listed = client.submit(_spilled_buffers, listed, workers=[second]).result()
        shuffled = shuffle(gpu_frame(pdf, 8), "key", 6, client=client)
        parts = client.compute([dask.delayed(_to_pandas)(p) for p in shuffled.to_delayed()],
                               sync=True)  # fmt: skip
    assert arrived == 0 and arrived_listed == 0
    assert_rows(parts, pdf)


def _cudf_frame(pdf):
    import cudf

    return cudf.from_pandas(pdf)


def _cudf_frames(pdf) -> list:
    import cudf

    return [cudf.from_pandas(pdf), cudf.from_pandas(pdf.iloc[::2])]


def _spilled_buffers(frame) -> int:
    """How many of cuDF's buffers on this worker are in host memory."""
    from cudf.core.buffer.spill_manager import get_global_manager

    return sum(1 for buffer in get_global_manager().buffers() if buffer.is_spilled)


@pytest.mark.multi_gpu
def test_shuffle_merge_between_two_gpus_equals_cudfs_merge(two_gpus):
    import cudf

    from dask_gpu_interop import shuffle_merge

    performance = pandas_frame(rows=200_000, keys=5_000)
    acquisition = pd.DataFrame({"key": np.arange(0, 5_000, 2), "rate": np.arange(2_500) / 7})
    joined = shuffle_merge(gpu_frame(performance, 8), gpu_frame(acquisition, 3), on="key",
                           client=two_gpus)
    got = two_gpus.compute(joined, sync=True).to_pandas()
    want = cudf.DataFrame(performance).merge(cudf.DataFrame(acquisition), on="key").to_pandas()
    order = ["n"]
    pd.testing.assert_frame_equal(got.sort_values(order).reset_index(drop=True),
                                  want.sort_values(order).reset_index(drop=True),
                                  check_dtype=False)  # fmt: skip


@pytest.mark.multi_gpu
@pytest.mark.parametrize("exchange,step", [("direct", "gpu-shuffle-send"),
                                           ("batches", "gpu-shuffle-batch")])
def test_a_gpu_worker_killed_mid_shuffle_changes_nothing(tmp_path, exchange, step):
    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    import dask

    from dask_gpu_interop import cluster_client, shuffle
    from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY

    from .helpers import DieOnce

    pdf = pandas_frame(rows=400_000)
    protocol = "ucx" if importlib.util.find_spec("distributed_ucxx") else "tcp"
    with cluster_client(device="gpu", n_workers=2, protocol=protocol,
                        memory={"pool_size": "0.2"}) as (client, _), \
            dask.config.set({EXCHANGE_KEY: exchange}):  # fmt: skip
        source = client.persist(gpu_frame(pdf, 8))
        pids = set(client.run(os.getpid).values())
        client.register_plugin(DieOnce(str(tmp_path / "died"), step))
        parts = gathered(client, shuffle(source, "key", 6, client=client))
        assert (tmp_path / "died").exists(), "no worker died: the test did not test anything"
        client.wait_for_workers(2, timeout=120)
        assert set(client.run(os.getpid).values()) != pids
    assert_rows(parts, pdf)
    assert_each_key_in_one_partition(parts, "key")

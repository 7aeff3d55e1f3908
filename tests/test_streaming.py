"""train_streamed: XGBoost on a lazy collection, each batch made on its worker as XGBoost reads
it. CPU workers here (pandas batches); the GPU test at the end trains on cuDF batches."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("xgboost")

import dask  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

from dask_gpu_interop import NotLazyError, train_streamed  # noqa: E402
from dask_gpu_interop.streaming.batches import LocalBatches, batch_graphs  # noqa: E402

PARAMS = {"objective": "binary:logistic", "eval_metric": "auc", "max_depth": 3}
MADE = "streaming-batches-made"


def frame(seed: int, rows: int = 600, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 3)).astype("float32")
    y = ((x[:, 0] + 0.3 * x[:, 1] + shift + 0.1 * rng.random(rows)) > 0.8).astype("int32")
    return pd.DataFrame(x, columns=["a", "b", "c"]).assign(y=y)


def batch(seed: int, shift: float = 0.0):
    """A batch that counts its making on the worker (an event per making)."""
    try:
        from distributed import get_worker

        get_worker().log_event(MADE, {"seed": seed, "pid": os.getpid()})
    except ValueError:  # not on a worker
        pass
    table = frame(seed, shift=shift)
    try:
        from distributed import get_worker

        where = get_worker().address
    except ValueError:
        where = None
    return table, {"seed": seed, "rows": len(table), "worker": where}


def lookup():
    """A result every batch of a worker shares (made once a worker)."""
    from distributed import get_worker

    get_worker().log_event(MADE, {"shared": True})
    return 0.05


def batch_with(seed: int, shift: float):
    return batch(seed, shift)


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


def delayed_batches(seeds):
    return [dask.delayed(batch, pure=False)(s) for s in seeds]


def made(client, settle: float = 0.5) -> list[dict]:
    """The batches' makings the workers logged: read again until no new one has come for
    ``settle`` seconds (a worker's events reach the scheduler a moment after the task)."""
    import time

    seen = client.get_events(MADE)
    while True:
        time.sleep(settle)
        now = client.get_events(MADE)
        if len(now) == len(seen):
            return [event for _, event in now]
        seen = now


def test_same_data_and_parameters_give_the_same_model_at_every_run(client):
    first = train_streamed(client, PARAMS, delayed_batches(range(5)), label="y",
                           evals={"test": delayed_batches([50, 51])}, num_boost_round=8)
    second = train_streamed(client, PARAMS, delayed_batches(range(5)), label="y",
                            evals={"test": delayed_batches([50, 51])}, num_boost_round=8)
    assert first.history["test"]["auc"] == second.history["test"]["auc"]
    assert first.booster.save_raw() == second.booster.save_raw()
    assert first.history["test"]["auc"][-1] > 0.9  # it learned the rule


def test_every_batch_is_trained_on_once_per_pass_in_batch_order_of_infos(client):
    out = train_streamed(client, PARAMS, delayed_batches(range(5)), label="y",
                         evals={"test": delayed_batches([50, 51, 52])}, num_boost_round=2)
    assert [i["seed"] for i in out.infos["train"]] == [0, 1, 2, 3, 4]
    assert [i["seed"] for i in out.infos["test"]] == [50, 51, 52]
    assert out.rows == {"train": 5 * 600, "test": 3 * 600}
    assert len(out.workers) == 2 and out.matrix == "in-core"
    # batch i made on the worker of rank i modulo the workers: where it trains, nothing moved
    for name in ("train", "test"):
        assert [i["worker"] for i in out.infos[name]] == [
            out.workers[i % 2] for i in range(len(out.infos[name]))]


def test_batches_are_made_again_at_each_pass_unless_kept(client):
    client.get_events(MADE)  # (events of earlier tests are told apart by their seeds)
    seeds = [100, 101, 102, 103]
    train_streamed(client, PARAMS, delayed_batches(seeds), label="y", num_boost_round=1)
    counts = [sum(e.get("seed") == s for e in made(client)) for s in seeds]
    assert min(counts) >= 2  # XGBoost reads each batch at every pass: made again each time
    kept = [200, 201, 202, 203]
    out = train_streamed(client, PARAMS, delayed_batches(kept), label="y", num_boost_round=1,
                         keep_batches=True)
    assert [sum(e.get("seed") == s for e in made(client)) for s in kept] == [1, 1, 1, 1]
    assert all(len(t["passes"]) >= 2 for t in out.timings)


def test_a_result_shared_by_a_workers_batches_is_made_once_there(client):
    before = sum(bool(e.get("shared")) for e in made(client))
    shared = dask.delayed(lookup, pure=False)()
    batches = [dask.delayed(batch_with, pure=False)(300 + i, shared) for i in range(6)]
    train_streamed(client, PARAMS, batches, label="y", num_boost_round=1)
    assert sum(bool(e.get("shared")) for e in made(client)) - before == 2  # once a worker


def test_no_worker_trains_without_a_batch(client):
    out = train_streamed(client, PARAMS, delayed_batches([400]), label="y", num_boost_round=2)
    assert len(out.workers) == 1 and out.rows["train"] == 600


def test_a_dask_dataframe_trains_partition_by_partition(client):
    import dask.dataframe as dd

    parts = [dask.delayed(frame, pure=False)(500 + i) for i in range(4)]
    data = dd.from_delayed(parts, meta=frame(0).head(0), verify_meta=False)
    out = train_streamed(client, PARAMS, data, label="y", evals={"test": data},
                         num_boost_round=4, features=["a", "b"])
    assert out.rows["train"] == 4 * 600 and out.booster.num_features() == 2


def test_external_memory_gives_the_in_core_model(client):
    args = (client, PARAMS, delayed_batches(range(4)))
    options = {"label": "y", "evals": {"test": delayed_batches([60])}, "num_boost_round": 4}
    in_core = train_streamed(*args, **options)
    external = train_streamed(*args, **options, external_memory=True)
    assert external.matrix == "external"
    assert external.history["test"]["auc"][-1] == pytest.approx(
        in_core.history["test"]["auc"][-1], abs=1e-6)


def test_what_check_raises_stops_every_worker_before_training(client):
    def check(infos):
        if sum(i["rows"] for i in infos["train"]) > 1000:
            raise ValueError(f"too many rows: {sum(i['rows'] for i in infos['train'])}")

    with pytest.raises(ValueError, match="too many rows: 3000"):
        train_streamed(client, PARAMS, delayed_batches(range(5)), label="y", check=check,
                       num_boost_round=2)
    # the workers are free again: another training runs at once
    assert train_streamed(client, PARAMS, delayed_batches(range(2)), label="y",
                          num_boost_round=1).rows["train"] == 1200


def fails(seed):
    if seed == 3:
        raise OSError("batch 3 cannot be read")
    return frame(seed)


@pytest.mark.timeout(120)
def test_a_batch_that_fails_on_one_worker_fails_the_call_without_a_hang(client):
    batches = [dask.delayed(fails, pure=False)(s) for s in range(4)]
    with pytest.raises(OSError, match="batch 3 cannot be read"):
        train_streamed(client, PARAMS, batches, label="y", num_boost_round=2)
    assert train_streamed(client, PARAMS, delayed_batches(range(2)), label="y",
                          num_boost_round=1).rows["train"] == 1200


def test_bad_arguments_are_refused_before_any_work(client):
    good = delayed_batches(range(2))
    with pytest.raises(TypeError, match="takes the cluster's Client"):
        train_streamed(client.cluster, PARAMS, good, label="y")
    with pytest.raises(ValueError, match="tree_method='exact'.*needs tree_method='hist'"):
        train_streamed(client, {"tree_method": "exact"}, good, label="y")
    with pytest.raises(ValueError, match="num_boost_round=0"):
        train_streamed(client, PARAMS, good, label="y", num_boost_round=0)
    with pytest.raises(TypeError, match="give a dask DataFrame"):
        train_streamed(client, PARAMS, [frame(0)], label="y")
    with pytest.raises(ValueError, match="no batches"):
        train_streamed(client, PARAMS, [], label="y")
    with pytest.raises(ValueError, match="not in the cluster"):
        train_streamed(client, PARAMS, good, label="y", workers=["tcp://nowhere:1"])
    with pytest.raises(ValueError, match="'train' names the training matrix"):
        train_streamed(client, PARAMS, good, label="y", evals={"train": good})
    with pytest.raises(ValueError, match="lossguide"):
        train_streamed(client, {"grow_policy": "lossguide"}, good, label="y",
                       external_memory=True)


def test_a_missing_label_is_named(client):
    with pytest.raises(KeyError, match="label='target'"):
        train_streamed(client, PARAMS, delayed_batches([1, 2]), label="target",
                       num_boost_round=1)


def test_a_persisted_collection_is_sent_to_xgboost_dask(client):
    import dask.dataframe as dd

    data = dd.from_pandas(frame(1), npartitions=2).persist()
    with pytest.raises(NotLazyError, match="xgboost.dask"):
        train_streamed(client, PARAMS, data, label="y")


CALLS: list[str] = []


def source():
    CALLS.append("source")
    return 1


def middle(value):
    CALLS.append("middle")
    return value + 1


def leaf(value, i):
    return value * 10 + i


def test_local_batches_keep_only_the_shared_frontier():
    CALLS.clear()
    top = dask.delayed(middle, pure=False)(dask.delayed(source, pure=False)())
    batches = LocalBatches(batch_graphs([dask.delayed(leaf, pure=False)(top, i)
                                         for i in range(3)]).subset(range(3)).dumps())
    assert [batches.compute(i) for i in range(3)] == [20, 21, 22]
    assert [batches.compute(i) for i in range(3)] == [20, 21, 22]
    assert CALLS == ["source", "middle"]  # shared: made once, the frontier kept
    assert set(batches._values) == {top.key}  # the source beneath it is not kept


@pytest.mark.gpu
def test_cudf_batches_train_on_the_gpu_in_the_shared_pool():
    import cudf

    from dask_gpu_interop import cluster_client

    def gpu_batch(seed):
        return cudf.DataFrame(frame(seed))

    with cluster_client(device="gpu", memory={"async_alloc": True}) as (c, device):
        assert device == "gpu"
        batches = [dask.delayed(gpu_batch, pure=False)(s) for s in range(4)]
        out = train_streamed(c, {**PARAMS, "device": "cuda"}, batches, label="y",
                             evals={"test": [dask.delayed(gpu_batch, pure=False)(9)]},
                             num_boost_round=8)
        external = train_streamed(c, {**PARAMS, "device": "cuda"}, batches, label="y",
                                  evals={"test": [dask.delayed(gpu_batch, pure=False)(9)]},
                                  num_boost_round=8, external_memory=True,
                                  cache_host_ratio=1.0)
    assert out.history["test"]["auc"][-1] > 0.9
    assert all(len(t["passes"]) == 2 for t in out.timings)  # the GPU matrix reads twice
    assert external.history["test"]["auc"][-1] == pytest.approx(
        out.history["test"]["auc"][-1], abs=1e-3)


def test_an_evaluation_of_fewer_batches_than_workers_leaves_no_worker_empty(client):
    out = train_streamed(client, PARAMS, delayed_batches(range(4)), label="y",
                         evals={"test": delayed_batches([70])}, num_boost_round=3)
    assert out.rows["test"] == 600  # every row once, cut between the two workers
    assert [i and i["seed"] for i in out.infos["test"]] == [70, None]  # its info once
    assert all(t["batches"] == 3 for t in out.timings)  # 2 training batches and 1 test each


class XGBoostError(RuntimeError):
    """Named as XGBoost's: a broken communicator's error, as the other workers raise it."""


def _collective_fails_first():
    raise XGBoostError("[allreduce.cc:39]: Ring allreduce small failed.")


def _the_cause_comes_later():
    import time

    time.sleep(0.5)
    raise OSError("batch 3 cannot be read")


def test_the_failing_workers_cause_is_raised_not_the_others_broken_communicator(client):
    from dask_gpu_interop.streaming.train import _raise_the_first_cause

    futures = [client.submit(_collective_fails_first, pure=False),
               client.submit(_the_cause_comes_later, pure=False)]
    with pytest.raises(OSError, match="batch 3 cannot be read"):
        _raise_the_first_cause(futures)
    # only broken communicators: the first of them
    with pytest.raises(XGBoostError, match="Ring allreduce"):
        _raise_the_first_cause([client.submit(_collective_fails_first, pure=False)])

"""XGBoost on the ETL's partitions, on a CPU cluster: it learns, and it is tested fairly."""

from __future__ import annotations

import dask
import pandas as pd
import pytest
from distributed import Client, LocalCluster

from dask_gpu_interop import cluster_workers
from examples.mortgage import etl, files, job, schema, train
from examples.mortgage.testdata import generate as gen


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("train"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=150, loans_per_part=80, seed=5)
    with dask.config.set(scheduler="synchronous"):
        made = gen.generate(directory, spec)
    return made


def _rows(paths):
    return sum(sum(1 for _ in open(p)) for p in paths)


def _plan(data, perf=None):
    return files.plan(perf=perf or data.performance, acq=data.acquisition, names=data.names)


def test_learns_and_is_tested_on_the_latest_quarter(cpu_client, data):
    perf = data.performance
    result = etl.run(_plan(data))
    trained = train.train(cpu_client, result.frame, result.quarters, "cpu", rounds=20)
    assert trained.holdout == "quarter 2007Q4"
    test_files = [p for p in perf if "2007Q4" in p]
    assert trained.test_rows == _rows(test_files)
    assert trained.train_rows + trained.test_rows == result.rows == _rows(perf)
    assert trained.auc > 0.75, trained.auc
    assert trained.booster.num_features() == 45
    assert trained.booster.feature_names == list(schema.FEATURES)


def test_another_holdout_quarter(cpu_client, data):
    perf = data.performance
    result = etl.run(_plan(data))
    trained = train.train(cpu_client, result.frame, result.quarters, "cpu", rounds=3,
                          holdout="2006Q2")
    assert trained.test_rows == _rows([p for p in perf if "2006Q2" in p])
    with pytest.raises(ValueError, match="the data has quarters 2006Q1"):
        train.train(cpu_client, result.frame, result.quarters, "cpu", holdout="1999Q1")


def test_a_single_quarter_holds_out_rows(cpu_client, data):
    one = [p for p in data.performance if "2007Q2" in p]
    result = etl.run(_plan(data, one))
    trained = train.train(cpu_client, result.frame, result.quarters, "cpu", rounds=3)
    assert "one quarter only" in trained.holdout
    assert trained.train_rows + trained.test_rows == _rows(one)
    assert 0.1 < trained.test_rows / _rows(one) < 0.3
    with pytest.raises(ValueError, match="only quarter of the data, so nothing is left"):
        train.train(cpu_client, result.frame, result.quarters, "cpu", holdout="2007Q2")
    # in 2007Q1 the loans held out (the last fifth of each file) never went 90 days behind
    result = etl.run(_plan(data, [p for p in data.performance if "2007Q1" in p]))
    with pytest.raises(ValueError, match="test rows .* is current: .*AUC needs both classes"):
        train.train(cpu_client, result.frame, result.quarters, "cpu", rounds=3)


def test_a_test_set_of_one_class_is_refused_not_scored_nan(cpu_client, data):
    result = etl.run(_plan(data))
    no_delinquency = result.frame.map_partitions(
        lambda part: part.assign(**{schema.LABEL: part[schema.LABEL] * 0}))
    with pytest.raises(ValueError, match="AUC needs both classes"):
        train.train(cpu_client, no_delinquency, result.quarters, "cpu", rounds=2)


def test_every_worker_holds_training_and_test_rows(cpu_client, data):
    """xgboost.dask trains each worker on the partitions it holds: the held-out quarter,
    whatever worker computed it, is spread so that no worker has an empty matrix, partition
    i on the worker of XGBoost rank i modulo the workers."""
    from distributed import futures_of, wait

    result = etl.run(_plan(data))
    _, test, _ = train.split(result.frame, result.quarters)
    assert test.npartitions == 1  # the held-out quarter is one partition, on one worker
    spread = cpu_client.persist(train.spread(cpu_client, test))
    placed = futures_of(spread)
    wait(placed)
    who = cpu_client.who_has(placed)
    ranked = train.ranked_workers(cpu_client)
    assert [next(iter(who[f.key])) for f in sorted(placed, key=lambda f: f.key[1])] == ranked
    assert len(spread) == len(test)
    pd.testing.assert_frame_equal(spread.compute().reset_index(drop=True),
                                  test.compute().reset_index(drop=True))


def test_a_small_table_trains_on_one_of_the_workers(cpu_client, data):
    """Partitions placed on the first ``count`` ranked workers only: the others hold nothing,
    so xgboost.dask leaves them out of the training."""
    from distributed import futures_of, wait

    result = etl.run(_plan(data))
    placed_frame = cpu_client.persist(train.spread(cpu_client, result.frame, 1))
    placed = futures_of(placed_frame)
    wait(placed)
    holders = {w for ws in cpu_client.who_has(placed).values() for w in ws}
    assert holders == {train.ranked_workers(cpu_client)[0]}
    assert len(placed_frame) == result.rows


@pytest.mark.parametrize("workers, rows, device, count", [
    (4, 10**6, "gpu", 1), (4, 3 * train.ROWS_PER_GPU, "gpu", 3), (2, 10**9, "gpu", 2),
    (1, 10**9, "gpu", 1), (4, 0, "gpu", 1), (4, 10**6, "cpu", 4),
])
def test_gpus_train_on_at_least_their_share_of_rows(workers, rows, device, count):
    assert train.training_workers(workers, rows, device) == count


def test_workers_are_ranked_by_name_as_xgboost_ranks_them(cpu_client):
    workers = cluster_workers(cpu_client)
    names = [workers[address]["name"] for address in train.ranked_workers(cpu_client)]
    assert names == sorted(names, key=str) and len(names) == 2


@pytest.mark.parametrize("params, named", [
    ({"max_depth": "abc"}, "max_depth=abc: XGBoost refuses it (Invalid Parameter format for "
                           "max_depth expect int but value='abc')"),
    ({"nosuchparam": 1}, "nosuchparam=1: XGBoost has no parameter nosuchparam"),
    ({"grow_policy": "sideways"}, "grow_policy=sideways: XGBoost refuses it"),
])
def test_bad_parameters_are_refused_before_any_work(params, named):
    with pytest.raises(ValueError) as caught:
        train.check_params(params)
    assert str(caught.value).startswith(named) and "\n" not in str(caught.value)
    train.check_params({"max_depth": 3, "grow_policy": "depthwise"})  # good ones pass


def test_the_notebook_parameters_are_the_defaults():
    p = train.PARAMS
    assert (p["max_depth"], p["max_leaves"], p["eta"], p["gamma"], p["min_child_weight"],
            p["scale_pos_weight"], p["grow_policy"], p["objective"], train.ROUNDS) == (
        8, 256, 0.1, 0.1, 30, 2, "depthwise", "binary:logistic", 100)


def test_the_job_reports_times_auc_and_memory(cpu_client, data):
    perf = data.performance
    said = []
    result = job.run(cpu_client, "cpu", _plan(data), rounds=5, echo=said.append)
    text = "\n".join(result.lines())
    assert result.etl.rows == _rows(perf)
    assert "test AUC" in text and "rows/s" in text
    assert set(result.host) == set(cluster_workers(cpu_client))
    assert all(m["peak_rss"] >= m["rss"] > 10_000_000 for m in result.host.values())
    assert text.count("no GPU: the plugin does nothing here") == 2
    assert said[0].startswith("training data: XGBoost's matrix in host memory (host): CPU "
                              "workers")
    assert said[0] in text  # where the training data lived, said before the work and after
    assert said[1].startswith("ETL into XGBoost's matrix: ")
    assert said[-1].startswith("training done")
    assert "the partitions kept from the first" in said[-2]  # the matrix's passes on CPUs


def test_xgboost_parameters_from_key_value_text():
    assert train.parse_params(["grow_policy=depthwise", "max_depth=10", "eta=0.05",
                               "single_precision_histogram=true"]) == {
        "grow_policy": "depthwise", "max_depth": 10, "eta": 0.05,
        "single_precision_histogram": True}
    assert train.parse_params([]) == {}
    for bad in ("depthwise", "=3", " =x"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            train.parse_params([bad])


def test_the_job_trains_with_the_parameters_given(cpu_client, data):
    import json

    result = job.run(cpu_client, "cpu", _plan(data), rounds=2, params={"max_depth": 3})
    config = json.loads(result.training.booster.save_config())
    assert config["learner"]["gradient_booster"]["tree_train_param"]["max_depth"] == "3"
    assert len(result.training.booster.get_dump()) == 2


def test_the_batches_split_as_the_table_splits(data):
    plan = _plan(data)
    train_batches, test_batches, what = train.batches(plan, "cpu")
    latest = max(q for q in plan.quarters if q)
    assert what == f"quarter {latest}"
    assert len(test_batches) == plan.quarters.count(latest)
    assert len(train_batches) + len(test_batches) == len(plan.parts)
    tables = [dask.compute(b)[0] for b in test_batches]
    assert all(info.rows == len(table) for table, info in tables)
    held = train.batches(plan, "cpu", holdout=min(plan.quarters))[2]
    assert held == f"quarter {min(plan.quarters)}"


def test_each_workers_matrices_hold_what_was_placed_on_it_while_it_is_busy(data, monkeypatch):
    """xgboost.dask trains each worker on the feature and label partitions it holds: they
    stay on the worker they were placed on, also when that worker is busy as xgboost.dask's
    own tasks come and another is idle (dask's work stealing would move them to the idle
    one). A new cluster: its tasks' durations are not yet known."""
    import collections
    import time

    from distributed import futures_of, wait

    spread = train.spread
    busy = []

    def placed_then_busy(cpu_client, part, count=None):
        """The partitions placed, then the first worker given a task that takes a while."""
        placed = spread(cpu_client, part, count)
        wait(futures_of(cpu_client.persist(placed)))
        busy.append(cpu_client.submit(time.sleep, 1, workers=[ranked[0]],
                                  allow_other_workers=False, pure=False))
        return placed

    monkeypatch.setattr(train, "spread", placed_then_busy)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as cpu_client:
        cpu_client.wait_for_workers(2)
        with cpu_client.as_current():  # the ETL on this cluster, whatever other client exists
            result = etl.run(_plan(data))
        training, test, _ = train.split(result.frame, result.quarters)
        ranked = train.ranked_workers(cpu_client)
        made = train.matrices(cpu_client, training, test)
        wait(busy)
        held = [{worker: len(parts) for worker, parts in matrix.worker_map.items()}
                for matrix in made]
    expected = [dict(collections.Counter(ranked[i % 2] for i in range(frame.npartitions)))
                for frame in (training, test.repartition(npartitions=2))]
    assert held == expected


def test_an_unknown_parameter_is_refused_after_xgboost_was_imported_in_another_thread():
    import os
    import subprocess
    import sys

    code = ("import threading; t = threading.Thread(target=lambda: __import__('xgboost')); "
            "t.start(); t.join()\n"
            "from examples.mortgage import train\n"
            "try:\n    train.check_params({'nosuchparam': '1'}); print('accepted')\n"
            "except ValueError as exc:\n    print('refused:', exc)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=root, timeout=120)
    assert out.stdout.startswith("refused: nosuchparam=1: XGBoost has no parameter"), out

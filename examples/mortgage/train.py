"""XGBoost on the ETL's partitions, where they lie: train on some quarters, test on one.

``xgboost.dask`` builds its matrices from the persisted partitions on each worker (cuDF on
GPUs, pandas on CPUs); nothing but the model and the evaluation history reaches the client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import xgboost

from dask_gpu_interop import xgboost_config

from . import schema

# The classic notebook's parameters (its reg:linear objective made binary:logistic).
PARAMS = {
    "max_depth": 8,
    "max_leaves": 2**8,
    "alpha": 0.9,
    "eta": 0.1,
    "gamma": 0.1,
    "subsample": 1,
    "reg_lambda": 1,
    "scale_pos_weight": 2,
    "min_child_weight": 30,
    "grow_policy": "lossguide",
    "objective": "binary:logistic",
    "tree_method": "hist",
    "eval_metric": "auc",
}
ROUNDS = 100
TEST_SHARE = 0.2  # of rows, when there is a single quarter to learn from

# Lossguide trees grow one node at a time, and on several workers each node is a collective
# operation: on 2 H200s the notebook's trees trained 4.6x slower than on one, depthwise trees
# 1.12x faster (benchmarks/results/xgboost-growth-2xH200.md).
SEVERAL_WORKERS_HINT = (
    "the notebook's lossguide trees train slower on several GPUs than on one (each new leaf "
    "waits for all of them); grow_policy='depthwise' (--xgb-param grow_policy=depthwise) grows "
    "a level at a time")


def parse_params(items) -> dict:
    """XGBoost parameters from ``KEY=VALUE`` strings; a value is read as JSON when it is one
    (numbers, true/false), else kept as text."""
    import json

    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r}: give an XGBoost parameter as KEY=VALUE, e.g. "
                             "grow_policy=depthwise or max_depth=10")
        try:
            params[key.strip()] = json.loads(value)
        except ValueError:
            params[key.strip()] = value
    return params


@dataclass
class TrainResult:
    booster: object
    auc: float
    train_auc: float
    holdout: str  # what was held out
    train_rows: int
    test_rows: int
    dmatrix_seconds: float
    train_seconds: float

    @property
    def seconds(self) -> float:
        return self.dmatrix_seconds + self.train_seconds


def check_holdout(quarters, holdout: str | None) -> list[str]:
    """The data's quarters, after checking that ``holdout`` leaves something to train on."""
    known = sorted({q for q in quarters if q is not None})
    if holdout is not None and holdout not in known:
        raise ValueError(f"holdout={holdout!r}: the data has quarters {', '.join(known) or 'none'}")
    if holdout is not None and known == [holdout]:
        raise ValueError(
            f"holdout={holdout!r} is the only quarter of the data, so nothing is left to train "
            "on: leave the holdout out (the last fifth of each partition is then held out) or "
            "give data of several quarters")
    return known


def split(frame, quarters: list[str | None], holdout: str | None = None):
    """(train, test, description), each of train and test as (frame, the partitions of the
    ETL's frame it comes from): test is the ``holdout`` quarter (default: the latest).

    With a single quarter the last fifth of every partition's rows is held out instead.
    """
    known = check_holdout(quarters, holdout)
    if len(known) >= 2 or holdout is not None:
        test_quarter = holdout or known[-1]
        test = [i for i, q in enumerate(quarters) if q == test_quarter]
        train = [i for i, q in enumerate(quarters) if q != test_quarter]
        return ((frame.partitions[train], train), (frame.partitions[test], test),
                f"quarter {test_quarter}")

    def head(part, share=TEST_SHARE):
        return part.iloc[: len(part) - int(len(part) * share)]

    def tail(part, share=TEST_SHARE):
        return part.iloc[len(part) - int(len(part) * share):]

    every = list(range(frame.npartitions))
    return ((frame.map_partitions(head), every), (frame.map_partitions(tail), every),
            f"the last {TEST_SHARE:.0%} of each partition (one quarter only)")


def _check_classes(name: str, rows: int, positives: int, what: str) -> None:
    """AUC needs both classes: say so instead of reporting nan."""
    if rows == 0:
        raise ValueError(f"nothing to {name}: no rows in {what}")
    if positives in (0, rows):
        label = "delinquent" if positives else "current"
        raise ValueError(
            f"every one of the {rows:,} {name} rows ({what}) is {label}: the model cannot "
            "learn or be scored (AUC needs both classes). Use more loans (--loans-per-quarter, "
            "--size) or more years (--years)")


TOPIC = "mortgage-training"


class RoundProgress(xgboost.callback.TrainingCallback):
    """Each finished round, reported by the first worker to the client through distributed's
    events (``log_event`` here, ``subscribe_topic`` on the client)."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def after_iteration(self, model, epoch, evals_log):
        from distributed import get_worker

        if xgboost.collective.get_rank() == 0:
            get_worker().log_event(TOPIC, {"round": epoch + 1, "rounds": self.rounds})
        return False


def _show_rounds(echo):
    """A handler of the round events: the rounds' progress, as the ETL's partitions show."""
    from .progress import Progress

    shown = {}

    def show(event):
        _, message = event
        if "bar" not in shown:
            shown["bar"] = Progress("training rounds", message["rounds"], echo)
        shown["bar"].update(message["round"])

    return show


def spread(client, part, frame, indices):
    """``part`` (made of ``frame``'s partitions ``indices``) with a partition on every
    worker, when some worker holds none: xgboost.dask builds each worker's matrix from the
    partitions it holds, and one without any trains on an empty matrix (and says so)."""
    import dask.dataframe as dd
    from distributed import futures_of

    workers = sorted(client.scheduler_info()["workers"])
    keys = frame.__dask_keys__()
    who_has = client.who_has(futures_of(frame))
    holders = {w for i in indices for w in who_has.get(keys[i], ())}
    if len(workers) < 2 or holders >= set(workers):
        return part
    if part.npartitions < len(workers):
        part = part.repartition(npartitions=len(workers))
    placed = [client.compute(piece, workers=[workers[i % len(workers)]],
                             allow_other_workers=False)
              for i, piece in enumerate(part.to_delayed())]
    return dd.from_delayed(placed, meta=part.head(0, npartitions=1, compute=False),
                           verify_meta=False)


def train(client, frame, quarters, device: str, *, rounds: int = ROUNDS,
          holdout: str | None = None, params: dict | None = None, progress: bool = False,
          echo=print) -> TrainResult:
    """Train on the ETL result ``frame`` (persisted), test on a held-out quarter (AUC)."""
    import dask
    import xgboost.dask as dxgb

    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be at least 1")
    (train_frame, train_parts), (test_frame, test_parts), what = split(frame, quarters, holdout)
    train_frame = spread(client, train_frame, frame, train_parts)
    test_frame = spread(client, test_frame, frame, test_parts)
    params = {**PARAMS, **(params or {}), "device": "cuda" if device == "gpu" else "cpu"}
    features = list(schema.FEATURES)
    label = schema.LABEL
    counts = dask.compute(train_frame[label].count(), train_frame[label].sum(),
                          test_frame[label].count(), test_frame[label].sum())
    train_rows, train_positives, test_rows, test_positives = (int(c) for c in counts)
    _check_classes("training", train_rows, train_positives, "the data not held out")
    _check_classes("test", test_rows, test_positives, what)
    callbacks = [RoundProgress(rounds)] if progress else []
    if progress:
        client.subscribe_topic(TOPIC, _show_rounds(echo))
    try:
        with xgboost.config_context(**xgboost_config(client)):
            started = time.perf_counter()
            dtrain = dxgb.DaskQuantileDMatrix(client, train_frame[features],
                                              train_frame[label])
            dtest = dxgb.DaskQuantileDMatrix(client, test_frame[features], test_frame[label],
                                             ref=dtrain)
            built = time.perf_counter()
            output = dxgb.train(client, params, dtrain, num_boost_round=rounds,
                                evals=[(dtrain, "train"), (dtest, "test")], verbose_eval=False,
                                callbacks=callbacks)
            done = time.perf_counter()
    finally:
        if progress:
            client.unsubscribe_topic(TOPIC)
    history = output["history"]
    return TrainResult(
        booster=output["booster"],
        auc=float(history["test"]["auc"][-1]),
        train_auc=float(history["train"]["auc"][-1]),
        holdout=what,
        train_rows=train_rows,
        test_rows=test_rows,
        dmatrix_seconds=built - started,
        train_seconds=done - built,
    )

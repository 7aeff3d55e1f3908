"""XGBoost on the ETL's partitions, where they lie: train on some quarters, test on one.

``xgboost.dask`` builds its matrices from the persisted partitions on each worker (cuDF on
GPUs, pandas on CPUs); nothing but the model and the evaluation history reaches the client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

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


def split(frame, quarters: list[str | None], holdout: str | None = None):
    """(train, test, description): test is the ``holdout`` quarter (default: the latest).

    With a single quarter the last fifth of every partition's rows is held out instead.
    """
    known = sorted({q for q in quarters if q is not None})
    if holdout is not None and holdout not in known:
        raise ValueError(f"holdout={holdout!r}: the data has quarters {', '.join(known) or 'none'}")
    if len(known) >= 2 or holdout is not None:
        test_quarter = holdout or known[-1]
        test = [i for i, q in enumerate(quarters) if q == test_quarter]
        train = [i for i, q in enumerate(quarters) if q != test_quarter]
        return frame.partitions[train], frame.partitions[test], f"quarter {test_quarter}"

    def head(part, share=TEST_SHARE):
        return part.iloc[: len(part) - int(len(part) * share)]

    def tail(part, share=TEST_SHARE):
        return part.iloc[len(part) - int(len(part) * share):]

    return (frame.map_partitions(head, meta=frame._meta),
            frame.map_partitions(tail, meta=frame._meta),
            f"the last {TEST_SHARE:.0%} of each partition (one quarter only)")


def train(client, frame, quarters, device: str, *, rounds: int = ROUNDS,
          holdout: str | None = None, params: dict | None = None) -> TrainResult:
    """Train on the ETL result ``frame`` (persisted), test on a held-out quarter (AUC)."""
    import dask
    import xgboost
    import xgboost.dask as dxgb

    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be at least 1")
    train_frame, test_frame, what = split(frame, quarters, holdout)
    params = {**PARAMS, **(params or {}), "device": "cuda" if device == "gpu" else "cpu"}
    features = list(schema.FEATURES)
    train_rows, test_rows = dask.compute(train_frame.map_partitions(len).sum(),
                                         test_frame.map_partitions(len).sum())
    if not train_rows or not test_rows:
        raise ValueError(f"nothing to {'train on' if not train_rows else 'test on'}: "
                         f"{train_rows} training rows, {test_rows} test rows ({what})")
    with xgboost.config_context(**xgboost_config(client)):
        started = time.perf_counter()
        dtrain = dxgb.DaskQuantileDMatrix(client, train_frame[features],
                                          train_frame[schema.LABEL])
        dtest = dxgb.DaskQuantileDMatrix(client, test_frame[features], test_frame[schema.LABEL],
                                         ref=dtrain)
        built = time.perf_counter()
        output = dxgb.train(client, params, dtrain, num_boost_round=rounds,
                            evals=[(dtrain, "train"), (dtest, "test")], verbose_eval=False)
        done = time.perf_counter()
    history = output["history"]
    return TrainResult(
        booster=output["booster"],
        auc=float(history["test"]["auc"][-1]),
        train_auc=float(history["train"]["auc"][-1]),
        holdout=what,
        train_rows=int(train_rows),
        test_rows=int(test_rows),
        dmatrix_seconds=built - started,
        train_seconds=done - built,
    )

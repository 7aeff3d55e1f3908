"""XGBoost on the ETL's partitions where they lie (cuDF on GPUs, pandas on CPUs): train on
some quarters, test on one; only the model and its evaluation reach the client."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from dask_gpu_interop import cluster_workers, train_streamed, without_work_stealing, xgboost_config

from . import etl, read, schema
from .progress import Progress

# The classic notebook's parameters (its reg:linear objective made binary:logistic), with its
# trees grown a level at a time (depthwise) instead of a leaf at a time (lossguide): capped at
# the same depth and leaves they come out alike, and on several GPUs a lossguide tree waits for
# every GPU at each new leaf, depthwise once a level.
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
    "grow_policy": "depthwise",
    "objective": "binary:logistic",
    "tree_method": "hist",
    "eval_metric": "auc",
}
ROUNDS = 100
TEST_SHARE = 0.2  # of rows, when there is a single quarter to learn from

# Training rows per GPU below which another GPU makes the training no faster: each tree level
# waits for every GPU's histograms, and with few rows each GPU's share of the work is shorter
# than that wait. A small table trains on fewer GPUs than the cluster has.
ROWS_PER_GPU = 25_000_000

SEVERAL_WORKERS_HINT = (
    "lossguide trees train slower on several GPUs than on one (each new leaf waits for all of "
    "them); the default, grow_policy=depthwise, grows a level at a time")


def training_workers(workers: int, rows: int, device: str) -> int:
    """How many of ``workers`` train on ``rows`` training rows: every CPU worker; GPU workers
    at least ``ROWS_PER_GPU`` rows each (one at least)."""
    if device != "gpu":
        return max(1, workers)
    return max(1, min(workers, rows // ROWS_PER_GPU))


def parse_params(items) -> dict:
    """XGBoost parameters from ``KEY=VALUE`` strings, a value read as JSON where it is one."""
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


def check_params(params: dict) -> None:
    """ValueError, naming the parameter and XGBoost's reason, unless XGBoost accepts ``params``
    over the notebook's: one round on a tiny matrix here, before any work on the workers."""
    if not params:  # nothing to check: XGBoost is imported while the cluster starts
        return
    import warnings

    import numpy as np
    import xgboost

    # XGBoost hands its log to Python (a warning per unused parameter) through a callback it
    # registers for the thread that imported it: where that was another thread (imports in
    # the background), register it for this one too, or the warning goes to the terminal.
    register = getattr(xgboost.core, "_register_log_callback", None)
    if register is not None:
        register(xgboost.core._LIB)
    rng = np.random.default_rng(0)
    tiny = xgboost.DMatrix(rng.random((8, len(schema.FEATURES)), dtype=np.float32),
                           label=np.arange(8) % 2, feature_names=list(schema.FEATURES))
    given = ", ".join(f"{key}={value}" for key, value in params.items())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            booster = xgboost.Booster({**PARAMS, **params, "device": "cpu"}, [tiny])
            booster.update(tiny, 0)
        except xgboost.core.XGBoostError as exc:
            reason = re.sub(r"^\[[\d:]+\] \S+: ", "", str(exc).strip().splitlines()[0])
            raise ValueError(f"{given}: XGBoost refuses it ({reason})") from None
    for warning in caught:
        unused = re.search(r"Parameters: \{(.*?)\} are not used", str(warning.message))
        if unused:
            names = unused.group(1).replace('"', "").strip()
            raise ValueError(f"{given}: XGBoost has no parameter {names} (see XGBoost's "
                             "parameter list; names are spelled like max_depth)")


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
    workers: int = 1  # the workers that trained
    matrix: str = "in-core"  # XGBoost's matrix: "in-core", or "external" (its external memory)
    passes: tuple[float, ...] = ()  # streamed: seconds of each pass over a worker's batches
    memory: dict | None = None  # streamed on GPUs: bytes the GPUs held (see device_memory)

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
    """(train, test, description): test is the ``holdout`` quarter (default: the latest), or
    with a single quarter the last fifth of every partition's rows."""
    known = check_holdout(quarters, holdout)
    if len(known) >= 2 or holdout is not None:
        test_quarter = holdout or known[-1]
        test = [i for i, q in enumerate(quarters) if q == test_quarter]
        train = [i for i, q in enumerate(quarters) if q != test_quarter]
        return frame.partitions[train], frame.partitions[test], f"quarter {test_quarter}"

    def head(part):
        return part.iloc[: len(part) - int(len(part) * TEST_SHARE)]

    def tail(part):
        return part.iloc[len(part) - int(len(part) * TEST_SHARE):]

    return (frame.map_partitions(head), frame.map_partitions(tail),
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


def round_progress():
    """An XGBoost callback that sends each finished round from the first worker to the client,
    as a distributed event."""
    import xgboost

    class RoundProgress(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            from distributed import get_worker

            if xgboost.collective.get_rank() == 0:
                get_worker().log_event(TOPIC, {"round": epoch + 1})
            return False

    return RoundProgress()


def ranked_workers(client) -> list[str]:
    """The workers' addresses in the order of their XGBoost ranks, which xgboost.dask gives
    by name (``[xgboost.dask-NAME]:ADDRESS``)."""
    workers = cluster_workers(client)
    return sorted(workers, key=lambda address: f"[xgboost.dask-{workers[address]['name']}]"
                                               f":{address}")


def spread(client, part, count: int | None = None):
    """``part`` with partition ``i`` on the worker of rank ``i`` modulo the first ``count``
    workers (default: all), at least one each: xgboost.dask trains each worker on the
    partitions it holds, so the same data and seed give the same model on as many workers,
    no worker's matrix is empty, and workers that hold nothing do not train."""
    import dask.dataframe as dd

    ranked = ranked_workers(client)  # once: the cluster's workers may change between calls
    workers = ranked[:count]
    if len(ranked) < 2:
        return part
    if part.npartitions < len(workers):
        part = part.repartition(npartitions=len(workers))
    placed = [client.compute(piece, workers=[workers[i % len(workers)]],
                             allow_other_workers=False)
              for i, piece in enumerate(part.to_delayed())]
    return dd.from_delayed(placed, meta=part.head(0, npartitions=1, compute=False),
                           verify_meta=False)


def matrices(client, train_frame, test_frame, count: int | None = None):
    """XGBoost's training and test matrices, each worker's made of the partitions
    :func:`spread` places on it. The scheduler's work stealing is paused while they are built:
    xgboost.dask's own tasks (its column selections, the pairing of features with labels)
    then stay where their partitions are, also on a busy worker, so each worker trains on
    what was placed there and the same data and seed give the same model at every run."""
    import xgboost.dask as dxgb

    features, label = list(schema.FEATURES), schema.LABEL
    with without_work_stealing(client):
        train_part = spread(client, train_frame, count)
        test_part = spread(client, test_frame, count)
        dtrain = dxgb.DaskQuantileDMatrix(client, train_part[features], train_part[label])
        dtest = dxgb.DaskQuantileDMatrix(client, test_part[features], test_part[label],
                                         ref=dtrain)
    return dtrain, dtest


def train(client, frame, quarters, device: str, *, rounds: int = ROUNDS,
          holdout: str | None = None, params: dict | None = None, progress: bool = False,
          echo=print, nthread: int | None = None, workers: int | None = None) -> TrainResult:
    """Train on the ETL result ``frame`` (persisted), test on a held-out quarter (AUC).

    ``frame``'s partitions are cuDF (on GPU workers: XGBoost builds its matrix on the device)
    or pandas (host memory: XGBoost quantizes them on the workers' CPU cores, ``nthread``
    each, and trains on the GPUs when ``device`` is "gpu"). ``workers``: how many of the
    workers (by XGBoost rank) train; by default :func:`training_workers` of the rows."""
    import dask
    import xgboost
    import xgboost.dask as dxgb

    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be at least 1")
    started = time.perf_counter()  # the matrix's stage: counting and placing rows too
    train_frame, test_frame, what = split(frame, quarters, holdout)
    params = {**PARAMS, **(params or {}), "device": "cuda" if device == "gpu" else "cpu"}
    if nthread is not None:
        params["nthread"] = nthread
    label = schema.LABEL
    counts = dask.compute(train_frame[label].count(), train_frame[label].sum(),
                          test_frame[label].count(), test_frame[label].sum())
    train_rows, train_positives, test_rows, test_positives = (int(c) for c in counts)
    _check_classes("training", train_rows, train_positives, "the data not held out")
    _check_classes("test", test_rows, test_positives, what)
    if workers is None:
        workers = training_workers(len(cluster_workers(client)), train_rows, device)
    callbacks = [round_progress()] if progress else []
    if progress:
        bar = Progress("training rounds", rounds, echo)
        client.subscribe_topic(TOPIC, lambda event: bar.update(event[1]["round"]))
    try:
        with xgboost.config_context(**xgboost_config(client)):
            dtrain, dtest = matrices(client, train_frame, test_frame, workers)
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
        workers=workers,
    )


def batches(plan, device: str, holdout: str | None = None, parquet: list[str] | None = None):
    """(training batches, test batches, what is held out): a ``dask.delayed`` batch per ETL
    partition (``etl.batch``), split as :func:`split` splits the table: the held-out quarter's
    partitions to test, or with a single quarter the last fifth of every partition's rows.
    ``parquet``: each partition's Parquet file, already written by the ETL, read instead of
    the text."""
    import dask

    known = check_holdout(plan.quarters, holdout)
    acquisitions = etl.acquisition_tasks(plan, device)
    single = len(known) < 2 and holdout is None
    test_quarter = None if single else holdout or known[-1]
    make = dask.delayed(etl.batch, pure=False)
    train, test, seen = [], [], set()
    for index, part in enumerate(plan.parts):
        source = parquet[index] if parquet else part
        pair = acquisitions.get(part.quarter)
        first = part.quarter not in seen
        seen.add(part.quarter)
        common = (source, plan.layout, pair, device, plan.names)
        if single:
            train.append(make(*common, "head", TEST_SHARE, True, first))
            test.append(make(*common, "tail", TEST_SHARE, False))
        else:
            (test if part.quarter == test_quarter else train).append(
                make(*common, "all", 0.0, True, first))
    what = (f"the last {TEST_SHARE:.0%} of each partition (one quarter only)" if single
            else f"quarter {test_quarter}")
    return train, test, what


def check_batches(bad_rows: str, what: str, infos: dict) -> None:
    """Before training, on every worker, with every batch's ``etl.BatchInfo``: the bad rows
    under ``bad_rows="error"`` (``read.BadRowsError``), and both classes in the training and
    the test rows (ValueError)."""
    infos = {name: [i for i in batch if i is not None] for name, batch in infos.items()}
    reports = [i.report for name in infos for i in infos[name] if i.report is not None]
    if bad_rows == "error" and any(r.bad_count for r in reports):
        raise read.BadRowsError([row for r in reports for row in r.bad],
                                sum(r.bad_count for r in reports))
    for name, described in (("training", "the data not held out"), ("test", what)):
        batch = infos["train" if name == "training" else "test"]
        _check_classes(name, sum(i.rows for i in batch), sum(i.positives for i in batch),
                       described)


@dataclass
class StreamResult:
    """The streamed training's result, and the ETL's figures from its batches."""

    training: TrainResult
    reports: list  # the ETL tasks' reports (etl.Report), each once
    passes: list[float]  # the slowest worker's seconds of each pass over its batches
    matrices_seconds: float  # building the matrices (every pass), the slowest worker's
    matrix: str  # "in-core" or "external"
    memory: dict = field(default_factory=dict)  # GPU bytes: "matrices", "peak" (see device_memory)


def device_memory(timings: list[dict]) -> dict:
    """The GPU memory the workers' streamed training measured, the largest of any worker:
    ``matrices``, what XGBoost's matrices hold once built (in the device's CUDA pool, where
    XGBoost and RMM share it; else the device's memory in use); ``peak``, the pool's highest
    use since the worker started. Empty on CPUs."""
    out: dict = {}
    for t in timings:
        before, built = t.get("memory before") or {}, t.get("memory with the matrices") or {}
        after = t.get("memory after training") or {}
        if built:
            key = "pool" if built.get("pool") else "used"
            out["matrices"] = max(out.get("matrices", 0), built[key] - before.get(key, 0))
        if after.get("pool_high"):
            out["peak"] = max(out.get("peak", 0), after["pool_high"])
    return out


def stream(client, plan, device: str, *, rounds: int = ROUNDS, holdout: str | None = None,
           params: dict | None = None, progress: bool = False, echo=print,
           workers: int | None = None, bad_rows: str = "error", external: bool = False,
           cache_host_ratio: float | None = None, keep: bool = False, prefetch: int = 1,
           parquet: list[str] | None = None) -> StreamResult:
    """The ETL streamed into XGBoost: each worker makes its partitions one at a time as
    XGBoost reads them into its quantized matrix (``dask_gpu_interop.train_streamed``), then
    trains; no worker holds the feature table. ``external``: XGBoost's external-memory
    matrix, its pages in host memory (``cache_host_ratio`` of them), for a matrix larger than
    a GPU. ``keep``: each batch kept from its first making (where the table fits, as on CPUs,
    whose matrix reads its batches four times). ``prefetch``: partitions made ahead while
    XGBoost reads one. ``workers``: how many train (by rank)."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: must be at least 1")
    train_batches, test_batches, what = batches(plan, device, holdout, parquet)
    if not train_batches or not test_batches:
        raise ValueError(f"nothing to {'train on' if not train_batches else 'test on'}: no "
                         f"partition in {'the data not held out' if not train_batches else what}")
    params = {**PARAMS, **(params or {}), "device": "cuda" if device == "gpu" else "cpu"}
    callbacks = [round_progress] if progress else []  # made on the workers
    if progress:
        bar = Progress("training rounds", rounds, echo)
        client.subscribe_topic(TOPIC, lambda event: bar.update(event[1]["round"]))
    from functools import partial

    try:
        out = train_streamed(client, params, train_batches, label=schema.LABEL,
                             features=list(schema.FEATURES), evals={"test": test_batches},
                             num_boost_round=rounds, workers=workers, external_memory=external,
                             cache_host_ratio=cache_host_ratio, callbacks=callbacks,
                             check=partial(check_batches, bad_rows, what), keep_batches=keep,
                             prefetch=prefetch)
    finally:
        if progress:
            client.unsubscribe_topic(TOPIC)
    slowest = max(out.timings, key=lambda t: t["matrices"])
    infos = [i for name in out.infos for i in out.infos[name] if i is not None]
    trained = TrainResult(
        booster=out.booster,
        auc=float(out.history["test"]["auc"][-1]),
        train_auc=float(out.history["train"]["auc"][-1]),
        holdout=what,
        train_rows=out.rows["train"],
        test_rows=out.rows["test"],
        dmatrix_seconds=slowest["matrices"],
        train_seconds=max(t["training"] for t in out.timings),
        workers=len(out.workers),
        matrix=out.matrix,
        passes=tuple(slowest["passes"]),
        memory=device_memory(out.timings),
    )
    return StreamResult(trained, [i.report for i in infos if i.report is not None],
                        slowest["passes"], slowest["matrices"], out.matrix,
                        trained.memory)

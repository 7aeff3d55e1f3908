"""XGBoost trained on a dask collection that is never held whole: the client's call and each
worker's task.

Each worker trains in one task: it builds its share of XGBoost's quantized matrix from its
batches, made one at a time as XGBoost asks for them (:mod:`.iterator`), joins the other
workers through XGBoost's own communicator (its tracker runs in the scheduler, as
``xgboost.dask`` runs it), and trains. The workers' memory holds the quantized matrix and
the batches in flight, not the collection; where even the matrix does not fit a GPU,
XGBoost's external-memory matrix keeps its pages in host memory (``external_memory=True``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from .batches import BatchGraphs, LocalBatches, batch_graphs, spread_over

TRAIN = "train"
TASK = "train_streamed"  # the workers' tasks, and their ids with XGBoost's tracker (by rank)
TRACKER_TIMEOUT = 600  # seconds for every worker's task to join the tracker


@dataclass
class StreamedTraining:
    """What :func:`train_streamed` returns.

    Parameters
    ----------
    booster : xgboost.Booster
        The model.
    history : dict
        Each matrix's metrics by round (``"train"`` and each evaluation's name), as
        ``xgboost.train``'s ``evals_result``.
    infos : dict
        For ``"train"`` and each evaluation, the info each batch reported in its first making,
        in batch order (``None`` for a batch that is a plain frame, or a run of a cut batch
        but its first).
    rows : dict
        The rows of each matrix.
    workers : list of str
        The workers that trained, by rank.
    matrix : str
        ``"in-core"`` (``QuantileDMatrix``) or ``"external"`` (``ExtMemQuantileDMatrix``).
    timings : list of dict
        Per worker, by rank: the seconds of each pass over its training batches (``passes``),
        of building the matrices (``matrices``) and of the training (``training``), the
        batches it made (``batches``), and on GPUs the device's memory in use before the
        matrices, with them and after training (``memory ...``: ``used``, every allocator's;
        ``pool`` and ``pool_high``, the default CUDA pool's, where RMM's async mode and
        XGBoost allocate).

    Examples
    --------
    >>> out = train_streamed(client, params, frame, label="y")  # doctest: +SKIP
    >>> out.booster.save_model("model.json")  # doctest: +SKIP
    >>> [t["passes"] for t in out.timings]  # doctest: +SKIP
    [[4.1, 3.9]]
    """

    booster: object
    history: dict
    infos: dict[str, list]
    rows: dict[str, int]
    workers: list[str]
    matrix: str
    timings: list[dict] = field(default_factory=list)


def _ranked(client, workers) -> list[str]:
    """The workers that may train, in rank order: ``workers`` as given (addresses), the first
    ``workers`` of the cluster's (an int), or all of them; the cluster's in the order of their
    names, then addresses, as ``xgboost.dask`` ranks them."""
    from .._client import workers_of

    known = workers_of(client)
    ranked = sorted(known, key=lambda a: (str(known[a].get("name")), a))
    if workers is None:
        chosen = ranked
    elif isinstance(workers, int) and not isinstance(workers, bool):
        if workers < 1:
            raise ValueError(f"workers={workers}: give at least 1")
        chosen = ranked[:workers]
    else:
        chosen = list(workers)
        unknown = [w for w in chosen if w not in known]
        if unknown:
            raise ValueError(f"workers: {', '.join(map(str, unknown))} not in the cluster "
                             f"(its workers: {', '.join(ranked) or 'none'})")
    if not chosen:
        raise ValueError("the cluster has no worker to train on: start workers first")
    return chosen


def _start_tracker():
    """A function to run on the scheduler that starts XGBoost's tracker for ``n`` workers and
    returns their arguments. Made here, it travels by value: the scheduler's environment need
    not have this package, only XGBoost."""
    timeout = TRACKER_TIMEOUT

    def start(n: int, host: str | None, dask_scheduler=None) -> dict:
        import threading

        from xgboost.tracker import RabitTracker

        tracker = RabitTracker(n_workers=n, host_ip=host, sortby="task", timeout=timeout)
        tracker.start()
        # ends when the workers are done, or after the timeout if one never joins
        threading.Thread(target=tracker.wait_for, daemon=True,
                         name="xgboost-tracker").start()
        return tracker.worker_args()

    return start


def _tracker_host(client) -> str | None:
    from distributed.comm import get_address_host

    try:
        return get_address_host(client.scheduler.address).strip("/:")
    except Exception:  # an address without a host (inproc): XGBoost guesses one
        return None


def _check_params(params: dict, external: bool) -> None:
    if not isinstance(params, dict):
        raise TypeError(f"params: a dict of XGBoost parameters, not a {type(params).__name__}")
    method = params.get("tree_method", "hist")
    if method != "hist":
        raise ValueError(f"tree_method={method!r}: training from batches builds XGBoost's "
                         "quantized matrix, which needs tree_method='hist' (the default)")
    if external and params.get("grow_policy") == "lossguide":
        raise ValueError("grow_policy='lossguide' reads XGBoost's external-memory matrix once "
                         "per leaf: use the default, grow_policy='depthwise'")


def train_streamed(client, params: dict, data, *, label: str, evals: dict | None = None,
                   num_boost_round: int = 10, features: list[str] | None = None,
                   workers=None, external_memory: bool = False,
                   cache_host_ratio: float | None = None, max_bin: int | None = None,
                   callbacks=None, check=None, prefetch: int = 1,
                   keep_batches: bool = False) -> StreamedTraining:
    """Train XGBoost on a dask collection whose partitions are made on the workers one at a
    time, as XGBoost reads them, and never held together.

    ``xgboost.dask`` trains on a persisted collection: every partition in the workers' memory
    before XGBoost reads the first. Here each partition (a batch) is computed on the worker
    that trains on it when XGBoost asks for it, once to sketch its quantiles and once to
    quantize it, and dropped once read: a worker holds XGBoost's quantized matrix and the
    batch being read (and the next, made meanwhile), whatever the size of the collection. A
    result several of a worker's batches share (a table they all join) is made once there.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster.
    params : dict
        XGBoost's parameters (``tree_method`` "hist"; ``device`` "cuda" on GPU workers).
        ``nthread`` defaults to each worker's threads.
    data : dask DataFrame or list of dask.delayed
        The training data, lazy: each partition (or delayed object) is a batch computing to a
        DataFrame (pandas, or cuDF on GPUs) holding the features and the label, or to a
        ``(DataFrame, info)`` pair whose ``info`` comes back in the result's ``infos``.
    label : str
        The label's column.
    evals : dict, optional
        Name -> data of the same kind: evaluation matrices, quantized with the training
        matrix's cuts; their metrics are in the result's ``history``. An evaluation of fewer
        batches than the workers that train has its batches cut into runs of rows, one for
        each worker (each made whole there, its info kept with the first run).
    num_boost_round : int
        Boosting rounds.
    features : list of str, optional
        The feature columns (default: every column but the label).
    workers : int or list of str, optional
        The workers that train: all by default; the first N by rank; or these addresses, in
        rank order. Batch ``i`` is made on worker ``i % N``, so that the same data and
        parameters give the same model at every run on as many workers. No worker trains
        without a training batch.
    external_memory : bool
        Build XGBoost's external-memory matrix (``ExtMemQuantileDMatrix``), its pages cached in
        host memory, where even the quantized matrix does not fit a GPU (or a worker's memory).
    cache_host_ratio : float, optional
        With ``external_memory`` on GPUs, the share of the pages kept in host memory (the rest
        stays on the GPU); by default XGBoost's own estimate from the device's memory.
    max_bin : int, optional
        XGBoost's bins per feature (its default where not given, or ``params["max_bin"]``).
    callbacks : list, optional
        ``xgboost.callback.TrainingCallback`` objects, or functions that make one on the
        worker (then the client need not import XGBoost), run on every worker.
    check : callable, optional
        ``check(infos)``, called on every worker once the matrices are built and before
        training, with every batch's info (``{"train": [...], name: [...]}``, in batch order):
        what it raises stops the training on every worker and is raised here.
    prefetch : int
        Batches made ahead, each in a thread of its own, while XGBoost reads the current one
        (``prefetch + 1`` batches in flight; 0: each made when XGBoost asks for it). On GPU
        workers, one batch's host work then overlaps another's kernels.
    keep_batches : bool
        Keep each batch in the worker's memory from its first making, for XGBoost's later
        passes, instead of making it again: faster where the batches fit (XGBoost's CPU
        matrix reads its batches four times, its GPU matrix twice), and holding them all.

    Returns
    -------
    StreamedTraining
        The booster, its evaluation history, the batches' infos and rows, the workers and
        where the time went.

    Raises
    ------
    TypeError
        ``client`` is not a ``distributed.Client``, or ``data`` is not a lazy collection.
    ValueError
        A parameter cannot be used here (said before any work).
    NotLazyError
        ``data`` is persisted already: train it with ``xgboost.dask``.

    Examples
    --------
    >>> import dask.dataframe as dd
    >>> from dask_gpu_interop import train_streamed
    >>> frame = dd.read_parquet("features/")  # doctest: +SKIP
    >>> out = train_streamed(client, {"device": "cuda"}, frame, label="y")  # doctest: +SKIP
    >>> out.booster.predict(...)  # doctest: +SKIP
    """
    from .._client import require_client

    require_client(client, "train_streamed")
    _check_params(params, external_memory)
    if isinstance(num_boost_round, bool) or int(num_boost_round) != num_boost_round \
            or num_boost_round < 1:
        raise ValueError(f"num_boost_round={num_boost_round!r}: give a whole number, at least 1")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch={prefetch!r}: give the batches to make ahead, 0 or more")
    if cache_host_ratio is not None and not 0 <= cache_host_ratio <= 1:
        raise ValueError(f"cache_host_ratio={cache_host_ratio}: a share between 0 and 1")
    evals = dict(evals or {})
    if TRAIN in evals:
        raise ValueError(f"evals: {TRAIN!r} names the training matrix; name the others else")
    train = batch_graphs(data)
    ranked = _ranked(client, workers)[:len(train.keys)]
    n = len(ranked)
    matrices = {TRAIN: train,
                **{name: batch_graphs(spread_over(d, n)) for name, d in evals.items()}}
    specs = [{name: graphs.subset(range(rank, len(graphs.keys), n)).dumps()
              for name, graphs in matrices.items()} for rank in range(n)]
    options = {"label": label, "features": features, "external": bool(external_memory),
               "cache_host_ratio": cache_host_ratio, "max_bin": max_bin,
               "prefetch": int(prefetch), "keep": bool(keep_batches),
               "rounds": int(num_boost_round),
               "callbacks": list(callbacks or []), "check": check, "names": list(matrices)}
    return _run(client, params, ranked, specs, options, matrices)


def _run(client, params, ranked, specs, options, matrices: dict[str, BatchGraphs]):
    import cloudpickle
    from distributed import MultiLock

    # opaque bytes, unpickled in the task's thread: a callback's class may need XGBoost, which
    # the worker's event loop must not import (another thread of the worker may be doing so)
    packed = cloudpickle.dumps(options)
    host = _tracker_host(client)
    with MultiLock(ranked, client):  # as xgboost.dask: one training at a time on a worker
        args = client.run_on_scheduler(_start_tracker(), len(ranked), host)
        futures = [client.submit(_train_on_worker, spec, args, rank, params, packed,
                                 workers=[worker], allow_other_workers=False, pure=False,
                                 key=f"{TASK}-{rank}-{os.urandom(4).hex()}")
                   for rank, (worker, spec) in enumerate(zip(ranked, specs, strict=True))]
        try:
            _raise_the_first_cause(futures)
            results = client.gather(futures)
        except BaseException:
            client.cancel(futures)
            raise
    infos, rows = {}, {}
    for name, graphs in matrices.items():
        count = len(graphs.keys)
        infos[name], rows[name] = [None] * count, 0
        for rank, result in enumerate(results):
            for local, index in enumerate(range(rank, count, len(ranked))):
                infos[name][index] = result["infos"][name][local]
            rows[name] += sum(result["rows"][name])
    import pickle

    booster = pickle.loads(results[0]["booster"])
    return StreamedTraining(booster=booster, history=results[0]["history"], infos=infos,
                            rows=rows, workers=list(ranked),
                            matrix="external" if options["external"] else "in-core",
                            timings=[r["timings"] for r in results])


def _broken_communicator(error: BaseException) -> bool:
    """Whether ``error`` is XGBoost's communicator failing because another worker left it."""
    text = str(error)
    return type(error).__name__ == "XGBoostError" and any(
        word in text for word in ("allreduce", "allgather", "broadcast", "Socket", "socket"))


def _raise_the_first_cause(futures) -> None:
    """Once every worker's task has ended: where one failed, raise what failed there rather
    than the others' broken communicator (a worker that fails leaves XGBoost's communicator,
    and the others' collective calls fail after it, often first to reach the client)."""
    from distributed import wait

    wait(futures)
    errors = [(f.exception(), f.traceback()) for f in futures if f.status == "error"]
    if not errors:
        return
    error, traceback = next(((e, t) for e, t in errors if not _broken_communicator(e)),
                            errors[0])
    raise error.with_traceback(traceback)


def _gather_infos(names, iterators) -> dict:
    """Every worker's batch infos, in batch order, on every worker (XGBoost's communicator)."""
    from xgboost import collective

    world = collective.get_world_size()
    mine = {name: iterators[name].infos if iterators.get(name) else [] for name in names}
    everyone = [collective.broadcast(mine if collective.get_rank() == root else None, root)
                for root in range(world)]
    out = {}
    for name in names:
        count = sum(len(e[name]) for e in everyone)
        ordered = [None] * count
        for rank, e in enumerate(everyone):
            for local, value in enumerate(e[name]):
                ordered[rank + local * world] = value
        out[name] = ordered
    return out


def _matrix(iterator, options, ref=None, gpu=False):
    import xgboost

    kwargs = {"max_bin": options["max_bin"]} if options["max_bin"] else {}
    if ref is not None:
        kwargs["ref"] = ref
    if options["external"]:
        if gpu and options["cache_host_ratio"] is not None:
            kwargs["cache_host_ratio"] = options["cache_host_ratio"]
        return xgboost.ExtMemQuantileDMatrix(iterator, **kwargs)
    return xgboost.QuantileDMatrix(iterator, **kwargs)


def _empty(iterator_gpu: bool, n_features: int, ref):
    """A matrix of no rows (an evaluation with no batch on this worker)."""
    import numpy as np
    import xgboost

    if iterator_gpu:
        import cupy as np  # noqa: F811 -- the same call on the GPU
    return xgboost.QuantileDMatrix(np.empty((0, n_features), dtype="float32"), ref=ref)


def _callbacks(given: list) -> list:
    """The training callbacks: those given, and those made by the functions given."""
    import xgboost

    return [c if isinstance(c, xgboost.callback.TrainingCallback) else c() for c in given]


def _device_memory() -> dict:
    """This worker's GPU memory in use now (``used``: the device's, every allocator's), and
    its default CUDA pool's in use now and at its highest (``pool``, ``pool_high``: RMM's
    async mode and XGBoost's together); empty where it cannot be read."""
    try:
        from cuda.bindings import runtime

        from ..memory.stack import async_pool_numbers

        _, device = runtime.cudaGetDevice()
        _, free, total = runtime.cudaMemGetInfo()
        _, pool = runtime.cudaDeviceGetDefaultMemPool(device)
        numbers = async_pool_numbers(pool)
        return {"used": int(total - free), "pool": numbers.get("used_bytes", 0),
                "pool_high": numbers.get("used_high_bytes", 0)}
    except Exception:  # no CUDA here, or an older binding: the timings go without it
        return {}


def _train_on_worker(spec: dict, coll_args: dict, rank: int, params: dict, packed: bytes):
    """One worker's part (see the module's description); rank 0 returns the model."""
    import pickle

    import xgboost
    from distributed import get_worker
    from xgboost import collective

    from ..memory.xgboost_pool import xgboost_config
    from .iterator import make_iterator

    options = pickle.loads(packed)
    worker = get_worker()
    params = {"nthread": worker.state.nthreads, **params}
    gpu = str(params.get("device", "cpu")).startswith("cuda")
    names = options["names"]
    cache = tempfile.mkdtemp(prefix="xgboost-cache-", dir=worker.local_directory) \
        if options["external"] else None
    timings: dict = {}
    iterators: dict = {}
    try:
        with collective.CommunicatorContext(**coll_args, dmlc_task_id=f"{TASK}-{rank:06d}"), \
                xgboost.config_context(**xgboost_config(None)):
            started = time.perf_counter()
            if gpu:
                timings["memory before"] = _device_memory()
            matrices = {}
            for name in names:
                batches = LocalBatches(spec[name])
                if not len(batches):
                    continue
                prefix = os.path.join(cache, name) if cache else None
                iterators[name] = make_iterator(batches, options["label"], options["features"],
                                                gpu=gpu, prefetch=options["prefetch"],
                                                keep=options["keep"], cache_prefix=prefix)
                ref = matrices.get(TRAIN)
                matrices[name] = _matrix(iterators[name], options, ref=ref, gpu=gpu)
                iterators[name].close()
                batches.release()
            train = matrices[TRAIN]
            for name in names:
                if name not in matrices:
                    matrices[name] = _empty(gpu, train.num_col(), train)
            timings["matrices"] = time.perf_counter() - started
            if gpu:
                timings["memory with the matrices"] = _device_memory()
            timings["passes"] = iterators[TRAIN].passes
            timings["batches"] = sum(len(it.rows) for it in iterators.values())
            infos = _gather_infos(names, iterators)
            if options["check"] is not None:
                options["check"](infos)
            history: dict = {}
            training = time.perf_counter()
            booster = xgboost.train(params, train, num_boost_round=options["rounds"],
                                    evals=[(matrices[name], name) for name in names],
                                    evals_result=history, verbose_eval=False,
                                    callbacks=_callbacks(options["callbacks"]) or None)
            timings["training"] = time.perf_counter() - training
            if gpu:
                timings["memory after training"] = _device_memory()
    finally:
        for iterator in iterators.values():
            iterator.close()
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    return {
        # pickled: the model and its training configuration, as xgboost.dask returns it
        "booster": pickle.dumps(booster) if rank == 0 else None,
        "history": history,
        "infos": {name: iterators[name].infos if name in iterators else [] for name in names},
        "rows": {name: iterators[name].rows if name in iterators else [] for name in names},
        "timings": timings,
    }

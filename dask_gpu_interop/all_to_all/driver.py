"""An all-to-all for dask DataFrames whose partitions stay on their workers' GPUs.

    shuffled = dask_gpu_interop.shuffle(frame, "key")              # a dask DataFrame
    joined = dask_gpu_interop.shuffle_merge(left, right, on="key")

dask's task shuffle moves one piece per pair of input and output partitions, each a transfer
of its own; its p2p shuffle turns every partition into Arrow tables in host memory. Here the
data crosses between workers once per pair of workers, in one batch, over distributed's own
comms (device to device over UCX with the "cuda" serializers):

1. the input is persisted, and the scheduler says (in one round trip) which workers there
   are, where each partition is and its size;
2. ``gpu-shuffle-send``: one task on each worker holding input partitions concatenates them
   and orders their rows by output partition (a hash of the key columns: libcudf's
   partitioner on cuDF, dask's own on pandas, :mod:`.tasks`), then sends each destination
   worker the slice bound for its output partitions, to all at once, into that worker's
   inbox (:mod:`.inbox`): the transfers start as each split ends, with no task or scheduler
   round trip between;
3. ``gpu-shuffle-output``: one task per output partition, on its destination worker, which
   depends on every send (a receipt of a few bytes each): once they all ended, every batch is
   in its worker's inbox, and it concatenates its rows from them. No output partition runs,
   takes a thread or asks anything while batches travel; the client watches the sends beside
   the outputs, so that a failed send is named as the step that failed.

With ``gpu-interop.shuffle.exchange: batches`` in dask config, the batches are tasks of
their own that dask schedules and moves like any other data, in three steps:
``gpu-shuffle-split`` (the split above), ``gpu-shuffle-batch`` (on each source worker, one
task per destination worker takes the slice bound for that worker's output partitions, a
view, nothing copied), and ``gpu-shuffle-output`` (each output partition concatenated from
every batch bound for its worker, which dask fetches once per worker and frees once that
worker's output partitions are made).

A worker whose share is large beside its memory (:data:`ONE_STEP_PART`; or as
``gpu-interop.shuffle.step-bytes`` in dask config says) always takes the batch tasks, which
dask's memory limits and spilling see, and goes through the split and batch steps a part at a
time: a split per group of its input partitions, and a batch per split and destination output
group, a copy run before the next split (so that each split and its inputs are freed as soon
as its batches exist); an output group's partitions are made from its batches alone. Each
piece is then a key of its own, which a worker's spilling can move to host memory while it
waits.

Every task is pinned to its worker while the shuffle runs (a restriction that work stealing
cannot lift, so that nothing crosses between workers beyond the batches); once it ends the
pins are lifted, so that an output partition lost later with its worker is computed again
elsewhere from its lineage: with the batch tasks as any task is, with the direct exchange by
its sends run again, which then hold their splits for the output partitions made again to
pull their rows from (:mod:`.inbox`). When a worker of the plan leaves the cluster
mid-shuffle, the tasks pinned to it could never run: the shuffle's tasks are cancelled and it
starts again on the workers present (once one is there again, where every worker left), from
the input (what was lost with the worker is computed again from its lineage), up to
``ATTEMPTS`` times; every task is a pure function of its inputs, so the result is the same,
every row once. A split's memory lives on in its batches (slices of it) until every
destination has made its output partitions from them; what is received is freed then, and
each output partition is a frame of its own. On GPU workers dask-cuda's spilling moves to
host memory what does not fit.

Nothing waits without a bound: where none of the shuffle's tasks ends for
``gpu-interop.shuffle.timeout`` (dask config, 5 minutes by default), or a destination does not
take a batch within it, the shuffle ends in a ShuffleError naming what was still running. A
shuffle whose client goes away leaves nothing behind: the scheduler forgets its tasks, and
each worker's inbox lets go of its batches within :data:`.inbox.EXPIRY_SECONDS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass, field, replace

from . import tasks
from .checks import _client, hash_casts, key_columns, output_partitions
from .graph import PREFIX, _lineage, build_direct_graph, build_graph, send_keys
from .plan import Plan, _step, exchange_setting, step_setting, timeout_setting

logger = logging.getLogger("dask_gpu_interop.all_to_all")

#: Times a shuffle starts again when workers of its plan leave the cluster before it ends.
ATTEMPTS = 3
#: Seconds between two looks at the cluster's workers while a shuffle runs.
POLL_SECONDS = 0.5


class ShuffleError(RuntimeError):
    """The all-to-all could not finish: one of its tasks failed, or data it needed was lost
    with a worker and could not be computed again. The message names the task and the cause,
    which is chained (``err.__cause__``). A worker lost during a shuffle is not an error by
    itself: the shuffle starts again on the workers present.

    Examples
    --------
    >>> import dask_gpu_interop
    >>> try:  # doctest: +SKIP
    ...     shuffled = dask_gpu_interop.shuffle(frame, "key")
    ... except dask_gpu_interop.ShuffleError as err:
    ...     print(err)
    """


@dataclass(frozen=True)
class ShuffleStats:
    """What one :func:`shuffle` did: its partitions, workers and time, and the bytes that
    crossed between workers. ``str(stats)`` says it in one line, as the log does.

    Parameters
    ----------
    npartitions_in, npartitions_out : int
        Partitions of the input and of the output.
    workers : tuple of str
        The workers the output partitions were placed on, in order: output partition ``j``
        went to ``workers[j * len(workers) // npartitions_out]``.
    seconds : float
        From the input in memory to every output partition in memory.
    output_bytes : int
        The output partitions' size, as dask measures it (``sizeof``).
    crossed : dict
        ``{(source, destination): bytes}``: what the shuffle's tasks fetched from other
        workers, as the destination workers' transfer logs record it. Data that stayed on its
        worker is not in it.

    Examples
    --------
    >>> from dask_gpu_interop import ShuffleStats
    >>> stats = ShuffleStats(npartitions_in=2, npartitions_out=2, workers=("a", "b"),
    ...                      seconds=0.5, output_bytes=4096, crossed={("a", "b"): 1024,
    ...                                                               ("b", "a"): 1024})
    >>> stats.crossing_bytes
    2048
    >>> print(stats)
    shuffled 2 partitions into 2 on 2 workers in 0.500 s: 2.00 kiB crossed between workers (50% of the output), output 4.00 kiB
    """

    npartitions_in: int
    npartitions_out: int
    workers: tuple[str, ...]
    seconds: float
    output_bytes: int
    crossed: dict = field(default_factory=dict)

    @property
    def crossing_bytes(self) -> int:
        """Bytes that crossed between workers, every pair together."""
        return sum(self.crossed.values())

    def __str__(self) -> str:
        from dask.utils import format_bytes

        share = (f" ({self.crossing_bytes / self.output_bytes:.0%} of the output)"
                 if self.output_bytes else "")
        return (f"shuffled {self.npartitions_in} partitions into {self.npartitions_out} on "
                f"{len(self.workers)} worker{'s' if len(self.workers) != 1 else ''} in "
                f"{self.seconds:.3f} s: {format_bytes(self.crossing_bytes)} crossed between "
                f"workers{share}, output {format_bytes(self.output_bytes)}")


async def _unpin(client, keys: list) -> None:
    """Lift the shuffle's pins once it ended (the scheduler's ``set_restrictions``): a lost
    output partition is then computed again wherever there is a worker, where a pin to a
    worker gone would leave it waiting for that worker forever. With the batch tasks it is
    made again from its lineage; with the direct exchange it fails in one line (its batches
    cannot be sent again)."""
    try:
        await client.scheduler.set_restrictions(worker={key: None for key in keys})
    except Exception:  # noqa: BLE001 - a cluster going away has nothing left to compute
        logger.debug("could not lift the pins of %d shuffle keys", len(keys), exc_info=True)


#: Clients (by id and scheduler address) that registered the direct exchange's inbox plugin:
#: once per client and scheduler, not at every shuffle (the scheduler gives it to workers
#: that join later; registering it again is refused, as it is idempotent).
_INBOX_ON: set = set()


def _drop_inboxes(client, token: str) -> None:
    """The shuffle ``token``'s batches out of every worker's inbox (it stopped before its
    output partitions took them)."""
    from . import inbox

    try:
        client.run(inbox.drop, token, on_error="ignore")
    except Exception:  # noqa: BLE001 - a cluster going away has nothing left to drop
        logger.debug("could not empty the inboxes of shuffle %s", token, exc_info=True)


def _register_inbox(client) -> None:
    from . import inbox

    key = (client.id, client.scheduler.address)
    if key not in _INBOX_ON:
        client.register_plugin(inbox.ShuffleInbox(), name=inbox.NAME)
        _INBOX_ON.add(key)


def _cluster_state(client, futures) -> tuple[dict, dict, tuple[int, ...]]:
    """``(nthreads, held, sizes)``: each worker's threads, the workers holding each of
    ``futures`` (by key), and each one's bytes, as the scheduler knows them, asked at once
    (one round trip instead of three). ``sizes`` are 0 for all where the scheduler does not
    know one (a key it is forgetting as the shuffle starts again): the plan takes one step."""
    import asyncio

    keys = list({future.key: None for future in futures})

    async def ask():
        return await asyncio.gather(client.scheduler.ncores(),
                                    client.scheduler.who_has(keys=keys),
                                    client.scheduler.nbytes(keys=keys, summary=False),
                                    return_exceptions=True)  # fmt: skip

    nthreads, held, known = client.sync(ask)
    for answer in (nthreads, held):
        if isinstance(answer, BaseException):
            raise answer
    if isinstance(known, KeyError):
        return nthreads, held, (0,) * len(futures)
    if isinstance(known, BaseException):
        raise known
    return nthreads, held, tuple(int(known.get(f.key) or 0) for f in futures)


# --------------------------------------------------------------------------- running it


def _persisted_partitions(frame) -> list | None:
    """A persisted frame's partitions: the futures its graph holds, in order, when every one
    is in memory; else None. Taken from the graph, they cost no round trip to the scheduler
    (computing the frame's keys again would run a task per partition to alias each)."""
    if type(getattr(frame, "expr", None)).__name__ != "FromGraph":  # not persisted
        return None
    from distributed import Future

    graph = dict(frame.__dask_graph__())
    futures = []
    for key in frame.__dask_keys__():
        value = graph.get(key)
        for _ in range(len(graph)):  # follow aliases (each depends on one key) to a future
            if isinstance(value, Future) or len(getattr(value, "dependencies", ())) != 1:
                break
            value = graph.get(next(iter(value.dependencies)))
        if not isinstance(value, Future) or value.status != "finished":
            return None
        futures.append(value)
    return futures


#: What a shuffle on a cluster without workers says.
NO_WORKER = "shuffle: no worker is connected to the cluster; start workers first"


#: What a shuffle of a frame persisted with another client says.
FOREIGN = ("the frame was persisted by another client than the shuffle's: pass that one "
           "(client=...), or persist the frame with this one")


def _foreign_futures(frame, client) -> bool:
    """Whether ``frame``'s graph holds futures of a client other than ``client``."""
    from distributed import Future

    return any(isinstance(value, Future) and value.client is not client
               for value in dict(frame.__dask_graph__()).values())  # fmt: skip


def _input_partitions(client, frame) -> list:
    """The frame's partitions as futures, in order, once they are in memory (a persisted
    frame's as they are; else computed, where the cluster has workers); an input that failed
    raises its own error, one that cannot be made again (lost with a worker, without lineage)
    a ShuffleError."""
    from concurrent.futures import CancelledError

    from distributed import wait

    persisted = _persisted_partitions(frame)
    if persisted is not None:
        if any(f.client is not client for f in persisted):
            raise ValueError(FOREIGN)
        return persisted
    if not client.nthreads():  # computing would wait for workers forever
        raise ValueError(NO_WORKER)
    futures = client.compute(frame.to_delayed())
    try:
        wait(futures)
    except CancelledError:  # distributed says it in many lines: ours follows, in one
        pass
    for i, future in enumerate(futures):
        if future.status == "cancelled" and _foreign_futures(frame, client):
            raise ValueError(FOREIGN)
        if future.status == "cancelled":  # what it needed is gone: no lineage to make it again
            raise ShuffleError(
                f"the shuffle's input partition {i} was cancelled: data it needed was lost "
                "with a worker and cannot be computed again (scattered data, for one): make "
                "the input again and shuffle it")
        if future.status != "finished":
            future.result()  # the input's own error
    return futures


def _owners(held: dict, futures, workers: tuple[str, ...]) -> tuple[str, ...]:
    """The worker of ``workers`` holding each of ``futures`` (the first by address where
    several do, as ``held`` says by key). One held nowhere among them (lost with a worker
    since, or held by one that just left) gets a worker in turn: the scheduler computes or
    fetches it for its split."""
    present = set(workers)
    owners = []
    for future in futures:
        where = sorted(a for a in held.get(future.key) or () if a in present)
        owners.append(where[0] if where else workers[len(owners) % len(workers)])
    return tuple(owners)


class _WorkersLeft(Exception):
    """Workers of the plan left the cluster before the shuffle ended: its tasks pinned to
    them cannot run."""


def _wait(futures, client=None, workers=(), timeout: float | None = None) -> None:
    """Until every one of ``futures`` (the output partitions, and the sends, watched so that
    a failed one is named) is in memory; ShuffleError for the first that failed (a send
    before the output partitions that depend on it), or else the first that is not in
    memory, as soon as one failed, or where none of them ended for ``timeout`` seconds (None:
    no limit); _WorkersLeft as soon as one of ``workers`` is no longer in ``client``'s
    cluster."""
    from concurrent.futures import CancelledError

    from dask.utils import key_split
    from distributed import wait

    ended, since = -1, time.monotonic()
    try:
        while True:
            try:
                wait(futures, timeout=POLL_SECONDS if workers or timeout else None)
                break
            except TimeoutError:
                gone = set(workers) - set(client.nthreads()) if workers else set()
                if gone:
                    raise _WorkersLeft(", ".join(sorted(gone))) from None
                if any(future.status == "error" for future in futures):
                    break  # the others may wait for it forever
                done = sum(future.status != "pending" for future in futures)
                if done != ended:
                    ended, since = done, time.monotonic()
                elif timeout is not None and time.monotonic() - since > timeout:
                    raise ShuffleError(_stalled(futures, timeout)) from None
    except CancelledError:  # distributed says it in many lines: ours follows, in one
        pass
    first_sends = sorted(futures, key=lambda f: key_split(f.key) == f"{PREFIX}-output")
    for future in first_sends:
        if future.status == "error":
            cause = future.exception()
            where = (f"output partition {future.key[1]}"
                     if key_split(future.key) == f"{PREFIX}-output"
                     else f"source worker {future.key[1]}")  # fmt: skip
            raise ShuffleError(
                f"the shuffle's {_failed_step(future.traceback())} task failed (for {where}): "
                f"{type(cause).__name__}: {cause}") from cause
    for future in futures:
        if future.status == "finished":
            continue
        raise ShuffleError(
            f"the shuffle's output partition {future.key[1]} was {future.status}: data it "
            "needed was lost with a worker and cannot be computed again (scattered data, for "
            "one): make the input again and shuffle it")


def _stalled(futures, timeout: float) -> str:
    """What a shuffle none of whose tasks ended for ``timeout`` seconds says: what is left."""
    from dask.utils import key_split

    left: dict = {}
    for future in futures:
        if future.status == "pending":
            step = key_split(future.key)
            left[step] = left.get(step, 0) + 1
    waiting = ", ".join(f"{count} {step}" for step, count in sorted(left.items()))
    return (f"the shuffle made no progress for {timeout:g} s (still running: {waiting}; a "
            "worker may be stuck or a transfer never ends): set gpu-interop.shuffle.timeout in "
            "dask config to wait longer")


def _workers_back(client, timeout: float | None) -> None:
    """Until the cluster has a worker again, where every worker left mid-shuffle (they are
    usually started again within seconds); ShuffleError in one line after ``timeout``."""
    if client.nthreads():
        return
    logger.warning("every worker left mid-shuffle: waiting for one to join")
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise ShuffleError(f"every worker left the cluster mid-shuffle and none joined within "
                           f"{timeout:g} s (gpu-interop.shuffle.timeout): start workers and "
                           "shuffle again") from None


def _failed_step(traceback) -> str:
    """The task prefix of the step that raised, from the error's traceback: the outermost of
    its frames in the tasks' module is the task's own function."""
    import traceback as tb

    steps = {("tasks.py", "split"): "split", ("tasks.py", "batch"): "batch",
             ("tasks.py", "output"): "output", ("inbox.py", "split_and_send"): "send",
             ("inbox.py", "output_from_inbox"): "output"}
    package = os.path.basename(os.path.dirname(tasks.__file__))
    for frame in tb.extract_tb(traceback) if traceback is not None else ():
        folder, name = os.path.split(frame.filename)
        if os.path.basename(folder) != package:
            continue
        step = steps.get((name, frame.name))
        if step:
            return f"{PREFIX}-{step}"
    return PREFIX


def received(token: str, dask_worker=None) -> list[tuple[str, int]]:
    """On a worker: ``(source, bytes)`` of each transfer of the shuffle ``token``'s keys into
    it, from its transfer log, and of each batch its inbox took (the direct exchange)."""
    inbox = getattr(dask_worker, "plugins", {}).get("gpu-shuffle-inbox")
    out = list(inbox.received(token)) if inbox is not None else []
    for entry in list(getattr(dask_worker, "transfer_incoming_log", ())):
        nbytes = sum(int(size or 0) for key, size in entry.get("keys", {}).items()
                     if token in str(key[0] if isinstance(key, tuple) else key))
        if nbytes:
            out.append((entry.get("who"), nbytes))
    return out


def _stats(client, plan: Plan, npartitions_in: int, futures: list, token: str,
           seconds: float) -> ShuffleStats:
    crossed: dict = {}
    for destination, transfers in client.run(received, token, on_error="ignore").items():
        for source, nbytes in transfers:
            pair = (source, destination)
            crossed[pair] = crossed.get(pair, 0) + nbytes
    sizes = client.nbytes(keys=[f.key for f in futures], summary=False)
    return ShuffleStats(npartitions_in=npartitions_in, npartitions_out=plan.npartitions,
                        workers=plan.workers, seconds=seconds,
                        output_bytes=int(sum(sizes.values())), crossed=crossed)  # fmt: skip


def shuffle(frame, on, npartitions=None, *, ignore_index=False, client=None,
            return_stats=False):
    """Hash-partition a dask DataFrame on its key columns, the partitions moving between
    workers device to device in one batch per pair of workers.

    Every key is in exactly one output partition, with every row once; numbers are hashed as
    float64, so that an int key meets an equal float key. The hash is the backend's: on
    pandas dask's own (a row lands where dask's task shuffle puts it), on cuDF libcudf's hash
    partitioner (murmur3), so the two place a key in different partitions, each
    consistently. The shuffle runs when
    called, as ``persist`` does, and returns once every output partition is in the workers'
    memory; the input is persisted first (a persisted frame is used where it is).

    Parameters
    ----------
    frame : dask.dataframe.DataFrame
        The frame: cuDF partitions on GPU workers, pandas partitions on CPU workers.
    on : str or list of str
        The key columns.
    npartitions : int, optional
        Output partitions, at most 16384; by default as many as the input has.
    ignore_index : bool
        Drop the index instead of carrying it along (less to move); the output partitions
        are then indexed from 0.
    client : distributed.Client, optional
        By default the current client.
    return_stats : bool
        Also return a :class:`ShuffleStats`: the time and the bytes that crossed between
        each pair of workers (logged at INFO level on ``dask_gpu_interop.all_to_all`` too).

    Returns
    -------
    dask.dataframe.DataFrame or (dask.dataframe.DataFrame, ShuffleStats)
        The shuffled frame, backed by the output partitions in memory (a persisted frame,
        as ``persist`` gives one: shuffling or merging it again starts from them): the
        input's columns and types, divisions unknown.

    Raises
    ------
    TypeError
        ``frame`` is not a dask DataFrame, ``on`` is not column names (a Series, say), or
        ``client`` is not a client (a cluster, or an address).
    ValueError
        ``on`` names no column of the frame, or one the frame has twice, ``npartitions`` is
        not a positive whole number or is more than 16384 (each output partition is a task
        of its own), ``gpu-interop.shuffle.step-bytes`` is neither "auto" nor a size,
        ``gpu-interop.shuffle.exchange`` neither "batches" nor "direct",
        ``gpu-interop.shuffle.timeout`` not a duration, or no client runs, the client is
        closed, or its cluster has no worker.
    ShuffleError
        A task of the shuffle failed, data it needed was lost and could not be computed
        again, none of its tasks ended for ``gpu-interop.shuffle.timeout``, or workers left
        the cluster during each of ``ATTEMPTS`` attempts. A worker lost during the shuffle
        is no error by itself, nor every worker started again: the shuffle starts again on
        the workers present, and the result is the same.

    Notes
    -----
    Memory: in one step, each worker holds its input partitions ordered by output partition
    until every destination has made its output partitions, what it receives, and its output
    partitions: about three times its share of the frame at the peak, above an input that you
    keep. A worker's share takes one step only while it is at most an eighth of the worker's
    memory (its GPU's for cuDF partitions, its memory limit for pandas ones), whatever its
    size, so that one step holds at most about three eighths of it; a larger share works in
    steps of a sixteenth of it (at most 2 GiB), each split freed once its batches are copied
    out. A worker whose memory is not known (no memory limit) takes one step.
    ``gpu-interop.shuffle.step-bytes`` in dask config (``"auto"``, or a size such as
    ``"1GiB"``) sets the step. Where a share takes one step, each split sends its batches to
    their workers itself (:mod:`.inbox`); ``gpu-interop.shuffle.exchange: batches`` makes
    them tasks of their own that dask moves, as steps always do. Where the frame
    and its shuffle together do not fit the GPUs (a frame you keep, and its shuffled copy),
    give the workers cuDF's spilling (``GPUMemoryPlugin(spill=True)``, or ``memory={"spill":
    True}`` to :func:`cluster_client`): cuDF then moves frames no task is using to host memory
    when the pool runs out, and the shuffle's steps bring back what they read. The tasks'
    prefixes, ``gpu-shuffle-split``, ``-batch`` and ``-output``, show each
    step's device memory in :func:`memory_report`.

    Time: the call waits while the shuffle's tasks end, at most ``gpu-interop.shuffle.timeout``
    (dask config, ``"5 minutes"`` by default, None for no limit) without one ending, and a
    destination worker may take at most that long to take a batch sent to it. If every
    worker leaves mid-shuffle, it waits as long for one to join, then starts again.

    A shuffle whose client goes away (its process killed, say) leaves nothing on the
    workers: the scheduler forgets its tasks as the client's connection closes, and every
    worker's inbox lets go of the shuffle's batches within 2 seconds after that.

    Examples
    --------
    >>> import dask_gpu_interop
    >>> shuffled = dask_gpu_interop.shuffle(frame, "loan_id")  # doctest: +SKIP
    >>> shuffled, stats = dask_gpu_interop.shuffle(frame, ["a", "b"], npartitions=64,
    ...                                            return_stats=True)  # doctest: +SKIP
    >>> print(stats)  # doctest: +SKIP
    shuffled 32 partitions into 64 on 4 workers in 0.412 s: 12.00 GiB crossed between workers (75% of the output), output 16.00 GiB
    """
    with _out_of_the_pool():
        return _shuffle(frame, on, npartitions, ignore_index, client, return_stats)


@contextlib.contextmanager
def _out_of_the_pool():
    """Where :func:`shuffle` is called inside a task on a worker, its thread leaves the
    worker's thread pool while the shuffle runs (as ``distributed.worker_client`` does): the
    shuffle's own tasks need a thread on every worker, this one's included."""
    from distributed.threadpoolexecutor import thread_state

    if not getattr(thread_state, "proceed", False):  # not a worker's task, or seceded
        yield
        return
    from distributed import rejoin, secede

    secede()
    try:
        yield
    finally:
        rejoin()


def _shuffle(frame, on, npartitions, ignore_index, client, return_stats):
    on = key_columns(frame, on)
    npartitions = output_partitions(frame, npartitions)
    client = _client(client)
    meta = frame._meta.reset_index(drop=True) if ignore_index else frame._meta
    casts = hash_casts(frame._meta, on)
    setting = step_setting()
    exchange = exchange_setting()
    timeout = timeout_setting()
    gpu = type(frame._meta).__module__.split(".")[0] == "cudf"
    for attempt in range(1, ATTEMPTS + 1):
        if attempt > 1:
            _workers_back(client, timeout)
        inputs = _input_partitions(client, frame)
        started = time.perf_counter()
        nthreads, held, sizes = _cluster_state(client, inputs)
        workers = tuple(sorted(nthreads))
        if not workers:
            raise ValueError(NO_WORKER)
        plan = Plan(workers=workers, owners=_owners(held, inputs, workers),
                    npartitions=npartitions, sizes=sizes)  # fmt: skip
        step = _step(client, plan, setting, gpu)
        if step is not None:
            plan = replace(plan, step_bytes=step)
        token = uuid.uuid4().hex
        direct = exchange == "direct" and plan.step_bytes is None
        if direct:
            _register_inbox(client)
            graph, keys = build_direct_graph(plan, inputs, token, on, casts, ignore_index,
                                             timeout)
        else:
            graph, keys = build_graph(plan, inputs, token, on, casts, ignore_index)
        watched = send_keys(plan, token) if direct else []
        futures = client.get(graph, keys + watched, sync=False)
        outputs = futures[:len(keys)]
        pinned = _lineage(graph, keys, plan, token, direct)
        # the graph holds the inputs too: the scheduler releases them once split, unless the
        # caller holds them
        del inputs, graph
        try:
            try:
                _wait(futures, client, plan.workers, timeout)
            except ShuffleError:
                # a batch sent to a worker that left fails its send: as a worker left
                gone = set(plan.workers) - set(client.nthreads())
                if not gone:
                    raise
                raise _WorkersLeft(", ".join(sorted(gone))) from None
            break
        except BaseException as stopped:
            client.cancel(futures)
            if direct:  # what reached the inboxes of this attempt, or reaches them later
                _drop_inboxes(client, token)
            if not isinstance(stopped, _WorkersLeft):
                raise
            left = stopped
            if attempt == ATTEMPTS:
                raise ShuffleError(
                    f"workers left the cluster during each of {ATTEMPTS} attempts at the "
                    f"shuffle (last: {left}): keep the cluster's workers running until it "
                    "ends") from None
            logger.warning("worker %s left the cluster mid-shuffle: shuffling again on the "
                           "%d workers present", left, len(client.nthreads()))
    for future in futures[len(outputs):]:  # the sends' small results: no longer needed
        future.release()
    del futures
    client.loop.add_callback(_unpin, client, pinned)
    seconds = time.perf_counter() - started
    stats = None
    if return_stats or logger.isEnabledFor(logging.INFO):
        stats = _stats(client, plan, frame.npartitions, outputs, token, seconds)
        logger.info("%s", stats)
    out = _persisted_frame(outputs, meta, token)
    return (out, stats) if return_stats else out


def _persisted_frame(futures: list, meta, token: str):
    """A dask DataFrame of ``futures`` (partitions in memory), as ``persist`` makes one, so
    that a later shuffle of it takes its partitions as they are (:func:`_persisted_partitions`)
    instead of computing them again; named by the shuffle's ``token``, where dask's own
    ``from_graph`` would tokenize the meta (for a cuDF frame, a hash on the device and a copy
    to the host). Where dask has no such graph expression, one of delayed partitions."""
    import dask.dataframe as dd

    layer = {future.key: future for future in futures}
    keys = [future.key for future in futures]
    divisions = (None,) * (len(futures) + 1)
    try:
        from dask.dataframe.dask_expr import new_collection
        from dask.dataframe.dask_expr.io.io import FromGraph

        return new_collection(FromGraph(layer=layer, _meta=meta, divisions=divisions,
                                        keys=keys, name_prefix=PREFIX, _determ_token=token))
    except (ImportError, TypeError):
        pass
    from_graph = getattr(dd, "from_graph", None)
    if from_graph is None:
        return dd.from_delayed(futures, meta=meta, divisions=None, verify_meta=False,
                               prefix=f"{PREFIX}-{token}")  # fmt: skip
    return from_graph(layer, meta, divisions, keys, f"{PREFIX}-{token}")

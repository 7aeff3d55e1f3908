"""The all-to-all's direct exchange (:mod:`.all_to_all`, ``gpu-interop.shuffle.exchange:
direct``), on the workers: each source worker's split sends its batches to their destination
workers itself, and each destination keeps them in an inbox until its output partitions are
made from them.

- :class:`ShuffleInbox`: a worker plugin; its handler ``gpu_shuffle_receive`` takes a batch
  sent by a peer (over distributed's own comms: device to device over UCX with the "cuda"
  serializers) and keeps it by shuffle, run of output partitions and source.
- :func:`split_and_send`: a source worker's input partitions split (:func:`.tasks.
  split`), and one batch per run of output partitions sent to its worker at once (kept in
  the worker's own inbox where it is the destination). Its result is what it sent to whom, a
  small dict, which the output partitions of its own worker depend on (its own batch is in
  the inbox then), and which the client watches for a failure.
- :func:`output_from_inbox`: one output partition, concatenated from the batches of its run
  (:func:`.tasks.output`) once every source's has arrived; it depends on no other
  worker's task, so no scheduler round trip and no fetch stands between the last batch's
  arrival and the concatenation. While it waits it leaves the worker's thread pool
  (distributed's ``secede``), so that the worker's other tasks (another shuffle's send, for
  one) run meanwhile. The run's batches leave the inbox with its last output partition.
- :func:`drop`: a shuffle's batches out of a worker's inbox, where it stopped before its end.

Compared with the batch tasks (``exchange: batches``), no step sits between a split and its
transfers, and no scheduler round trip: the transfers start as each split ends, and the
concatenations as the last batch arrives. What is in an inbox is out of dask's sight (its
memory limits and spilling): the plan takes this exchange only where a worker's share takes
one step. A waiting output partition ends with an error when its shuffle is stopped
(:func:`drop`, which the client calls when a task failed or a worker left) or its task
cancelled.
"""

from __future__ import annotations

import threading
import time

from distributed import WorkerPlugin

from . import tasks

#: The name the plugin is registered under on every worker.
NAME = "gpu-shuffle-inbox"
#: The worker handler that receives a batch from a peer.
HANDLER = "gpu_shuffle_receive"
#: Shuffles whose received bytes each worker remembers (for the shuffle's statistics), and
#: stopped shuffles whose late batches it turns away.
LOGGED = 64
#: How often a waiting output partition checks that its task is still wanted (seconds).
WAIT_POLL = 0.1
#: How often, while it waits, it asks the scheduler whether its shuffle's sends are still part
#: of a running shuffle (seconds): they are not where the output partition is computed again
#: after the shuffle ended (its worker lost), and the other workers' batches would then never
#: come.
SENDS_CHECK = 1.0
#: The send tasks' key prefix (:func:`.all_to_all.send_keys`): ``(f"{SEND}-{token}", source)``.
SEND = "gpu-shuffle-send"
#: Why an output partition computed again after its shuffle ended cannot be made.
ENDED = ("this output partition is being computed again after its shuffle ended (its worker "
         "was lost), and its batches cannot be sent again: shuffle the input again")
#: Why a waiting output partition ends where its shuffle was stopped (:func:`drop`).
STOPPED = ("this output partition's shuffle stopped before its batches arrived (a task "
           "failed, or a worker left)")
#: Why an output partition found no batches to wait for.
GONE = ("this output partition's batches are no longer on its worker (made before and "
        "released, or the worker started again): shuffle the input again")


class ShuffleInbox(WorkerPlugin):
    """A worker plugin: the batches sent to this worker, by shuffle token, run of output
    partitions and source worker, until the run's output partitions are made; and the bytes
    received from each peer, for the last :data:`LOGGED` shuffles."""

    name = NAME
    idempotent = True  # registered once: registering again would empty the inboxes

    def setup(self, worker):
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a batch came, or a shuffle stopped
        self._boxes: dict = {}  # token -> run -> {source: batch}
        self._done: dict = {}  # token -> runs whose output partitions were all made
        self._left: dict = {}  # (token, run) -> output partitions still to make
        self._received: dict = {}  # token -> [(source address, bytes)]
        self._dropped: dict = {}  # token dropped -> why: what arrives for it later is not kept
        worker.handlers[HANDLER] = self.receive

    def teardown(self, worker):
        worker.handlers.pop(HANDLER, None)
        with self._lock:
            self._boxes.clear()
            self._left.clear()
            self._done.clear()
            self._arrived.notify_all()

    def receive(self, token: str, run, source: int, batch, sender: str | None = None,
                nbytes: int = 0) -> str:
        """Handler: keep ``batch`` from source ``source`` (``sender``: its address)."""
        self.put(token, run, source, batch)
        with self._lock:
            log = self._received.setdefault(token, [])
            log.append((sender, int(nbytes), time.time()))
            while len(self._received) > LOGGED:
                self._received.pop(next(iter(self._received)))
        return "OK"

    def put(self, token: str, run, source: int, batch) -> None:
        with self._lock:
            # a send that ends after its shuffle stopped, or computed again for a run made
            if token not in self._dropped and run not in self._done.get(token, ()):
                self._boxes.setdefault(token, {}).setdefault(run, {})[source] = batch
                self._arrived.notify_all()

    def arrived(self, token: str, run, sources: int) -> bool:
        """Whether the batches of all ``sources`` for ``run`` are in the inbox."""
        with self._lock:
            return len(self._boxes.get(token, {}).get(run, ())) >= sources

    def wait_for(self, token: str, run, sources: int, wanted=None,
                 poll: float = WAIT_POLL) -> list:
        """The batches of ``run`` by source in order, once the batches of all ``sources`` are
        in the inbox. RuntimeError, in one line, where the shuffle stopped (:meth:`drop`),
        its run's output partitions were all made already, or ``wanted()`` (asked every
        ``poll`` seconds, outside the inbox's lock: it may wait on the worker's event loop,
        which puts batches in) turns false or raises while it waits."""
        while True:
            with self._arrived:
                batches = self._ready(token, run, sources)
                if batches is None:
                    self._arrived.wait(poll)
                    batches = self._ready(token, run, sources)
            if batches is not None:
                return batches
            if wanted is not None and not wanted():
                raise RuntimeError("this output partition's task was cancelled while it "
                                   "waited for its batches")

    def _ready(self, token: str, run, sources: int) -> list | None:
        """(Under the lock) the run's batches where all have arrived, else None."""
        if token in self._dropped:
            raise RuntimeError(self._dropped[token])
        if run in self._done.get(token, ()):
            raise RuntimeError(GONE)
        box = self._boxes.get(token, {}).get(run, {})
        return [box[source] for source in sorted(box)] if len(box) >= sources else None

    def made(self, token: str, run, count: int) -> None:
        """One more of ``run``'s ``count`` output partitions is made: the run's batches leave
        the inbox with its last."""
        with self._lock:
            left = self._left.get((token, run), count) - 1
            if left > 0:
                self._left[(token, run)] = left
                return
            self._left.pop((token, run), None)
            runs = self._boxes.get(token, {})
            runs.pop(run, None)
            if not runs:
                self._boxes.pop(token, None)
            self._done.setdefault(token, set()).add(run)
            while len(self._done) > LOGGED:
                self._done.pop(next(iter(self._done)))

    def drop(self, token: str, why: str = STOPPED) -> int:
        """The shuffle ``token``'s batches out of the inbox; how many runs held some. Its
        waiting output partitions end with ``why``."""
        with self._lock:
            self._dropped.setdefault(token, why)
            while len(self._dropped) > LOGGED:
                self._dropped.pop(next(iter(self._dropped)))
            runs = self._boxes.pop(token, {})
            for key in [key for key in self._left if key[0] == token]:
                del self._left[key]
            self._arrived.notify_all()  # its waiting output partitions end
            return len(runs)

    def received(self, token: str) -> list[tuple[str, int]]:
        """``(sender, bytes)`` of each batch of the shuffle ``token`` taken from a peer."""
        with self._lock:
            return [(sender, nbytes) for sender, nbytes, _ in self._received.get(token, ())]

    def received_since(self, start: float) -> int:
        """Bytes taken from peers since ``start`` (``time.time()``), every shuffle together."""
        with self._lock:
            return sum(nbytes for log in self._received.values()
                       for _, nbytes, when in log if when >= start)  # fmt: skip


def _inbox(worker) -> ShuffleInbox:
    try:
        return worker.plugins[NAME]
    except KeyError:
        raise RuntimeError(f"the worker {worker.address} has no {NAME} plugin: the shuffle "
                           "registers it before it starts; a worker that joined since "
                           "gets it from the scheduler") from None  # fmt: skip


def split_and_send(parts: list, on: list, casts: dict, npartitions: int, ignore_index: bool,
                   token: str, source: int, planned: str, runs: list) -> dict:
    """Split a source worker's input partitions (:func:`.tasks.split`) and send
    each run's batch to its worker at once; ``runs`` are ``(run, address, first, stop)``,
    ``run`` naming the run of output partitions ``first`` to ``stop - 1`` on worker
    ``address``. Returns ``{address: bytes}`` sent to each other worker. On a worker other
    than ``planned`` (the shuffle pins it there while it runs: it is being computed again
    after the shuffle ended), RuntimeError at once: its batches' destinations are gone."""
    from dask.sizeof import sizeof
    from distributed import get_worker
    from distributed.protocol import to_serialize
    from distributed.utils import sync

    worker = get_worker()
    if worker.address != planned:
        raise RuntimeError(ENDED)
    inbox = _inbox(worker)
    groups = tasks.split(parts, on, casts, npartitions, ignore_index)
    del parts
    sent: dict = {}
    calls = []
    for run, address, first, stop in runs:
        batch = tasks.batch(groups, first, stop)
        if address == worker.address:
            inbox.put(token, run, source, batch)
            continue
        nbytes = int(sum(sizeof(frame) for frame in batch[0]))
        sent[address] = sent.get(address, 0) + nbytes
        calls.append((address, dict(token=token, run=run, source=source,
                                    batch=to_serialize(batch), sender=worker.address,
                                    nbytes=nbytes)))  # fmt: skip

    async def send_all():
        import asyncio

        answers = await asyncio.gather(*(getattr(worker.rpc(address), HANDLER)(**message)
                                         for address, message in calls))  # fmt: skip
        for (address, _), answer in zip(calls, answers, strict=True):
            if answer != "OK":
                raise RuntimeError(f"worker {address} did not take the batch: {answer!r}")

    if calls:
        sync(worker.loop, send_all)
    return sent


def output_from_inbox(token: str, run, position: int, count: int, ignore_index: bool,
                      sources: tuple, *local_send) -> object:
    """Output partition ``position`` of ``run`` (which has ``count``), concatenated from the
    run's batches in the worker's inbox once the batches of all ``sources`` (the source
    workers' indexes) have arrived; ``local_send`` is this worker's own
    :func:`split_and_send` result where it is a source (its value is not read: its batch is
    in the inbox once it ends). While the batches are on their way, the task leaves the
    worker's thread pool; it ends with an error, in one line, where its task is cancelled or
    its shuffle's sends are no longer running or held (it is computed again after the shuffle
    ended)."""
    from distributed import get_worker, rejoin, secede

    worker = get_worker()
    inbox = _inbox(worker)
    if inbox.arrived(token, run, len(sources)):
        batches = inbox.wait_for(token, run, len(sources))
    else:
        key = worker.get_current_task()
        sends = [(f"{SEND}-{token}", source) for source in sources]
        checked = [time.monotonic()]

        def wanted() -> bool:
            task = worker.state.tasks.get(key)
            if task is None or task.state == "cancelled":
                return False
            if time.monotonic() - checked[0] >= SENDS_CHECK:
                checked[0] = time.monotonic()
                if not _sends_live(worker, sends):
                    inbox.drop(token, ENDED)  # what came of it here can never be used
                    raise RuntimeError(ENDED)
            return True

        secede()  # the worker's other tasks run while this one waits
        batches = inbox.wait_for(token, run, len(sources), wanted)
        rejoin()
    out = tasks.output(batches, position, ignore_index)
    inbox.made(token, run, count)
    return out


def _sends_live(worker, sends: list) -> bool:
    """Whether every one of ``sends`` (keys) is still part of a running shuffle, as the
    scheduler says: one it forgot, or keeps released (as the lineage of output partitions
    made), belongs to a shuffle that ended. True where the scheduler cannot be asked (one
    that is gone ends the worker anyway)."""
    from distributed.utils import sync

    try:
        states = sync(worker.loop, worker.scheduler.get_task_status, keys=sends)
    except Exception:  # noqa: BLE001 - no answer is no evidence that the shuffle ended
        return True
    return all(states.get(key) not in (None, "released", "forgotten") for key in sends)


def drop(token: str, dask_worker=None) -> int:
    """On a worker: the shuffle ``token``'s batches out of its inbox (none where it has no
    inbox)."""
    inbox = dask_worker.plugins.get(NAME)
    return inbox.drop(token) if inbox is not None else 0


def received(token: str, dask_worker=None) -> list[tuple[str, int]]:
    """On a worker: ``(source, bytes)`` of each batch of the shuffle ``token`` that its inbox
    took from a peer."""
    inbox = dask_worker.plugins.get(NAME)
    return inbox.received(token) if inbox is not None else []

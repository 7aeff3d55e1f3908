"""The all-to-all's direct exchange (:mod:`dask_gpu_interop.all_to_all`,
``gpu-interop.shuffle.exchange: direct``), on the workers: each source worker's split sends its
batches to their destination workers itself, and each destination keeps them in an inbox until
its output partitions are made from them.

- :class:`ShuffleInbox`: a worker plugin; its handler ``gpu_shuffle_receive`` takes a batch
  sent by a peer (over distributed's own comms: device to device over UCX with the "cuda"
  serializers) and keeps it by shuffle, run of output partitions and source.
- :func:`split_and_send`: a source worker's input partitions split (:func:`.tasks.split`), and
  one batch per run of output partitions sent to its worker at once (kept in the worker's own
  inbox where it is the destination). It ends once every destination took its batch; its
  result is a small receipt (where it ran, and whether it sent or holds its split).
- :func:`output_from_inbox`: one output partition, concatenated from the batches of its run
  (:func:`.tasks.output`). It depends on every send of its shuffle (their receipts, a few
  bytes each), so it runs once every batch is in its worker's inbox: it never waits there,
  and takes no thread and asks nothing of the scheduler while the batches travel. The run's
  batches leave the inbox with its last output partition.
- :func:`drop`: a shuffle's batches out of a worker's inbox, where it stopped before its end.

An output partition lost with its worker after the shuffle ended is made again from its
lineage, as dask makes any lost key: its sends run again, this time holding their splits on
their workers (their destinations may be gone) instead of sending them, and the output
partition, wherever it now runs, asks each of them for its own rows (the handler
``gpu_shuffle_pull``). A send knows it runs again by its worker (not the one its shuffle
planned) or by its worker's memory of the shuffles it sent for.

What is in an inbox is out of dask's sight (its memory limits and spilling): the plan takes
this exchange only where a worker's share takes one step. Nothing in an inbox outlives its
shuffle: the client empties the inboxes of a shuffle it stopped (:func:`drop`), and an inbox
that holds anything asks the scheduler every :data:`EXPIRY_SECONDS` whether the sends it holds
batches or splits of are still wanted; those of a shuffle whose client went away (or whose
tasks were all released) leave it then.
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
#: The worker handler that gives a peer an output partition's rows of a split it holds.
PULL = "gpu_shuffle_pull"
#: Shuffles whose received bytes each worker remembers (for the shuffle's statistics), and
#: stopped shuffles whose late batches it turns away.
LOGGED = 64
#: Shuffles each worker remembers having sent for: a send of one of them that runs there again
#: holds its split instead of sending it (a few bytes each).
SENT_LOGGED = 4096
#: How often an inbox that holds batches or splits asks the scheduler whether their shuffles'
#: sends are still wanted (seconds); it lets go of those that are not. A shuffle whose client
#: went away leaves the inboxes within about this long after the scheduler forgot its tasks
#: (at once when the client's connection closes).
EXPIRY_SECONDS = 2.0
#: The states of a send that no running shuffle, and no output partition made again, waits for.
ENDED_STATES = (None, "released", "forgotten", "erred")
#: The send tasks' key prefix (:func:`.graph.send_keys`): ``(f"{SEND}-{token}", source)``.
SEND = "gpu-shuffle-send"
#: Why a shuffle's batches left an inbox that its shuffle no longer wanted.
EXPIRED = ("this output partition's shuffle ended before it was made (its client went away, "
           "or its tasks were released): shuffle the input again")
#: Why a waiting output partition ends where its shuffle was stopped (:func:`drop`).
STOPPED = ("this output partition's shuffle stopped before its batches arrived (a task "
           "failed, or a worker left)")
#: Why an output partition found no batches to make it from.
GONE = ("this output partition's batches are no longer on its worker (made before and "
        "released, or the worker started again): shuffle the input again")


class ShuffleInbox(WorkerPlugin):
    """A worker plugin: the batches sent to this worker, by shuffle token, run of output
    partitions and source worker, until the run's output partitions are made; the splits of
    sends run again after their shuffle ended, until no output partition needs them; and the
    bytes received from each peer, for the last :data:`LOGGED` shuffles."""

    name = NAME
    idempotent = True  # registered once: registering again would empty the inboxes

    def setup(self, worker):
        self._worker = worker
        self._lock = threading.Lock()
        self._boxes: dict = {}  # token -> run -> {source: batch}
        self._held: dict = {}  # token -> {source: split groups}, sends run again
        self._done: dict = {}  # token -> runs whose output partitions were all made
        self._left: dict = {}  # (token, run) -> output partitions still to make
        self._sent: dict = {}  # tokens whose send ran here (insertion-ordered, as a set)
        self._received: dict = {}  # token -> [(source address, bytes)]
        self._dropped: dict = {}  # token dropped -> why: what arrives for it later is not kept
        worker.handlers[HANDLER] = self.receive
        worker.handlers[PULL] = self.pull
        self._expiry = None
        if hasattr(worker, "periodic_callbacks"):  # a worker (not a stand-in of the tests)
            from tornado.ioloop import PeriodicCallback

            self._expiry = PeriodicCallback(self.expire, EXPIRY_SECONDS * 1000)
            worker.periodic_callbacks[f"{NAME}-expiry"] = self._expiry
            self._expiry.start()

    def teardown(self, worker):
        worker.handlers.pop(HANDLER, None)
        worker.handlers.pop(PULL, None)
        if self._expiry is not None:
            self._expiry.stop()
            worker.periodic_callbacks.pop(f"{NAME}-expiry", None)
        with self._lock:
            self._boxes.clear()
            self._held.clear()
            self._left.clear()
            self._done.clear()

    # ------------------------------------------------------------------ batches sent here

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

    def take(self, token: str, run, sources) -> list:
        """The batches of ``run`` from each of ``sources``, in their order. RuntimeError, in
        one line, where the shuffle was stopped (:meth:`drop`), the run's output partitions
        were all made already, or a source's batch is not here."""
        with self._lock:
            if token in self._dropped:
                raise RuntimeError(self._dropped[token])
            box = self._boxes.get(token, {}).get(run, {})
            if run in self._done.get(token, ()) or any(s not in box for s in sources):
                raise RuntimeError(GONE)
            return [box[source] for source in sources]

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

    # ------------------------------------------------------------------ sends run again

    def sent(self, token: str) -> bool:
        """Whether a send of the shuffle ``token`` ran here before; marks that one did now."""
        with self._lock:
            before = token in self._sent
            self._sent[token] = None
            while len(self._sent) > SENT_LOGGED:
                self._sent.pop(next(iter(self._sent)))
            return before

    def hold(self, token: str, source: int, groups) -> None:
        """Keep the split ``groups`` of ``source`` (a send run again) for :meth:`pull`."""
        with self._lock:
            self._held.setdefault(token, {})[source] = groups

    def rows(self, token: str, source: int, partition: int):
        """The batch of output partition ``partition`` in the split that ``source`` holds
        here; RuntimeError in one line where it holds none."""
        with self._lock:
            groups = self._held.get(token, {}).get(source)
        if groups is None:
            raise RuntimeError(GONE)
        return tasks.batch(groups, partition, partition + 1)

    def pull(self, token: str, source: int, partition: int):
        """Handler: :meth:`rows` for a peer, or why there are none."""
        from distributed.protocol import to_serialize

        try:
            return {"status": "OK", "batch": to_serialize(self.rows(token, source, partition))}
        except RuntimeError as gone:
            return {"status": "gone", "why": str(gone)}

    # ------------------------------------------------------------------ ending

    def drop(self, token: str, why: str = STOPPED) -> int:
        """The shuffle ``token``'s batches and splits out of the inbox; how many runs and
        splits it held. Batches that arrive for it later are turned away."""
        with self._lock:
            self._dropped.setdefault(token, why)
            while len(self._dropped) > LOGGED:
                self._dropped.pop(next(iter(self._dropped)))
            runs = self._boxes.pop(token, {})
            held = self._held.pop(token, {})
            for key in [key for key in self._left if key[0] == token]:
                del self._left[key]
            return len(runs) + len(held)

    def watched(self) -> dict[str, list]:
        """``{token: send keys}``: the sends whose batches or splits the inbox holds."""
        with self._lock:
            found = {}
            for token, runs in self._boxes.items():
                sources = {source for box in runs.values() for source in box}
                found[token] = sorted(sources)
            for token, held in self._held.items():
                found[token] = sorted(set(found.get(token, ())) | set(held))
        return {token: [(f"{SEND}-{token}", source) for source in sources]
                for token, sources in found.items()}  # fmt: skip

    async def expire(self) -> None:
        """Let go of what the inbox holds for shuffles whose sends the scheduler no longer
        keeps for anything (run every :data:`EXPIRY_SECONDS`, while it holds something)."""
        watched = self.watched()
        if not watched:
            return
        keys = [key for keys in watched.values() for key in keys]
        try:
            states = await self._worker.scheduler.get_task_status(keys=keys)
        except Exception:  # noqa: BLE001 - no answer is no evidence: ask again next time
            return
        for token, keys in watched.items():
            if any(states.get(key) in ENDED_STATES for key in keys):
                self.drop(token, EXPIRED)

    # ------------------------------------------------------------------ statistics

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
                   token: str, source: int, planned: str, runs: list,
                   timeout: float | None = None) -> tuple[str, bool]:
    """Split a source worker's input partitions (:func:`.tasks.split`) and send each run's
    batch to its worker at once; ``runs`` are ``(run, address, first, stop)``, ``run`` naming
    the run of output partitions ``first`` to ``stop - 1`` on worker ``address``. Each
    destination must take its batch within ``timeout`` seconds (None: no limit).

    Run again after its shuffle ended (on a worker other than ``planned``, or on one that sent
    for this shuffle before), it holds its split in the worker's inbox instead, for the output
    partitions made again to pull their rows from (:func:`output_from_inbox`).

    Returns ``(address, held)``: the worker it ran on, and whether it holds its split there.
    """
    from distributed import get_worker

    worker = get_worker()
    inbox = _inbox(worker)
    again = worker.address != planned
    again = inbox.sent(token) or again  # marks this shuffle as sent for, either way
    groups = tasks.split(parts, on, casts, npartitions, ignore_index)
    del parts
    if again:
        inbox.hold(token, source, groups)
        return worker.address, True
    _send(worker, inbox, groups, token, source, runs, timeout)
    return worker.address, False


def _send(worker, inbox: ShuffleInbox, groups, token: str, source: int, runs: list,
          timeout: float | None) -> None:
    """Each run's batch of ``groups`` to its worker's inbox, all at once (this worker's own
    into its inbox), until each took its batch or ``timeout`` seconds passed."""
    from dask.sizeof import sizeof
    from distributed.protocol import to_serialize
    from distributed.utils import sync

    calls = []
    for run, address, first, stop in runs:
        batch = tasks.batch(groups, first, stop)
        if address == worker.address:
            inbox.put(token, run, source, batch)
            continue
        nbytes = int(sum(sizeof(frame) for frame in batch[0]))
        calls.append((address, dict(token=token, run=run, source=source,
                                    batch=to_serialize(batch), sender=worker.address,
                                    nbytes=nbytes)))  # fmt: skip
    if not calls:
        return

    async def send_all():
        import asyncio

        async def one(address, message):
            call = getattr(worker.rpc(address), HANDLER)(**message)
            try:
                return await asyncio.wait_for(call, timeout)
            except asyncio.TimeoutError:
                raise RuntimeError(f"worker {address} did not take its batch within "
                                   f"{timeout:g} s (gpu-interop.shuffle.timeout)") from None

        answers = await asyncio.gather(*(one(address, message) for address, message in calls))
        for (address, _), answer in zip(calls, answers, strict=True):
            if answer != "OK":
                raise RuntimeError(f"worker {address} did not take the batch: {answer!r}")

    sync(worker.loop, send_all)


def output_from_inbox(token: str, run, position: int, count: int, ignore_index: bool,
                      partition: int, sources: tuple, *receipts) -> object:
    """Output partition ``partition``, the ``position``-th of ``run`` (which has ``count``),
    concatenated from the run's batches of all ``sources`` (the source workers' indexes) in
    the worker's inbox; ``receipts`` are the sends' results (:func:`split_and_send`), one per
    source, in order: once they are all in, so is every batch. Where a send ran again after
    the shuffle ended (its receipt says it holds its split), the partition's rows are pulled
    from the worker holding that split."""
    from distributed import get_worker

    worker = get_worker()
    inbox = _inbox(worker)
    held = {source: address for source, (address, holds) in zip(sources, receipts, strict=True)
            if holds}  # fmt: skip
    if not held:
        out = tasks.output(inbox.take(token, run, sources), position, ignore_index)
        inbox.made(token, run, count)
        return out
    batches = _pulled(worker, inbox, token, partition, sources, held)
    return tasks.output(batches, 0, ignore_index)


def _pulled(worker, inbox: ShuffleInbox, token: str, partition: int, sources: tuple,
            held: dict) -> list:
    """The batch of output ``partition`` from each of ``sources``: pulled from the worker
    holding its split (``held``: source -> address), or taken from this worker's inbox."""
    from distributed.utils import sync

    async def pull_all():
        import asyncio

        async def one(source):
            address = held.get(source)
            if address is None:
                raise RuntimeError(GONE)
            if address == worker.address:
                return inbox.rows(token, source, partition)
            try:
                answer = await getattr(worker.rpc(address), PULL)(
                    token=token, source=source, partition=partition)
            except OSError as lost:
                raise RuntimeError(f"{GONE} (worker {address}: {lost})") from None
            if answer.get("status") != "OK":
                raise RuntimeError(answer.get("why") or GONE)
            return answer["batch"]

        return await asyncio.gather(*(one(source) for source in sources))

    return list(sync(worker.loop, pull_all))


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

"""What the shuffle's tests share: a frame of known rows in blocks, a dask frame of them, the
checks of a shuffle's result (every row once, every key in one partition), a cluster of its own
for a test, and worker plugins and probes for the faults."""

from __future__ import annotations

import contextlib
import os
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.utils import key_split
from distributed import Client, WorkerPlugin

from ..clusters import cpu_cluster


def frame(partitions: int = 6, rows: int = 2_000, keys: int = 97, seed: int = 0,
          empty: tuple = ()) -> pd.DataFrame:
    """A pandas frame of ``partitions`` blocks (those in ``empty`` with no rows): an int key,
    a text key, a float and an int column, a non-default index."""
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(partitions):
        n = 0 if i in empty else rows
        blocks.append(pd.DataFrame({
            "key": rng.integers(0, keys, n),
            "name": rng.choice(["ash", "birch", "cedar", "damson", "elm"], n),
            "x": rng.random(n),
            "n": np.arange(n) + i * rows,
        }, index=pd.RangeIndex(i * rows, i * rows + n) * 3))
    return blocks


def dask_frame(blocks) -> dd.DataFrame:
    return dd.from_delayed([dask.delayed(b) for b in blocks], meta=blocks[0].iloc[:0],
                           verify_meta=False)  # fmt: skip


def partitions_of(client, shuffled) -> list[pd.DataFrame]:
    return client.compute(shuffled.to_delayed(), sync=True)


def sorted_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("n").rename_axis("i").reset_index()


def assert_same_rows(parts, blocks):
    got = sorted_rows(pd.concat(parts))
    want = sorted_rows(pd.concat(blocks))
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def assert_each_key_in_one_partition(parts, on):
    on = [on] if isinstance(on, str) else on
    seen = {}
    for i, part in enumerate(parts):
        for key in part[on].drop_duplicates().itertuples(index=False, name=None):
            assert seen.setdefault(key, i) == i, f"key {key} in partitions {seen[key]} and {i}"


def inboxes_empty(client, within: float = 0) -> bool:
    """Whether every worker's inbox holds nothing (or it has none), asked until it does or
    ``within`` seconds passed."""
    deadline = time.monotonic() + within
    while True:
        empty = set(client.run(boxes).values()) <= {(0, 0, 0), None}
        if empty or time.monotonic() >= deadline:
            return empty
        time.sleep(0.1)


@contextlib.contextmanager
def own_cluster(n_workers: int = 2, **options):
    """A client of a cluster of its own (tests/clusters.py's: worker processes that see no
    GPU, one thread each), for a test that kills its workers or changes them; closed on
    leaving."""
    with cpu_cluster(n_workers, **options) as cluster, Client(cluster) as client:
        yield client


class DieOnce(WorkerPlugin):
    """Ends its worker's process the first time, on any worker, that a task of the prefix
    ``step`` finishes there (a file marks that it happened)."""

    name = "die-once"

    def __init__(self, marker: str, step: str):
        self.marker = marker
        self.step = step

    def transition(self, key, start, finish, **kwargs):
        if finish != "memory" or key_split(key) != self.step:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        self.die()

    def die(self):
        os._exit(1)


def tasks_by_step(graph) -> tuple[dict, dict]:
    """``(keys, annotations)`` of a shuffle's graph: its keys by task prefix, and each key's
    layer annotations."""
    found, annotations = {}, {}
    for layer in graph.layers.values():
        for key in layer:
            found.setdefault(key_split(key), []).append(key)
            annotations[key] = layer.annotations
    return found, annotations


def boxes(dask_worker=None):
    """On a worker: how many shuffles with batches, runs partly made and shuffles with held
    splits its direct exchange's inbox holds (None without one)."""
    from dask_gpu_interop.all_to_all import inbox

    found = dask_worker.plugins.get(inbox.NAME)
    if found is None:
        return None
    return len(found._boxes), len(found._left), len(found._held)


class SlowSplit(WorkerPlugin):
    """Makes the shuffle's split take ``seconds`` longer on the worker at ``address``."""

    name = "slow-split"

    def __init__(self, address: str, seconds: float):
        self.address = address
        self.seconds = seconds

    def setup(self, worker):
        if worker.address != self.address:
            return
        from dask_gpu_interop.all_to_all import tasks

        split, seconds = tasks.split, self.seconds

        def slow(*args, **kwargs):
            time.sleep(seconds)
            return split(*args, **kwargs)

        tasks.split = slow


class StuckReceive(WorkerPlugin):
    """Makes the worker at ``address`` never answer a batch sent to its inbox (its event loop
    still runs): a send to it never ends by itself."""

    name = "stuck-receive"

    def __init__(self, address: str):
        self.address = address

    def setup(self, worker):
        if worker.address != self.address:
            return
        import asyncio

        from dask_gpu_interop.all_to_all import inbox

        async def never(**kwargs):
            await asyncio.sleep(3600)

        worker.handlers[inbox.HANDLER] = never


class KillAll(DieOnce):
    """Ends every process of ``pids`` (all the workers) at once, the first time, on any
    worker, that a task of the prefix ``step`` finishes (a file marks that it happened)."""

    name = "kill-all"

    def __init__(self, marker: str, step: str, pids):
        super().__init__(marker, step)
        self.pids = sorted(pids)

    def die(self):
        import signal

        for pid in self.pids:
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
        os._exit(1)

"""A worker killed in the middle of the all-to-all (dask_gpu_interop.shuffle), with its batch
tasks in one step per worker or in steps, and with the direct exchange: the shuffle starts
again on the workers present (what the dead one held computed again from its lineage), and
the result is the same as without the fault: every row once, every key in one partition,
nothing left in an inbox."""

from __future__ import annotations

import os

import dask
import dask.dataframe as dd
import pytest
from dask.utils import key_split
from distributed import Client, LocalCluster, WorkerPlugin

from dask_gpu_interop import ShuffleError, shuffle
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY
from tests.all_to_all.test_shuffle import (
    NO_GPU,
    assert_each_key_in_one_partition,
    assert_same_rows,
    dask_frame,
    frame,
    partitions_of,
)

pytestmark = pytest.mark.slow  # worker processes, one of them killed and started again


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
        os._exit(1)


def boxes(dask_worker=None):
    """On a worker: how many shuffles and runs its direct exchange's inbox holds (None
    without one)."""
    from dask_gpu_interop.all_to_all import inbox

    found = dask_worker.plugins.get(inbox.NAME)
    return None if found is None else (len(found._boxes), len(found._left))


KILLED_AT = [  # (exchange, steps, the step at whose end a worker dies)
    *(("batches", steps, step) for steps in ("auto", "60 kB")
      for step in ("gpu-shuffle-split", "gpu-shuffle-batch", "gpu-shuffle-output")),
    *(("direct", "auto", step) for step in ("gpu-shuffle-send", "gpu-shuffle-output")),
]


@pytest.mark.parametrize("exchange,steps,step", KILLED_AT,
                         ids=[" ".join(p) for p in KILLED_AT])  # fmt: skip
def test_a_worker_killed_mid_shuffle_changes_nothing_in_the_result(tmp_path, exchange, steps,
                                                                   step, caplog):
    caplog.set_level("WARNING", logger="dask_gpu_interop.all_to_all")
    marker = tmp_path / "died"
    blocks = frame(12, rows=3_000)
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                      dashboard_address=None, env=NO_GPU) as cluster, \
            Client(cluster) as client, \
            dask.config.set({STEP_KEY: steps, EXCHANGE_KEY: exchange}):  # fmt: skip
        source = dask_frame(blocks).persist()
        client.wait_for_workers(3)
        pids = set(client.run(os.getpid).values())
        client.register_plugin(DieOnce(str(marker), step))
        shuffled = shuffle(source, ["key", "name"], npartitions=9)
        parts = partitions_of(client, shuffled)
        assert marker.exists(), f"no worker died at {step}: the test did not test anything"
        client.wait_for_workers(3, timeout=60)
        assert set(client.run(os.getpid).values()) != pids  # one was replaced
        # nothing of a stopped attempt is left in an inbox
        assert set(client.run(boxes).values()) <= {(0, 0), None}
    assert "left the cluster mid-shuffle: shuffling again" in caplog.text  # its tasks pinned
    assert len(parts) == 9
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, ["key", "name"])


@pytest.mark.parametrize("exchange,step", [("batches", "gpu-shuffle-split"),
                                           ("direct", "gpu-shuffle-send")])
def test_data_lost_for_good_is_one_clear_error(tmp_path, exchange, step):
    blocks = frame(12, rows=1_000)
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                      dashboard_address=None, env=NO_GPU) as cluster, \
            Client(cluster) as client, dask.config.set({EXCHANGE_KEY: exchange}):  # fmt: skip
        # scattered partitions have no lineage: lost with their worker, nothing can make them
        source = dd.from_delayed(client.scatter(blocks), meta=blocks[0].iloc[:0])
        client.register_plugin(DieOnce(str(tmp_path / "died"), step))
        with pytest.raises(ShuffleError) as failed:
            shuffle(source, "key")
    assert (tmp_path / "died").exists()
    message = str(failed.value)
    assert "was cancelled" in message and "cannot be computed again" in message
    assert "\n" not in message

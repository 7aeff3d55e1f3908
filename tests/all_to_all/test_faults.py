"""A worker killed in the middle of the all-to-all (dask_gpu_interop.shuffle), with its batch
tasks in one step per worker or in steps, and with the direct exchange: the shuffle starts
again on the workers present (what the dead one held computed again from its lineage), and
the result is the same as without the fault: every row once, every key in one partition,
nothing left in an inbox. Every worker started again mid-shuffle, likewise. A client killed
mid-shuffle: what it left in the workers' inboxes leaves them within a bounded time."""

from __future__ import annotations

import os
import time

import dask
import dask.dataframe as dd
import pytest

from dask_gpu_interop import ShuffleError, shuffle
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY

from ..clusters import NO_GPU
from .helpers import (
    DieOnce,
    KillAll,
    assert_each_key_in_one_partition,
    assert_same_rows,
    dask_frame,
    frame,
    inboxes_empty,
    own_cluster,
    partitions_of,
)

pytestmark = pytest.mark.slow  # worker processes, one of them killed and started again


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
    with own_cluster(3) as client, \
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
        assert inboxes_empty(client)
    assert "left the cluster mid-shuffle: shuffling again" in caplog.text  # its tasks pinned
    assert len(parts) == 9
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, ["key", "name"])


@pytest.mark.parametrize("exchange,step", [("batches", "gpu-shuffle-split"),
                                           ("direct", "gpu-shuffle-send")])
def test_data_lost_for_good_is_one_clear_error(tmp_path, exchange, step):
    blocks = frame(12, rows=1_000)
    with own_cluster(3) as client, dask.config.set({EXCHANGE_KEY: exchange}):
        # scattered partitions have no lineage: lost with their worker, nothing can make them
        source = dd.from_delayed(client.scatter(blocks), meta=blocks[0].iloc[:0])
        client.register_plugin(DieOnce(str(tmp_path / "died"), step))
        with pytest.raises(ShuffleError) as failed:
            shuffle(source, "key")
    assert (tmp_path / "died").exists()
    message = str(failed.value)
    assert "was cancelled" in message and "cannot be computed again" in message
    assert "\n" not in message


def test_every_worker_started_again_mid_shuffle_changes_nothing_in_the_result(tmp_path):
    blocks = frame(8, rows=2_000)
    with own_cluster(2) as client:
        source = dask_frame(blocks).persist()
        pids = set(client.run(os.getpid).values())
        client.register_plugin(KillAll(str(tmp_path / "died"), "gpu-shuffle-send", pids))
        parts = partitions_of(client, shuffle(source, "key", 5))
        assert (tmp_path / "died").exists(), "no worker died: the test did not test anything"
        assert not pids & set(client.run(os.getpid).values())  # every one was replaced
    assert_same_rows(parts, blocks)
    assert_each_key_in_one_partition(parts, "key")


CLIENT = """
import sys
import dask.dataframe as dd, numpy as np, pandas as pd
from distributed import Client
from dask_gpu_interop import shuffle
from tests.all_to_all.helpers import SlowSplit
client = Client(sys.argv[1])
client.register_plugin(SlowSplit(sys.argv[2], 6.0))
frame = dd.from_pandas(pd.DataFrame({"key": np.arange(40_000) % 101, "x": 1.0}),
                       npartitions=8).persist()
print("shuffling", flush=True)
shuffle(frame, "key", 8)
"""


def _tasks(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def test_a_client_killed_mid_shuffle_leaves_nothing_in_the_workers_inboxes():
    # one worker's split is slow: the other's batches wait in the inboxes when the client's
    # process is killed. The scheduler forgets the client's tasks as its connection closes;
    # each inbox asks every EXPIRY_SECONDS whether the sends it holds batches of are still
    # wanted, and lets them go (and turns the slow send's batches away when they come)
    import subprocess
    import sys

    from dask_gpu_interop.all_to_all.inbox import EXPIRY_SECONDS

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with own_cluster(2) as client:
        fast, slow = sorted(client.nthreads())
        process = subprocess.Popen([sys.executable, "-c", CLIENT, client.scheduler.address,
                                    slow], cwd=root, stdout=subprocess.PIPE,
                                   env={**os.environ, "PYTHONPATH": root, **NO_GPU})
        try:
            assert process.stdout.readline().strip() == b"shuffling"
            deadline = time.monotonic() + 60
            while inboxes_empty(client) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not inboxes_empty(client), "no batch reached an inbox"
            assert client.run_on_scheduler(_tasks) > 0
        finally:
            process.kill()
            process.wait()
        # a bound far above EXPIRY_SECONDS, for a loaded machine
        assert inboxes_empty(client, within=10 * EXPIRY_SECONDS + 10)
        # and still after the slow split ended and sent what it had
        time.sleep(6 + 2 * EXPIRY_SECONDS)
        assert inboxes_empty(client, within=10 * EXPIRY_SECONDS + 10)
        assert client.run_on_scheduler(_tasks) == 0  # the scheduler is as before

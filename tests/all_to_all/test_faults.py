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

from dask_gpu_interop import ShuffleError, shuffle
from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY

from .helpers import (
    DieOnce,
    assert_each_key_in_one_partition,
    assert_same_rows,
    boxes,
    cpu_client,
    dask_frame,
    frame,
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
    with cpu_client(3) as client, \
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
    with cpu_client(3) as client, dask.config.set({EXCHANGE_KEY: exchange}):
        # scattered partitions have no lineage: lost with their worker, nothing can make them
        source = dd.from_delayed(client.scatter(blocks), meta=blocks[0].iloc[:0])
        client.register_plugin(DieOnce(str(tmp_path / "died"), step))
        with pytest.raises(ShuffleError) as failed:
            shuffle(source, "key")
    assert (tmp_path / "died").exists()
    message = str(failed.value)
    assert "was cancelled" in message and "cannot be computed again" in message
    assert "\n" not in message

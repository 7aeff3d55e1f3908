"""Fixtures the examples' tests share."""

import pytest
from distributed import LocalCluster


@pytest.fixture(scope="module")
def running():
    """A running CPU cluster for the commands' --scheduler (one start per test file): the
    flags that point a command at it."""
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as cluster:
        yield ["--device", "cpu", "--scheduler", cluster.scheduler_address]

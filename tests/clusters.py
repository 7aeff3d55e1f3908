"""The CPU cluster that the tests of a running cluster start (tests/conftest.py's fixtures)."""

from __future__ import annotations

from distributed import LocalCluster

#: Worker processes that see no GPU, whatever this machine has.
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def cpu_cluster(n_workers: int = 2, **options) -> LocalCluster:
    """A local cluster of ``n_workers`` worker processes that see no GPU, one thread each, no
    dashboard; ``options`` are LocalCluster's own, to change any of that."""
    return LocalCluster(**{"n_workers": n_workers, "threads_per_worker": 1,
                           "dashboard_address": None, "env": NO_GPU, **options})

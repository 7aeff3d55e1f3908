"""import_in_background: imports that overlap a cluster's start, here and on every worker."""

from __future__ import annotations

import sys
import time

from distributed import Client, LocalCluster

from dask_gpu_interop import import_in_background


def _wait_for(module: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while module not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.01)
    return module in sys.modules


def test_a_module_is_imported_in_the_background():
    sys.modules.pop(PROBE, None)
    import_in_background(PROBE)
    assert _wait_for(PROBE)


def test_a_missing_module_is_left_for_the_real_import_and_the_next_one_still_imported():
    sys.modules.pop(PROBE, None)
    import_in_background("no_such_module_here", PROBE)  # no exception, no output
    assert _wait_for(PROBE)
    assert "no_such_module_here" not in sys.modules


PROBE = "tests.import_probe"


def _has(module: str) -> bool:
    return module in sys.modules


def test_every_worker_starts_the_import():
    with LocalCluster(n_workers=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert list(client.run(_has, PROBE).values()) == [False, False]
        import_in_background(PROBE, client=client)
        seen = client.run(_wait_for, PROBE)
    assert list(seen.values()) == [True, True]

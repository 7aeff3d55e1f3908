"""The local clusters the library starts for its commands and examples (CPU side)."""

from __future__ import annotations

from dask_gpu_interop import cluster_client


def _probed(dask_worker) -> bool:
    return getattr(dask_worker, "preload_probe_ran", False)


def test_extra_preloads_run_on_a_local_clusters_workers():
    with cluster_client(device="cpu", n_workers=2, preload=["tests.preload_probe"]) as (client, _):
        assert list(client.run(_probed).values()) == [True, True]
    with cluster_client(device="cpu", n_workers=1) as (client, _):
        assert list(client.run(_probed).values()) == [False]

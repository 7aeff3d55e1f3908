"""Run by .ci/core-install in a venv holding only the core install."""

import importlib.util

from distributed import Client, LocalCluster

from dask_gpu_interop import GPUMemoryPlugin, memory_report

UNWANTED = ["matplotlib", "scipy", "xgboost", "cryptography", "torch", "pandas", "pyarrow",
            "prometheus_client", "numba", "cupy", "cudf", "rmm"]


def main():
    installed = [name for name in UNWANTED if importlib.util.find_spec(name) is not None]
    assert not installed, f"the core install pulled in {installed}"
    try:
        GPUMemoryPlugin(pool_size="banana")
    except ValueError as err:
        assert "pool_size='banana'" in str(err), err
    else:
        raise AssertionError("a bad pool_size was accepted")
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as cluster, Client(cluster) as client:
        plugin = GPUMemoryPlugin(pool_size="1GB")
        client.register_plugin(plugin)
        report = memory_report(client)
        assert {snap["status"] for snap in report.values()} == {"no-gpu"}, report
        assert all(plugin.name in names for names in
                   client.run(lambda dask_worker: list(dask_worker.plugins)).values())
    print("core install: imports, validates and registers on a CPU cluster; none of", UNWANTED)


if __name__ == "__main__":
    main()

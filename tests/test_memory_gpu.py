"""GPUMemoryPlugin on real GPU workers (dask-cuda LocalCUDACluster). Skipped without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from distributed import wait

from dask_gpu_interop import (
    GPUMemoryPlugin,
    GPUMemorySetupError,
    GPUOutOfMemoryError,
    memory_report,
    xgboost_config,
)

from .gpu_helpers import (
    MiB,
    allocate,
    cuda_cluster,
    measure_allocation,
    plugin_names,
    require,
)

pytestmark = pytest.mark.gpu

FRAMEWORK_BUCKET = [("cupy", "cupy"), ("numba", "numba"), ("torch", "rmm"), ("cudf", "rmm")]


@pytest.fixture(scope="module")
def client():
    with cuda_cluster() as c:
        yield c


@pytest.fixture
def fresh(client):
    """Each test starts with no plugin on the shared worker and leaves none behind."""
    for name in plugin_names(client):
        client.unregister_worker_plugin(name)
    yield client
    for name in plugin_names(client):
        client.unregister_worker_plugin(name)


@pytest.mark.parametrize("framework, bucket", FRAMEWORK_BUCKET)
def test_each_frameworks_allocation_shows_in_the_worker_statistics(fresh, framework, bucket):
    require(framework if framework != "numba" else "numba.cuda")
    fresh.register_plugin(GPUMemoryPlugin(pool_size="1GiB", maximum_pool_size="0.5"))
    nbytes = 64 * MiB
    result = fresh.submit(measure_allocation, framework, nbytes, pure=False).result()
    before, after = result["before"], result["after"]
    grown = after["current_bytes"] - before["current_bytes"]
    assert nbytes <= grown <= nbytes + MiB, (framework, grown)
    in_bucket = after["frameworks"][bucket]["current_bytes"] - before["frameworks"][bucket]["current_bytes"]
    assert nbytes <= in_bucket <= nbytes + MiB, (framework, bucket, in_bucket)
    assert after["frameworks"][framework]["state"] == "bound", after["frameworks"][framework]
    assert after["peak_bytes"] >= after["current_bytes"]
    (freed,) = memory_report(fresh).values()  # the owner is gone: the bytes are back
    assert freed["current_bytes"] <= before["current_bytes"] + MiB


def test_report_describes_the_resource(fresh):
    fresh.register_plugin(GPUMemoryPlugin(pool_size="1GiB", maximum_pool_size="4GiB"))
    (snap,) = memory_report(fresh).values()
    assert snap["status"] == "active" and snap["mode"] == "pool"
    assert snap["resource"] == (
        "StatisticsResourceAdaptor > StatisticsResourceAdaptor > FailureCallbackResourceAdaptor"
        " > PoolMemoryResource > CudaMemoryResource")
    assert snap["pool_size"] >= 1 << 30 and snap["maximum_pool_size"] == 4 << 30
    assert snap["setup_seconds"] < 5
    text = str(memory_report(fresh))
    assert "pool 1.00 GiB (max 4.00 GiB)" in text


def _keep(framework, nbytes):
    return allocate(framework, nbytes)


def _spike(framework, nbytes):
    owner = allocate(framework, nbytes)
    del owner
    return 0


@pytest.mark.parametrize("framework", ["cupy", "torch", "cudf"])
def test_each_task_prefix_shows_its_peak_and_what_it_left(framework):
    require(framework)
    with cuda_cluster() as client:  # its own worker: the kept buffer must not outlive it
        client.register_plugin(GPUMemoryPlugin(pool_size="1GiB", maximum_pool_size="0.5"))
        kept = client.submit(_keep, framework, 64 * MiB, key="keep-0")
        kept.result()
        client.submit(_spike, framework, 256 * MiB, key="spike-0").result()
        frame = memory_report(client).tasks_frame().set_index("prefix")
        text = str(memory_report(client))
    # cuDF copies host data through a staging buffer: its peak is above the array's size
    assert 256 * MiB <= frame.loc["spike", "peak_bytes_max"] <= 256 * MiB * 1.25, frame
    assert abs(frame.loc["spike", "left_bytes"]) <= MiB, frame
    assert 64 * MiB <= frame.loc["keep", "left_bytes"] <= 64 * MiB + MiB, frame
    assert frame.loc["keep", "overlapped"] == 0  # one thread per GPU: exact
    assert "tasks by peak device memory" in text


@pytest.mark.parametrize("framework, options", [
    ("cupy", {"pool_size": "512MiB", "maximum_pool_size": "512MiB"}),
    ("torch", {"pool_size": "512MiB", "maximum_pool_size": "512MiB"}),
    ("cudf", {"pool_size": "512MiB", "maximum_pool_size": "512MiB"}),
    ("cupy", {"async_alloc": True, "maximum_pool_size": "512MiB"}),
])
def test_a_task_out_of_device_memory_is_explained_to_the_client(framework, options):
    require(framework)
    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(**options))
        client.submit(_spike, framework, 128 * MiB, key="small-0").result()
        with pytest.raises(GPUOutOfMemoryError) as info:
            client.submit(_keep, framework, 1024 * MiB, key="huge-0").result()
        (snap,) = memory_report(client).values()
    text = str(info.value)
    pool = "CUDA async pool" if options.get("async_alloc") else "RMM pool of 512.00 MiB"
    for part in ("'huge-0'", pool, "in use", "largest tasks by peak here: small 1",
                 "maximum_pool_size"):
        assert part in text, (part, text)
    assert "a request for 1.00 GiB" in text or framework == "cudf", text
    if "a request for 1.00 GiB" in text:  # larger than the pool may grow: nothing else helps
        assert "This task alone needs more than the 512.00 MiB its pool may grow to" in text
        assert "managed=True" not in text
    assert snap["tasks"]["prefixes"]["huge"]["errors"] == 1


def test_with_cudfs_spilling_held_frames_move_to_host_instead_of_running_out():
    """spill=True: cuDF's own failure callback spills held frames and retries, where the pool
    alone would run out (three frames of 128 MiB held, one more asked of a 384 MiB pool)."""
    require("cudf")
    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(pool_size="384MiB", maximum_pool_size="384MiB",
                                               spill=True))  # fmt: skip
        held = [client.submit(_keep, "cudf", 128 * MiB, key=f"persisted-{i}") for i in range(4)]
        wait(held)  # held on the worker: a client without cuDF's spilling cannot take them
        assert all(future.status == "finished" for future in held)
        spilled = client.run(_cudf_spilled_bytes)
        levels = client.run(_rmm_log_level)
        report = memory_report(client)
    assert all(size > 0 for size in spilled.values()), spilled
    # the pool's refusals, which cuDF cured by spilling, are not logged as errors
    assert set(levels.values()) == {"critical"}, levels
    (snap,) = report.values()  # the memory report says it
    assert snap["spilled"]["cudf"]["host_bytes"] == next(iter(spilled.values()))
    assert "off the GPU: cuDF's spilling" in str(report)


def _rmm_log_level() -> str:
    import rmm

    return rmm.get_logging_level().name


def _cudf_spilled_bytes() -> int:
    from cudf.core.buffer.spill_manager import get_global_manager

    return sum(buf.size for buf in get_global_manager().buffers() if buf.is_spilled)


def test_results_held_on_the_worker_are_named_when_a_task_runs_out():
    """Most of the pool held by results the worker keeps: the error says so, and suggests
    releasing, streaming or spilling them rather than managed memory."""
    require("cupy")
    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(pool_size="512MiB", maximum_pool_size="512MiB"))
        held = [client.submit(_keep, "cupy", 128 * MiB, key=f"persisted-{i}") for i in range(3)]
        client.gather(held)
        with pytest.raises(GPUOutOfMemoryError) as info:
            client.submit(_keep, "cupy", 192 * MiB, key="features-0").result()
    text = str(info.value)
    for part in ("'features-0'", "Most of it is not this task's", "held by results this worker "
                 "keeps", "write them out as they are made", "more GPUs"):
        assert part in text, (part, text)
    assert "managed=True" not in text


def test_same_configuration_twice_is_a_no_op(fresh):
    plugin = GPUMemoryPlugin(pool_size="512MiB")
    fresh.register_plugin(plugin)
    first = fresh.run(lambda: id(__import__("dask_gpu_interop.memory.state", fromlist=["x"]).active()))
    assert fresh.register_plugin(GPUMemoryPlugin(pool_size="512MiB")) == {}
    again = fresh.run(lambda: id(__import__("dask_gpu_interop.memory.state", fromlist=["x"]).active()))
    assert first == again


def test_live_buffers_refuse_a_new_configuration_unless_forced(fresh):
    import numpy as np

    fresh.register_plugin(GPUMemoryPlugin(pool_size="512MiB", frameworks=["cupy"]))
    require("cupy")

    def hold():
        import cupy

        return cupy.arange(1 << 20, dtype=cupy.float64)

    held = fresh.submit(hold, pure=False)
    held.result()
    with pytest.raises(GPUMemorySetupError, match="still allocated from it"):
        fresh.register_plugin(GPUMemoryPlugin(pool_size="256MiB", frameworks=["cupy"]))
    fresh.register_plugin(GPUMemoryPlugin(pool_size="256MiB", frameworks=["cupy"], force=True))
    (snap,) = memory_report(fresh).values()
    assert snap["options"]["pool_size"] == 256 * MiB
    # the old buffer is still good: it keeps its own pool alive
    total = fresh.submit(lambda x: float(x.sum()), held).result()
    assert total == float(np.arange(1 << 20, dtype=np.float64).sum())
    del held


def test_size_larger_than_the_device_is_refused_on_the_worker_and_can_be_retried(fresh):
    plugin = GPUMemoryPlugin(pool_size="100TB")
    with pytest.raises(GPUMemorySetupError, match="more than the device has"):
        fresh.register_plugin(plugin)
    assert plugin.name not in plugin_names(fresh)
    with pytest.raises(GPUMemorySetupError):
        fresh.register_plugin(plugin)
    assert {s["status"] for s in memory_report(fresh).values()} == {"no-plugin"}


def test_unregistering_restores_the_previous_resource(fresh):
    plugin = GPUMemoryPlugin(pool_size="512MiB")
    fresh.register_plugin(plugin)
    fresh.unregister_worker_plugin(plugin.name)

    def current():
        import rmm

        return type(rmm.mr.get_current_device_resource()).__name__

    assert set(fresh.run(current).values()) == {"CudaMemoryResource"}
    assert {s["status"] for s in memory_report(fresh).values()} == {"no-plugin"}


def test_log_directory_writes_one_log_per_worker(fresh, tmp_path):
    require("cupy")
    fresh.register_plugin(GPUMemoryPlugin(pool_size="512MiB", log_directory=str(tmp_path)))
    fresh.submit(measure_allocation, "cupy", 8 * MiB, pure=False).result()
    fresh.run(lambda: __import__("gc").collect())
    logs = list(tmp_path.glob("rmm_log.*.csv"))
    assert len(logs) == 1


def test_xgboost_shares_the_async_pool():
    """With async_alloc, XGBoost's allocations land in the device's default pool, which RMM uses."""
    require("xgboost")
    require("cupy")

    def train(use_pool: bool) -> dict:
        import cupy
        import xgboost
        from cuda.bindings import runtime

        from dask_gpu_interop.memory.stack import async_pool_numbers, set_pool_attribute

        _, device = runtime.cudaGetDevice()
        _, pool = runtime.cudaDeviceGetDefaultMemPool(device)
        rng = cupy.random.default_rng(0)
        x = rng.standard_normal((200_000, 16), dtype=cupy.float32)
        y = (x[:, 0] > 0).astype(cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()
        set_pool_attribute(pool, runtime.cudaMemPoolAttr.cudaMemPoolAttrUsedMemHigh, 0)
        rmm_high = async_pool_numbers(pool)["used_high_bytes"]  # the data, through RMM
        with xgboost.config_context(**({"use_cuda_async_pool": True} if use_pool else {})):
            booster = xgboost.train({"device": "cuda", "tree_method": "hist", "max_depth": 6},
                                    xgboost.DMatrix(x, label=y), num_boost_round=10)
        cupy.cuda.runtime.deviceSynchronize()
        high = async_pool_numbers(pool)["used_high_bytes"]
        return {"rmm_high": rmm_high, "high": high, "trees": booster.num_boosted_rounds()}

    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(async_alloc=True, release_threshold="1GiB"))
        assert xgboost_config(client) == {"use_cuda_async_pool": True}
        shared = client.submit(train, True, pure=False).result()
        alone = client.submit(train, False, pure=False).result()
        (snap,) = memory_report(client).values()
    assert snap["mode"] == "async" and snap["frameworks"]["xgboost"]["state"] == "shared"
    assert shared["trees"] == alone["trees"] == 10
    # XGBoost's working memory shows in the shared pool's high-water mark only when it shares it
    assert shared["high"] - shared["rmm_high"] > 8 * MiB, shared
    assert alone["high"] - alone["rmm_high"] < shared["high"] - shared["rmm_high"], (alone, shared)


def test_jax_is_capped_and_kept_from_preallocating():
    require("jax")

    def jax_limit():
        import jax
        import jax.numpy as jnp

        jnp.ones(1024).block_until_ready()
        stats = jax.devices()[0].memory_stats() or {}
        return {"limit": stats.get("bytes_limit"), "env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}

    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(pool_size="1GiB", jax_memory_fraction=0.1))
        got = client.submit(jax_limit, pure=False).result()
        (snap,) = memory_report(client).values()
    total = snap["device"]["total"]
    assert got["env"] == "false"
    assert got["limit"] is not None and got["limit"] <= 0.11 * total, (got, total)
    assert snap["frameworks"]["jax"]["state"] == "outside"


def test_torch_on_its_own_allocator_is_refused_unless_forced():
    require("torch")

    def use_torch():
        import torch

        return float(torch.ones(4, device="cuda").sum())

    with cuda_cluster() as client:
        assert client.submit(use_torch, pure=False).result() == 4.0
        with pytest.raises(GPUMemorySetupError, match="PyTorch already initialized CUDA"):
            client.register_plugin(GPUMemoryPlugin(pool_size="512MiB"))
        client.register_plugin(GPUMemoryPlugin(pool_size="512MiB", force=True))
        (snap,) = memory_report(client).values()
    assert snap["frameworks"]["torch"]["state"] == "outside"


def test_dask_cuda_rmm_options_are_refused_unless_forced():
    with cuda_cluster(rmm_pool_size="1GiB") as client:
        with pytest.raises(GPUMemorySetupError, match="dask-cuda already set up RMM"):
            client.register_plugin(GPUMemoryPlugin(pool_size="512MiB"))
        client.register_plugin(GPUMemoryPlugin(pool_size="512MiB", force=True))
        (snap,) = memory_report(client).values()
    assert snap["mode"] == "pool" and snap["options"]["pool_size"] == 512 * MiB


@pytest.mark.parametrize(
    "options",
    [
        {"pool_size": "1GiB"},
        {"managed": True, "pool_size": "1GiB", "maximum_pool_size": "4GiB"},
        {"async_alloc": True, "release_threshold": "1GiB"},
    ],
    ids=["pool", "managed", "async"],
)
def test_each_mode_runs_the_mixed_workload(options):
    require("cudf")
    from examples.demo.demo import run

    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(**options))
        result = run(client, "gpu", rows=400_000)
    assert result["train_auc"] > 0.9
    (snap,) = result["memory"].values()
    assert snap["status"] == "active"
    expected = "async" if options.get("async_alloc") else ("managed" if options.get("managed") else "pool")
    assert snap["mode"] == expected
    assert snap["peak_bytes"] > 0
    states = {name: entry["state"] for name, entry in snap["frameworks"].items()}
    assert states["cudf"] == "bound" and states["cupy"] == "bound"
    # async: PyTorch's own cudaMallocAsync backend on the same default pool
    assert states["torch"] == ("shared" if expected == "async" else "bound")
    assert states["xgboost"] == ("shared" if expected == "async" else "outside")


def test_torch_shares_the_async_pool_and_keeps_its_release_threshold():
    require("torch")

    def use_torch():
        import torch
        from cuda.bindings import runtime

        from dask_gpu_interop.memory.stack import async_pool_numbers

        _, device = runtime.cudaGetDevice()
        _, pool = runtime.cudaDeviceGetDefaultMemPool(device)
        before = async_pool_numbers(pool)["used_bytes"]
        x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        during = async_pool_numbers(pool)["used_bytes"]
        attr = runtime.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold
        threshold = int(runtime.cudaMemPoolGetAttribute(pool, attr)[1])
        del x
        return {"grown": during - before, "backend": torch.cuda.get_allocator_backend(),
                "threshold": threshold}

    with cuda_cluster() as client:
        client.register_plugin(GPUMemoryPlugin(async_alloc=True, release_threshold="1GiB"))
        got = client.submit(use_torch, pure=False).result()
        (snap,) = memory_report(client).values()
    assert got["backend"] == "cudaMallocAsync"
    assert got["grown"] >= 256 * MiB, got
    assert snap["frameworks"]["torch"]["state"] == "shared"
    assert got["threshold"] == 1 << 30, got


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_preload_under_dask_cuda_worker():
    """`dask cuda worker --preload dask_gpu_interop.preload --gpu-...`: the options reach the
    plugin, and dask-cuda's own preload is not handed options it would reject."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "dask", "cuda", "worker", address, "--no-dashboard",
         "--preload", "dask_gpu_interop.preload", "--gpu-pool-size", "0.25",
         "--gpu-maximum-pool-size", "0.5", "--gpu-frameworks", "cupy,torch"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        time.sleep(2)
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=120)
            (snap,) = memory_report(client).values()
            logs = [msg for lines in client.get_worker_logs().values() for _, msg in lines]
    finally:
        worker.terminate()
        out, _ = worker.communicate(timeout=60)
        scheduler.terminate()
        scheduler.wait(30)
    assert snap["status"] == "active" and snap["mode"] == "pool", snap
    total = snap["device"]["total"]
    assert abs(snap["options"]["pool_size"] - 0.25) < 1e-9
    assert 0.24 * total <= snap["pool_size"] <= 0.26 * total
    assert "Failed to start preload: dask_cuda.initialize" not in out + "\n".join(logs), out[-3000:]

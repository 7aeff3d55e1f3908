"""Watching GPU memory: Prometheus metrics (the collector's names and values, and the real
worker ``/metrics`` endpoint of distributed serving them), and the timeline plot of a run."""

from __future__ import annotations

import time
import urllib.request

import dask.config
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dask_gpu_interop import cluster_workers
from dask_gpu_interop.memory import metrics
from dask_gpu_interop.memory.timeline import COLUMNS, MemoryTimeline, record_memory

GIB = 2**30
ACTIVE = {
    "status": "active",
    "mode": "pool",
    "resource": "Statistics(Pool(Cuda))",
    "device": {"index": 0, "name": "NVIDIA H200", "total": 140 * GIB, "free": 100 * GIB},
    "pool_size": 16 * GIB,
    "maximum_pool_size": 120 * GIB,
    "current_bytes": 3 * GIB,
    "peak_bytes": 7 * GIB,
    "current_count": 12,
    "peak_count": 40,
    "total_bytes": 90 * GIB,
    "total_count": 1000,
    "frameworks": {
        "cupy": {"state": "bound", "current_bytes": 2 * GIB, "peak_bytes": 5 * GIB},
        "torch": {"state": "pending", "detail": "binds when first imported"},
        "xgboost": {"state": "outside"},
        "rmm": {"state": "bound", "current_bytes": 1 * GIB},
    },
    "cuda_pool": {"reserved_bytes": 20 * GIB, "used_bytes": 4 * GIB, "used_high_bytes": 9 * GIB},
}


def scrape(snapshot) -> dict:
    """{(sample name, frozenset(labels)): value} from a registry holding one collector."""
    registry = CollectorRegistry()
    registry.register(metrics.GPUMemoryCollector(snapshot))
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_task_prefixes_are_labelled_as_distributed_labels_them():
    tasks = {"prefixes": {"read-csv": {
        "count": 3, "overlapped": 1, "errors": 0, "peak_bytes_max": 2 * GIB,
        "peak_bytes_total": 5 * GIB, "left_bytes_total": -GIB, "largest_key": "read-csv-1"}},
        "running": {}}
    got = scrape(lambda: {**ACTIVE, "tasks": tasks})
    label = frozenset({("task_prefix_name", "read-csv")})
    t = "dask_worker_gpu_memory_task"
    assert got[(t + "_peak_max_bytes", label)] == 2 * GIB
    assert got[(t + "_peak_bytes_total", label)] == 5 * GIB
    assert got[(t + "_left_bytes", label)] == -GIB
    assert got[(t + "s_total", label)] == 3
    assert got[(t + "s_overlapped_total", label)] == 1
    assert not any(name.startswith(t) for name, _ in scrape(lambda: ACTIVE))


def test_active_worker_exports_every_number():
    got = scrape(lambda: ACTIVE)
    one = frozenset()
    expected = {
        "dask_worker_gpu_memory_plugin_active": 1,
        "dask_worker_gpu_memory_current_bytes": 3 * GIB,
        "dask_worker_gpu_memory_peak_bytes": 7 * GIB,
        "dask_worker_gpu_memory_current_allocations": 12,
        "dask_worker_gpu_memory_peak_allocations": 40,
        "dask_worker_gpu_memory_allocations_total": 1000,
        "dask_worker_gpu_memory_allocated_bytes_total": 90 * GIB,
        "dask_worker_gpu_memory_pool_bytes": 16 * GIB,
        "dask_worker_gpu_memory_pool_maximum_bytes": 120 * GIB,
        "dask_worker_gpu_memory_device_total_bytes": 140 * GIB,
        "dask_worker_gpu_memory_device_free_bytes": 100 * GIB,
    }
    for name, value in expected.items():
        assert got[(name, one)] == value, name
    fw = "dask_worker_gpu_memory_framework_"
    assert got[(fw + "current_bytes", frozenset({("framework", "cupy")}))] == 2 * GIB
    assert got[(fw + "current_bytes", frozenset({("framework", "rmm")}))] == 1 * GIB
    assert got[(fw + "peak_bytes", frozenset({("framework", "cupy")}))] == 5 * GIB
    assert (fw + "current_bytes", frozenset({("framework", "torch")})) not in got
    for name, state in (("cupy", "bound"), ("torch", "pending"), ("xgboost", "outside")):
        assert got[(fw + "state", frozenset({("framework", name), ("state", state)}))] == 1
    pool = "dask_worker_gpu_memory_cuda_pool_bytes"
    assert got[(pool, frozenset({("kind", "reserved")}))] == 20 * GIB
    assert got[(pool, frozenset({("kind", "used_high")}))] == 9 * GIB
    info = {labels: v for (name, labels), v in got.items() if name == "dask_worker_gpu_memory_info"}
    assert info == {frozenset({("status", "active"), ("mode", "pool"), ("device", "NVIDIA H200"),
                               ("resource", "Statistics(Pool(Cuda))")}): 1}


@pytest.mark.parametrize("status", ["no-gpu", "no-plugin"])
def test_without_the_plugin_only_status_is_exported(status):
    got = scrape(lambda: {"status": status, "worker": None, "name": "", "pid": 1})
    names = {name for name, _ in got}
    assert names == {"dask_worker_gpu_memory_plugin_active", "dask_worker_gpu_memory_info"}
    assert got[("dask_worker_gpu_memory_plugin_active", frozenset())] == 0
    (labels,) = [labels for name, labels in got if name == "dask_worker_gpu_memory_info"]
    assert ("status", status) in labels


def test_released_resource_still_reports_its_bytes():
    snap = {**ACTIVE, "status": "released (buffers still live)"}
    got = scrape(lambda: snap)
    assert got[("dask_worker_gpu_memory_plugin_active", frozenset())] == 0
    assert got[("dask_worker_gpu_memory_current_bytes", frozenset())] == 3 * GIB


def test_a_failing_snapshot_does_not_break_the_scrape(caplog):
    def broken():
        raise RuntimeError("cudaMemGetInfo failed: an illegal memory access")

    got = scrape(broken)
    assert got[("dask_worker_gpu_memory_plugin_active", frozenset())] == 0
    (labels,) = [labels for name, labels in got if name == "dask_worker_gpu_memory_info"]
    assert ("status", "error") in labels
    assert "illegal memory access" in caplog.text


def test_namespace_follows_distributeds_setting():
    with dask.config.set({"distributed.dashboard.prometheus.namespace": "lab"}):
        got = scrape(lambda: ACTIVE)
    assert ("lab_worker_gpu_memory_current_bytes", frozenset()) in got


def test_register_is_idempotent_and_reversible():
    registry = CollectorRegistry()
    first = metrics.register(registry)
    assert first is not None and metrics.register(registry) is first
    text = generate_latest(registry).decode()
    assert text.count("# TYPE dask_worker_gpu_memory_plugin_active gauge") == 1
    assert metrics.unregister(registry)
    assert not metrics.unregister(registry)
    assert "gpu_memory" not in generate_latest(registry).decode()


def _register_and_port(dask_worker):
    from dask_gpu_interop.memory import metrics

    metrics.register()
    metrics.register()  # a second call (a plugin set up twice) must not duplicate anything
    return dask_worker.http_server.port


def test_worker_metrics_endpoint_serves_gpu_memory(cpu_client):
    ports = cpu_client.run(_register_and_port)
    for address, port in ports.items():
        host = address.split("://")[1].rsplit(":", 1)[0]
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
        check_worker_metrics(text)


def check_worker_metrics(text):
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # distributed's own worker metrics are still there, next to ours
    assert "dask_worker_threads" in families
    active = families["dask_worker_gpu_memory_plugin_active"]
    assert [s.value for s in active.samples] == [0.0]
    (info,) = families["dask_worker_gpu_memory_info"].samples
    assert info.name == "dask_worker_gpu_memory_info" and info.labels["status"] == "no-gpu"
    assert text.count("# TYPE dask_worker_gpu_memory_plugin_active gauge") == 1


# ---- the timeline ----

PNG = b"\x89PNG\r\n\x1a\n"


def fake_source():
    """Two GPU workers whose allocations grow, and one that does not answer."""
    calls = iter(range(10**6))

    def source():
        i = next(calls)
        out = {
            f"tcp://10.0.0.{w}:1234": {
                **ACTIVE, "name": f"gpu-{w}", "current_bytes": (i % 4 + w) * GIB,
                "device": {**ACTIVE["device"], "free": (100 - i % 4) * GIB},
            }
            for w in range(2)
        }
        out["tcp://10.0.0.9:1234"] = OSError("worker gone")
        return out

    return source


def test_timeline_samples_every_worker_and_plots(tmp_path):
    timeline = MemoryTimeline(source=fake_source(), interval=0.05)
    with timeline:
        time.sleep(0.5)
    frame = timeline.to_frame()
    assert list(frame.columns) == list(COLUMNS)
    assert set(frame["worker"]) == {"tcp://10.0.0.0:1234", "tcp://10.0.0.1:1234"}
    assert len(frame) >= 2 * 5  # ~10 rounds; at least half of them on a busy machine
    assert frame["t"].is_monotonic_increasing
    assert frame["device_used_bytes"].iloc[0] == 40 * GIB
    assert any("worker gone" in e for e in timeline.errors)
    path = timeline.plot(tmp_path / "out" / "memory.png", title="a run")
    assert path.read_bytes().startswith(PNG)


def test_the_plot_adds_a_panel_of_task_prefixes_when_workers_report_them(tmp_path):
    from matplotlib.image import imread

    tasks = {"prefixes": {f"step{i}": {"count": 2, "overlapped": 0, "peak_bytes_max": i * GIB}
                          for i in range(1, 4)}}
    source = fake_source()
    plain = MemoryTimeline(source=source, interval=1)
    plain.sample()
    with_tasks = MemoryTimeline(source=lambda: {w: {**s, "tasks": tasks} if isinstance(s, dict)
                                                else s for w, s in source().items()}, interval=1)
    with_tasks.sample()
    assert set(with_tasks.tasks) == {"tcp://10.0.0.0:1234", "tcp://10.0.0.1:1234"}
    a = imread(plain.plot(tmp_path / "plain.png"))
    b = imread(with_tasks.plot(tmp_path / "tasks.png"))
    assert b.shape[0] > a.shape[0]  # the prefixes' panel below the workers


def test_timeline_arguments_are_checked():
    with pytest.raises(ValueError, match="interval=0"):
        MemoryTimeline(source=fake_source(), interval=0)
    with pytest.raises(ValueError, match="give a client"):
        MemoryTimeline()
    timeline = MemoryTimeline(source=fake_source(), interval=1).start()
    try:
        with pytest.raises(RuntimeError, match="already recording"):
            timeline.start()
    finally:
        timeline.stop()


def test_record_memory_on_a_real_cluster_writes_png_and_csv(cpu_client, tmp_path):
    import dask.array as da

    with pytest.warns(UserWarning, match=r"no GPU memory samples \(the workers report: no-gpu\)"):
        with record_memory(cpu_client, png=tmp_path / "m.png", csv=tmp_path / "m.csv",
                           interval=0.2) as tl:
            da.random.random((2000, 2000), chunks=500).sum().compute()
            time.sleep(0.5)
    assert not (tmp_path / "m.png").exists()  # CPU workers: nothing to draw, and it says so
    frame = pd.read_csv(tmp_path / "m.csv")
    assert set(frame["worker"]) == set(cluster_workers(cpu_client))
    assert set(frame["status"]) == {"no-gpu"}
    assert len(tl.samples) == len(frame)


def test_record_memory_writes_the_plot_when_the_run_fails(tmp_path):
    gpu_samples = fake_source()
    with pytest.raises(ZeroDivisionError):
        with record_memory(None, png=tmp_path / "failed.png", interval=0.05,
                           source=gpu_samples):
            time.sleep(0.2)
            raise ZeroDivisionError("the run failed")
    assert (tmp_path / "failed.png").read_bytes().startswith(PNG)

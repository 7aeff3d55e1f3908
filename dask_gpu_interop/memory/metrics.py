"""The worker's GPU memory as Prometheus metrics, on distributed's worker ``/metrics`` endpoint.

distributed serves ``prometheus_client``'s default registry there, so a collector registered
in the worker process appears next to ``dask_worker_memory_bytes`` and the rest, named in the
same style (namespace from ``distributed.dashboard.prometheus.namespace``, default "dask"):

    dask_worker_gpu_memory_plugin_active              1 while GPUMemoryPlugin's resource is set up
    dask_worker_gpu_memory_info{status,mode,device,resource}   always 1: what the worker has
    dask_worker_gpu_memory_current_bytes / _peak_bytes           through the RMM resource
    dask_worker_gpu_memory_current_allocations / _peak_allocations
    dask_worker_gpu_memory_allocations_total, _allocated_bytes_total   since setup (counters)
    dask_worker_gpu_memory_pool_bytes, _pool_maximum_bytes
    dask_worker_gpu_memory_device_total_bytes, _device_free_bytes
    dask_worker_gpu_memory_cuda_pool_bytes{kind}                 async mode: RMM and XGBoost
    dask_worker_gpu_memory_framework_current_bytes{framework} / _framework_peak_bytes
    dask_worker_gpu_memory_framework_state{framework,state}      1 for the framework's state
    dask_worker_gpu_memory_task_peak_max_bytes{task_prefix_name}  highest peak of one task
    dask_worker_gpu_memory_task_peak_bytes_total{task_prefix_name}     sum of the tasks' peaks
    dask_worker_gpu_memory_task_left_bytes{task_prefix_name}     left allocated by the tasks
    dask_worker_gpu_memory_tasks_total{task_prefix_name}, _tasks_overlapped_total{...}

Numbers come from ``report.worker_snapshot``, the same as ``memory_report``. Where the plugin
is not set up (no GPU, or not registered) only ``plugin_active`` (0) and ``info`` are exported:
absent series, rather than zeros that would read as "nothing allocated".
"""

from __future__ import annotations

import logging
import threading

import dask.config

from . import report

logger = logging.getLogger("distributed.worker.gpu_interop")

SUBSYSTEM = "worker"
PREFIX = "gpu_memory"

_lock = threading.Lock()
_registered: dict[int, tuple[object, GPUMemoryCollector]] = {}


def _scalar_metrics():
    """(snapshot key, metric suffix, kind, help) for the per-worker numbers."""
    return (
        ("current_bytes", "current_bytes", "gauge", "Bytes allocated through the worker's RMM resource now."),
        ("peak_bytes", "peak_bytes", "gauge", "Most bytes allocated at once through the RMM resource since setup."),
        ("current_count", "current_allocations", "gauge", "Buffers allocated through the RMM resource now."),
        ("peak_count", "peak_allocations", "gauge", "Most buffers allocated at once since setup."),
        ("total_count", "allocations", "counter", "Buffers allocated through the RMM resource since setup."),
        ("total_bytes", "allocated_bytes", "counter", "Bytes allocated through the RMM resource since setup."),
        ("pool_size", "pool_bytes", "gauge", "Size of the worker's RMM pool (bytes reserved from the device)."),
        ("maximum_pool_size", "pool_maximum_bytes", "gauge", "Largest the RMM pool may grow to."),
    )


class GPUMemoryCollector:
    """A prometheus_client collector: one worker snapshot per scrape, turned into metrics."""

    def __init__(self, snapshot=None):
        self._snapshot = snapshot or (lambda: report.worker_snapshot(None))
        self._logged_errors: set[str] = set()

    def name(self, suffix: str) -> str:
        namespace = dask.config.get("distributed.dashboard.prometheus.namespace", "dask")
        return "_".join(part for part in (namespace, SUBSYSTEM, PREFIX, suffix) if part)

    def describe(self):
        """Declare our names (without sampling the device) so the registry can check clashes."""
        return list(self._families(None))

    def collect(self):
        try:
            snap = self._snapshot()
        except Exception as err:  # a scrape must never break the worker's other metrics
            message = f"{type(err).__name__}: {err}"
            if message not in self._logged_errors:
                self._logged_errors.add(message)
                logger.warning("GPU memory metrics: reading the memory state failed: %s", message)
            snap = {"status": "error"}
        return list(self._families(snap))

    def _families(self, snap):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
        )

        declaring = snap is None
        snap = snap or {}
        status = snap.get("status", "unknown")
        active = GaugeMetricFamily(
            self.name("plugin_active"),
            "1 while GPUMemoryPlugin's memory resource is set up on this worker, else 0.",
        )
        info = InfoMetricFamily(
            self.name(""),  # InfoMetricFamily appends "_info"
            "What this worker's GPU memory is: status (active, no-gpu, no-plugin, ...), mode, device.",
        )
        if not declaring:
            active.add_metric([], 1.0 if status == "active" else 0.0)
            device = snap.get("device") or {}
            info.add_metric([], {
                "status": str(status),
                "mode": str(snap.get("mode") or ""),
                "device": str(device.get("name") or ""),
                "resource": str(snap.get("resource") or ""),
            })
        yield active
        yield info
        has_numbers = declaring or "mode" in snap
        if not has_numbers:
            return

        for key, suffix, kind, doc in _scalar_metrics():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = cls(self.name(suffix), doc)
            if snap.get(key) is not None:
                family.add_metric([], float(snap[key]))
            if declaring or family.samples:
                yield family

        device = snap.get("device") or {}
        for key, suffix, doc in (
            ("total", "device_total_bytes", "Memory of the worker's GPU."),
            ("free", "device_free_bytes", "Free memory on the worker's GPU (all processes)."),
        ):
            family = GaugeMetricFamily(self.name(suffix), doc)
            if device.get(key) is not None:
                family.add_metric([], float(device[key]))
            if declaring or family.samples:
                yield family

        pool = GaugeMetricFamily(
            self.name("cuda_pool_bytes"),
            "The device's CUDA async pool, shared by RMM and XGBoost: reserved, used, used_high.",
            labels=["kind"],
        )
        for key, value in (snap.get("cuda_pool") or {}).items():
            pool.add_metric([key.removesuffix("_bytes")], float(value))
        if declaring or pool.samples:
            yield pool

        current = GaugeMetricFamily(
            self.name("framework_current_bytes"),
            "Bytes a framework has allocated from the worker's resource (where it can be told apart; "
            "'rmm' is the rest: cuDF, PyTorch, UCX buffers).",
            labels=["framework"],
        )
        peak = GaugeMetricFamily(
            self.name("framework_peak_bytes"),
            "Most bytes a framework had allocated at once since setup.",
            labels=["framework"],
        )
        state = GaugeMetricFamily(
            self.name("framework_state"),
            "1 for each framework's binding state: bound, shared, outside, pending, skipped, failed.",
            labels=["framework", "state"],
        )
        for name, entry in (snap.get("frameworks") or {}).items():
            if entry.get("current_bytes") is not None:
                current.add_metric([name], float(entry["current_bytes"]))
            if entry.get("peak_bytes") is not None:
                peak.add_metric([name], float(entry["peak_bytes"]))
            if entry.get("state"):
                state.add_metric([name, str(entry["state"])], 1.0)
        for family in (current, peak, state):
            if declaring or family.samples:
                yield family
        yield from self._task_families(snap, declaring)

    def _task_families(self, snap, declaring):
        """Per task prefix, labelled as distributed labels its own prefix metrics."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        label = ["task_prefix_name"]
        families = {
            "peak_bytes_max": GaugeMetricFamily(
                self.name("task_peak_max_bytes"),
                "Most device bytes one task of this prefix allocated above what was allocated "
                "when it started.", labels=label),
            "peak_bytes_total": CounterMetricFamily(
                self.name("task_peak_bytes"),
                "Sum of the peaks of this prefix's tasks (divide by tasks_total for the mean).",
                labels=label),
            "left_bytes_total": GaugeMetricFamily(
                self.name("task_left_bytes"),
                "Device bytes this prefix's tasks left allocated (their results; negative when "
                "they freed more than they kept).", labels=label),
            "count": CounterMetricFamily(
                self.name("tasks"), "Tasks of this prefix whose device memory was recorded.",
                labels=label),
            "overlapped": CounterMetricFamily(
                self.name("tasks_overlapped"),
                "Tasks of this prefix that ran beside others on the GPU: their figures overlap.",
                labels=label),
        }
        for prefix, stats in ((snap.get("tasks") or {}).get("prefixes") or {}).items():
            for key, family in families.items():
                family.add_metric([prefix], float(stats.get(key, 0)))
        for family in families.values():
            if declaring or family.samples:
                yield family


def register(registry=None) -> GPUMemoryCollector | None:
    """Export this process's GPU memory on the worker's ``/metrics`` (idempotent).

    Returns the collector, or None when prometheus_client is not installed (distributed then
    serves no metrics either) or another collector already owns these names.
    """
    try:
        import prometheus_client
    except ImportError:
        logger.debug("GPU memory metrics: prometheus_client is not installed")
        return None
    registry = registry if registry is not None else prometheus_client.REGISTRY
    with _lock:
        known = _registered.get(id(registry))
        if known is not None and known[0] is registry:
            return known[1]
        collector = GPUMemoryCollector()
        try:
            registry.register(collector)
        except ValueError as err:  # names taken, e.g. by a copy of this module reloaded
            logger.warning("GPU memory metrics not registered: %s", err)
            return None
        _registered[id(registry)] = (registry, collector)
        return collector


def unregister(registry=None) -> bool:
    """Take the collector back out of ``registry`` (default: prometheus_client's)."""
    try:
        import prometheus_client
    except ImportError:
        return False
    registry = registry if registry is not None else prometheus_client.REGISTRY
    with _lock:
        known = _registered.pop(id(registry), None)
        if known is None or known[0] is not registry:
            return False
        registry.unregister(known[1])
        return True

"""What each worker's GPU memory is doing: resource, pool, current/peak bytes, per framework,
what was spilled off the GPU, and per task prefix (peak and what the tasks left allocated)."""

from __future__ import annotations

import dataclasses
import os

from .. import compat, device
from . import state
from .sizes import byte_text

COUNTS = ("current_bytes", "peak_bytes", "current_count", "peak_count", "total_bytes", "total_count")
REMAINDER = "rmm"  # bytes through RMM's current resource not claimed by a framework adaptor


def _counts(adaptor) -> dict:
    stats = adaptor.allocation_counts
    if dataclasses.is_dataclass(stats):
        stats = dataclasses.asdict(stats)
    return {key: int(stats[key]) for key in COUNTS if key in stats}


def worker_snapshot(dask_worker=None) -> dict:
    """This worker's memory state as plain data (run on workers by ``memory_report``)."""
    out = {
        "worker": getattr(dask_worker, "address", None),
        "name": str(getattr(dask_worker, "name", "")),
        "pid": os.getpid(),
    }
    current = state.active()
    if current is None:
        out["status"] = "no-gpu" if device.gpu_count() == 0 else "no-plugin"
        return out
    st = current.stack
    free, total = device.memory_info()
    out.update(
        status="active" if current.owner else "released (buffers still live)",
        plugin=current.owner,
        mode=current.mode,
        resource=st.description(),
        device={**current.device.as_dict(), "free": free, "total": total},
        pool_size=int(st.pool.pool_size()) if st.pool is not None else current.plan.initial,
        maximum_pool_size=current.plan.maximum,
        setup_seconds=round(current.setup_seconds, 4),
        notes=list(current.notes),
        options=current.config.options(),
    )
    if st.total is not None:
        out.update(_counts(st.total))
    frameworks = {}
    claimed = 0
    for name, binding in current.bindings.items():
        entry = binding.as_dict()
        adaptor = st.per_framework.get(name)
        if adaptor is not None:
            numbers = _counts(adaptor)
            entry.update(numbers)
            claimed += numbers.get("current_bytes", 0)
        frameworks[name] = entry
    if st.total is not None:
        frameworks[REMAINDER] = {
            "state": "bound",
            "detail": "through RMM's current resource: cuDF, PyTorch, UCX receive buffers",
            "current_bytes": out.get("current_bytes", 0) - claimed,
        }
    out["frameworks"] = frameworks
    if st.async_pool_handle is not None:
        from .stack import async_pool_numbers

        out["cuda_pool"] = async_pool_numbers(st.async_pool_handle)
    if current.tasks is not None:
        out["tasks"] = current.tasks.snapshot()
    moved = spilled(dask_worker)
    if moved:
        out["spilled"] = moved
    return out


def spilled(dask_worker=None) -> dict:
    """What this worker keeps off its GPU: ``"cudf"``, the buffers cuDF's spilling moved to
    host memory (where it is on); ``"results"``, the device results its data store (dask-cuda's)
    moved to host memory and to disk. Empty where neither applies."""
    found = {"results": compat.device_results_moved(dask_worker), "cudf": compat.cudf_spilled()}
    return {kind: numbers for kind, numbers in found.items() if numbers is not None}


class MemoryReport(dict):
    """Each worker's GPU memory: ``{worker address: snapshot}``, printed as a table.

    A snapshot holds the worker's device, its resource stack, the pool's size, current and
    peak bytes and buffer counts, each framework's state and bytes, and the task prefixes by
    peak; :meth:`to_frame` and :meth:`tasks_frame` give them as pandas tables.

    Parameters
    ----------
    snapshots : dict
        ``{worker address: snapshot}``, as :func:`memory_report` gathers them.

    Examples
    --------
    >>> from dask_gpu_interop import MemoryReport
    >>> report = MemoryReport({"tcp://10.0.0.5:40000": {"gpu": False}})
    >>> sorted(report)
    ['tcp://10.0.0.5:40000']
    """

    def __str__(self) -> str:
        lines = []
        for address in sorted(self):
            lines.extend(_worker_lines(address, self[address]))
        return "\n".join(lines) if lines else "(no workers)"

    def _repr_pretty_(self, printer, cycle):  # IPython
        printer.text(str(self))

    def to_frame(self):
        """One row per worker (pandas), with current/peak bytes and per-framework bytes."""
        import pandas as pd

        rows = []
        for address, snap in self.items():
            row = {k: snap.get(k) for k in ("name", "status", "mode", "pool_size", *COUNTS)}
            row["worker"] = address
            row["device"] = (snap.get("device") or {}).get("name")
            moved = snap.get("spilled") or {}
            row["spilled_cudf_bytes"] = (moved.get("cudf") or {}).get("host_bytes", 0)
            row["spilled_results_bytes"] = sum((moved.get("results") or {}).get(key, 0)
                                               for key in ("host_bytes", "disk_bytes"))
            for name, entry in (snap.get("frameworks") or {}).items():
                row[f"{name}_state"] = entry.get("state")
                row[f"{name}_current_bytes"] = entry.get("current_bytes")
            rows.append(row)
        return pd.DataFrame(rows).set_index("worker") if rows else pd.DataFrame()

    def tasks_frame(self):
        """One row per worker and task prefix (pandas): tasks run, highest and mean peak
        bytes, bytes left allocated, and how many ran beside other tasks (overlapping)."""
        import pandas as pd

        rows = []
        for address, snap in self.items():
            for prefix, stats in ((snap.get("tasks") or {}).get("prefixes") or {}).items():
                count = stats.get("count") or 0
                rows.append({
                    "worker": address,
                    "prefix": prefix,
                    "tasks": count,
                    "peak_bytes_max": stats.get("peak_bytes_max"),
                    "peak_bytes_mean": stats.get("peak_bytes_total", 0) / count if count else None,
                    "left_bytes": stats.get("left_bytes_total"),
                    "overlapped": stats.get("overlapped"),
                    "errors": stats.get("errors"),
                    "largest_key": stats.get("largest_key"),
                })
        columns = ["worker", "prefix", "tasks", "peak_bytes_max", "peak_bytes_mean",
                   "left_bytes", "overlapped", "errors", "largest_key"]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.sort_values("peak_bytes_max", ascending=False, ignore_index=True)


def _worker_lines(address: str, snap: dict) -> list[str]:
    status = snap.get("status")
    if status in ("no-gpu", "no-plugin"):
        why = {
            "no-gpu": "no GPU: the plugin does nothing here",
            "no-plugin": "GPU present, GPUMemoryPlugin not set up",
        }[status]
        return [f"{address}  {why}"]
    dev = snap.get("device") or {}
    head = (
        f"{address}  {dev.get('name', '?')} "
        f"({byte_text(dev.get('total'))}, {byte_text(dev.get('free'))} free)"
        f"  {snap.get('mode')}: {snap.get('resource')}"
    )
    lines = [head]
    pool = f"pool {byte_text(snap.get('pool_size'))}"
    if snap.get("maximum_pool_size"):
        pool += f" (max {byte_text(snap['maximum_pool_size'])})"
    if "current_bytes" in snap:
        pool += (
            f"  current {byte_text(snap['current_bytes'])}"
            f" in {snap.get('current_count', 0)} buffers"
            f"  peak {byte_text(snap.get('peak_bytes'))}"
        )
    else:
        pool += "  (statistics off)"
    pool += f"  setup {snap.get('setup_seconds', 0):.2f} s"
    if snap.get("status") != "active":
        pool += f"  [{snap.get('status')}]"
    lines.append("    " + pool)
    if snap.get("cuda_pool"):
        cp = snap["cuda_pool"]
        lines.append(
            f"    CUDA pool: reserved {byte_text(cp.get('reserved_bytes'))}"
            f", used {byte_text(cp.get('used_bytes'))}"
            f", high {byte_text(cp.get('used_high_bytes'))} (RMM and XGBoost together)"
        )
    for name, entry in (snap.get("frameworks") or {}).items():
        numbers = ""
        if "current_bytes" in entry:
            numbers = f"current {byte_text(entry['current_bytes'])}"
            if "peak_bytes" in entry:
                numbers += f", peak {byte_text(entry['peak_bytes'])}"
            numbers += "  "
        lines.append(f"    {name:<8} {entry.get('state', ''):<8} {numbers}{entry.get('detail', '')}")
    lines.extend(_spilled_lines(snap.get("spilled")))
    lines.extend(_task_lines(snap.get("tasks")))
    for note in snap.get("notes") or ():
        lines.append(f"    note: {note}")
    return lines


def _spilled_lines(moved: dict | None) -> list[str]:
    """One line of what the worker keeps off its GPU, where it keeps anything there."""
    cudf, results = (moved or {}).get("cudf") or {}, (moved or {}).get("results") or {}
    parts = []
    if cudf.get("host_buffers"):
        parts.append(f"cuDF's spilling {byte_text(cudf['host_bytes'])} in "
                     f"{cudf['host_buffers']} buffers")  # fmt: skip
    if results.get("host_keys"):
        parts.append(f"results {byte_text(results['host_bytes'])} ({results['host_keys']} keys)")
    if results.get("disk_keys"):
        parts.append(f"on disk {byte_text(results['disk_bytes'])} ({results['disk_keys']} keys)")
    return [f"    off the GPU: {'; '.join(parts)}"] if parts else []


TASK_LINES = 5


def _task_lines(tasks: dict | None) -> list[str]:
    """The task prefixes with the highest peaks, and whether their figures overlap."""
    prefixes = (tasks or {}).get("prefixes") or {}
    if not prefixes:
        return []
    ranked = sorted(prefixes.items(), key=lambda item: -item[1].get("peak_bytes_max", 0))
    lines = ["    tasks by peak device memory (per prefix):"]
    for prefix, stats in ranked[:TASK_LINES]:
        count = stats.get("count") or 0
        mean = stats.get("peak_bytes_total", 0) // count if count else 0
        text = (f"      {prefix:<24} {count:>6} tasks"
                f"  peak {byte_text(stats.get('peak_bytes_max'))}"
                f" (mean {byte_text(mean)})  left {byte_text(stats.get('left_bytes_total', 0))}")
        if stats.get("errors"):
            text += f"  {stats['errors']} failed"
        lines.append(text)
    if len(ranked) > TASK_LINES:
        lines.append(f"      ... {len(ranked) - TASK_LINES} more prefixes (MemoryReport.tasks_frame())")
    overlapped = sum(stats.get("overlapped", 0) for _, stats in ranked)
    total = sum(stats.get("count", 0) for _, stats in ranked)
    if overlapped:
        lines.append(
            f"      {overlapped} of {total} tasks ran beside others on this GPU: their figures "
            "include each other's allocations (one thread per GPU makes them exact)")
    running = (tasks or {}).get("running") or {}
    if running:
        shown = ", ".join(f"{key} {byte_text(peak)}" for key, peak in list(running.items())[:3])
        lines.append(f"      running now (peak so far): {shown}")
    return lines


def memory_report(client, workers=None) -> MemoryReport:
    """The GPU memory of every worker (or of ``workers``) of ``client``'s cluster.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster.
    workers : list of str, optional
        The workers' addresses to ask; all of them by default.

    Returns
    -------
    MemoryReport
        Each worker's snapshot; ``print`` it for a table per worker.

    Raises
    ------
    TypeError
        ``client`` is not a ``distributed.Client`` (a cluster given in its place: pass
        ``Client(cluster)``).

    Examples
    --------
    >>> from dask_gpu_interop import memory_report
    >>> print(memory_report(client))  # doctest: +SKIP
    tcp://127.0.0.1:40121 ...
    """
    from .._client import require_client

    results = require_client(client, "memory_report").run(worker_snapshot, workers=workers)
    return MemoryReport(results)

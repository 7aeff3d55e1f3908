"""Each worker's GPU memory over a run: sampled from the client, plotted as a PNG.

    with record_memory(client, png="memory.png", interval=0.5):
        run_pipeline(client)

or, to keep the samples:

    with MemoryTimeline(client, interval=0.5) as timeline:
        run_pipeline(client)
    timeline.plot("memory.png"); timeline.to_frame()

A background thread asks every worker for its ``worker_snapshot`` (what ``memory_report``
shows) every ``interval`` seconds. Client-side sampling needs nothing installed on the workers
and survives workers coming and going (a worker that fails to answer is skipped for that
sample). Spikes shorter than the interval show in the peak line, which RMM tracks itself.
Below the workers, a panel ranks the task prefixes by the most device memory one task took.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .report import worker_snapshot

logger = logging.getLogger(__name__)

COLUMNS = (
    "t", "time", "worker", "name", "status", "current_bytes", "peak_bytes", "pool_size",
    "device_used_bytes", "device_total_bytes", "cuda_pool_used_bytes", "cuda_pool_reserved_bytes",
)
MAX_PANELS = 16
GIB = 2**30


class MemoryTimeline:
    """Sample every worker's memory state every ``interval`` seconds while running.

    A background thread on the client asks every worker for what :func:`memory_report`
    shows, so nothing needs installing on the workers, and workers may come and go (one that
    does not answer is skipped for that sample). Spikes shorter than the interval still show
    in the peak, which RMM tracks itself. Use it as a context manager, or call :meth:`start`
    and :meth:`stop`.

    Parameters
    ----------
    client : distributed.Client or None
        The cluster's client; may be None when ``source`` is given.
    interval : float
        Seconds between samples, above 0.
    source : callable, optional
        What to sample instead of the workers: called with no arguments, it returns
        ``{worker: snapshot dict or exception}``.

    Attributes
    ----------
    samples : list of dict
        One row per worker and sample (see :meth:`to_frame`).
    tasks : dict
        ``{worker: its latest per-task-prefix figures}``.
    errors : list of str
        Why samples or workers were skipped (the first 100).

    Raises
    ------
    ValueError
        ``interval`` is not a number above 0, or neither ``client`` nor ``source`` is given.

    See Also
    --------
    record_memory : record a block and write the plot at its end.

    Examples
    --------
    >>> from dask_gpu_interop import MemoryTimeline
    >>> with MemoryTimeline(client, interval=0.5) as timeline:
    ...     run_pipeline(client)
    >>> timeline.plot("memory.png")
    >>> timeline.to_frame()
    """

    def __init__(self, client=None, interval: float = 1.0, *, source=None):
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval={interval!r}: give a number of seconds above 0")
        if client is None and source is None:
            raise ValueError("give a client (or a source callable)")
        if source is None:
            from .._client import require_client

            require_client(client, "MemoryTimeline")
        self.interval = float(interval)
        self._source = source or (
            lambda: client.run(worker_snapshot, on_error="return")
        )
        self.samples: list[dict] = []
        self.tasks: dict = {}  # worker -> its latest per-task-prefix figures
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None

    def start(self) -> MemoryTimeline:
        """Start sampling in a background thread.

        Returns
        -------
        MemoryTimeline
            This timeline.

        Raises
        ------
        RuntimeError
            It is already recording.
        """
        if self._thread is not None:
            raise RuntimeError("this MemoryTimeline is already recording")
        self._t0 = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-timeline", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemoryTimeline:
        """Stop sampling, after one last sample (so the end of the run is always in).

        Returns
        -------
        MemoryTimeline
            This timeline; stopping one that is not recording only returns it.
        """
        if self._thread is None:
            return self
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample()
        return self

    def __enter__(self) -> MemoryTimeline:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            deadline += self.interval
            self._stop.wait(max(0.0, deadline - time.monotonic()))

    def sample(self) -> None:
        """Take one sample of every worker now (a failed sample is noted in ``errors``)."""
        if self._t0 is None:
            self._t0 = time.monotonic()
        t, now = time.monotonic() - self._t0, time.time()
        try:
            answers = self._source()
        except Exception as err:  # the cluster may be restarting: keep the run going
            self._note(f"sampling failed: {type(err).__name__}: {err}")
            return
        rows = []
        for worker, snap in answers.items():
            if isinstance(snap, BaseException):
                self._note(f"{worker}: {type(snap).__name__}: {snap}")
                continue
            rows.append(_row(t, now, worker, snap))
        with self._lock:
            self.samples.extend(rows)
            for worker, snap in answers.items():
                if isinstance(snap, dict) and snap.get("tasks"):
                    self.tasks[worker] = snap["tasks"]

    def _note(self, message: str) -> None:
        with self._lock:
            if len(self.errors) < 100:
                self.errors.append(message)
        logger.debug("memory timeline: %s", message)

    def to_frame(self):
        """The samples as a table.

        Returns
        -------
        pandas.DataFrame
            One row per worker and sample: ``t`` (seconds since the start), ``time``,
            ``worker``, ``name``, ``status``, the bytes allocated through RMM
            (``current_bytes``, ``peak_bytes``), ``pool_size``, the device's memory in use
            and total, and the CUDA async pool's used and reserved bytes.

        Raises
        ------
        ImportError
            pandas is not installed (``pip install 'dask-gpu-interop[plot]'``).
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "the samples' table needs pandas: pip install 'dask-gpu-interop[plot]'") from None

        with self._lock:
            return pd.DataFrame(list(self.samples), columns=list(COLUMNS))

    def plot(self, path, *, title: str | None = None) -> Path:
        """Write a PNG of the samples.

        One panel per worker (the first 16) shows, over time, the device's memory in use, the
        RMM pool, the bytes allocated through RMM (current and peak) and, in async mode, the
        CUDA pool; a last panel ranks the task prefixes by the most device memory one task
        took.

        Parameters
        ----------
        path : str or os.PathLike
            The PNG to write (its folder is made).
        title : str, optional
            The figure's title. Default: "GPU memory per worker".

        Returns
        -------
        pathlib.Path or None
            ``path``; None, and no file, when no worker had GPU numbers (CPU workers).

        Raises
        ------
        ImportError
            matplotlib or pandas is not installed (``pip install 'dask-gpu-interop[plot]'``).
        """
        with self._lock:
            tasks = dict(self.tasks)
        return plot_timeline(self.to_frame(), path, title=title, interval=self.interval,
                             tasks=tasks)


def _row(t: float, now: float, worker: str, snap: dict) -> dict:
    device = snap.get("device") or {}
    cuda_pool = snap.get("cuda_pool") or {}
    total, free = device.get("total"), device.get("free")
    return {
        "t": round(t, 3),
        "time": now,
        "worker": worker,
        "name": snap.get("name") or worker,
        "status": snap.get("status"),
        "current_bytes": snap.get("current_bytes"),
        "peak_bytes": snap.get("peak_bytes"),
        "pool_size": snap.get("pool_size"),
        "device_used_bytes": (total - free) if total is not None and free is not None else None,
        "device_total_bytes": total,
        "cuda_pool_used_bytes": cuda_pool.get("used_bytes"),
        "cuda_pool_reserved_bytes": cuda_pool.get("reserved_bytes"),
    }


def gpu_statuses(frame) -> str | None:
    """None when some worker has GPU numbers; else what the workers report (for a message)."""
    numeric = ("device_used_bytes", "pool_size", "current_bytes", "peak_bytes",
               "cuda_pool_used_bytes", "cuda_pool_reserved_bytes")
    if len(frame) and frame[list(numeric)].notna().any(axis=None):
        return None
    statuses = sorted({str(s) for s in frame.get("status", []) if s is not None})
    return ", ".join(statuses) or "no samples"


def prefix_peaks(tasks: dict | None, limit: int = 10) -> list[tuple[str, int, int, int]]:
    """(prefix, highest peak bytes, tasks, overlapped) over all workers, highest first."""
    merged: dict[str, list[int]] = {}
    for snapshot in (tasks or {}).values():
        for prefix, stats in (snapshot.get("prefixes") or {}).items():
            entry = merged.setdefault(prefix, [0, 0, 0])
            entry[0] = max(entry[0], int(stats.get("peak_bytes_max", 0)))
            entry[1] += int(stats.get("count", 0))
            entry[2] += int(stats.get("overlapped", 0))
    ranked = sorted(merged.items(), key=lambda item: -item[1][0])[:limit]
    return [(prefix, peak, count, overlapped) for prefix, (peak, count, overlapped) in ranked]


def plot_timeline(frame, path, *, title: str | None = None,
                  interval: float | None = None, tasks: dict | None = None) -> Path | None:
    """Plot samples (``MemoryTimeline.to_frame()``) to a PNG at ``path``; None, and no file,
    when no worker has GPU numbers (CPU workers): there is nothing to draw. ``tasks``:
    ``{worker: snapshot["tasks"]}``, drawn as a last panel of the prefixes by peak."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "the memory plot needs matplotlib: pip install 'dask-gpu-interop[plot]'") from None

    path = Path(path)
    numeric = ("device_used_bytes", "pool_size", "current_bytes", "peak_bytes",
               "cuda_pool_used_bytes", "cuda_pool_reserved_bytes")
    gpu = frame[frame[list(numeric)].notna().any(axis=1)] if len(frame) else frame
    workers = sorted(gpu["worker"].unique(), key=str)
    shown = workers[:MAX_PANELS]
    heading = title or "GPU memory per worker"

    if not shown:
        return None
    else:
        peaks = prefix_peaks(tasks)
        height = 1.2 + 2.2 * len(shown) + (0.4 + 0.25 * len(peaks) if peaks else 0)
        fig = Figure(figsize=(9, height), layout="constrained")
        if peaks:
            top, bottom = fig.subfigures(2, 1, height_ratios=[2.2 * len(shown), 0.4 + 0.25 * len(peaks)])
            _plot_prefix_peaks(bottom.subplots(), peaks)
        else:
            top = fig
        axes = top.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
        lines = (
            ("device_used_bytes", "device in use (all processes)", dict(color="0.5", lw=1.0)),
            ("pool_size", "RMM pool", dict(color="tab:blue", ls="--", lw=1.0)),
            ("cuda_pool_reserved_bytes", "CUDA pool reserved", dict(color="tab:purple", ls="--", lw=1.0)),
            ("current_bytes", "allocated through RMM", dict(color="tab:orange", lw=1.6)),
            ("cuda_pool_used_bytes", "CUDA pool used (RMM + XGBoost)", dict(color="tab:green", lw=1.2)),
            ("peak_bytes", "peak through RMM", dict(color="tab:red", ls=":", lw=1.2)),
        )
        for ax, worker in zip(axes, shown, strict=True):
            rows = gpu[gpu["worker"] == worker].sort_values("t")
            for column, label, style in lines:
                values = rows[column]
                if values.notna().any():
                    ax.plot(rows["t"], values.astype(float) / GIB, label=label, **style)
            total = rows["device_total_bytes"].dropna()
            if len(total):
                ax.axhline(float(total.iloc[-1]) / GIB, color="black", lw=0.6, label="device total")
                ax.set_ylim(0, float(total.iloc[-1]) / GIB * 1.05)
            name = rows["name"].iloc[-1]
            ax.set_title(str(name) if name == worker else f"{name}  ({worker})", fontsize=9, loc="left")
            ax.set_ylabel("GiB")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=7, loc="upper left", ncols=3)
        axes[-1].set_xlabel("seconds since start" + (f" (sampled every {interval:g} s)" if interval else ""))
        if len(workers) > len(shown):
            heading += f" (first {len(shown)} of {len(workers)} workers)"
        fig.suptitle(heading)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig).print_png(str(path))
    return path


def _plot_prefix_peaks(ax, peaks) -> None:
    names = [prefix for prefix, *_ in peaks][::-1]
    values = [peak / GIB for _, peak, *_ in peaks][::-1]
    ax.barh(names, values, color="tab:orange")
    for y, (_, peak, count, overlapped) in enumerate(peaks[::-1]):
        note = f"  {count} tasks" + (f", {overlapped} overlapping" if overlapped else "")
        ax.text(peak / GIB, y, note, va="center", fontsize=7)
    ax.set_xlabel("GiB: most device memory one task of the prefix allocated")
    ax.set_title("task prefixes by peak", fontsize=9, loc="left")
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(True, axis="x", alpha=0.3)


@contextmanager
def record_memory(client, png=None, *, interval: float = 1.0, title: str | None = None, csv=None,
                  source=None):
    """Record every worker's memory while the block runs; write the PNG and CSV at its end.

    If the block fails they are still written, as well as can be: the plot is most useful
    then.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    png : str or os.PathLike, optional
        The plot to write (see :meth:`MemoryTimeline.plot`). With no GPU samples at all (CPU
        workers) no PNG is written, and a warning says so.
    interval : float
        Seconds between samples, above 0.
    title : str, optional
        The plot's title.
    csv : str or os.PathLike, optional
        The samples as a CSV file (see :meth:`MemoryTimeline.to_frame`).
    source : callable, optional
        As for :class:`MemoryTimeline`.

    Yields
    ------
    MemoryTimeline
        The timeline recording the block.

    Raises
    ------
    ValueError
        ``interval`` is not a number above 0.
    ImportError
        A PNG or CSV is asked for and matplotlib or pandas is missing
        (``pip install 'dask-gpu-interop[plot]'``).

    Examples
    --------
    >>> from dask_gpu_interop import record_memory
    >>> with record_memory(client, png="memory.png", interval=0.5):
    ...     run_pipeline(client)
    """
    timeline = MemoryTimeline(client, interval=interval, source=source)
    timeline.start()
    try:
        yield timeline
    except BaseException:
        timeline.stop()
        try:
            _write(timeline, png, csv, title)
        except Exception:
            logger.exception("memory timeline: writing %s failed", png or csv)
        raise
    timeline.stop()
    _write(timeline, png, csv, title)


def _write(timeline: MemoryTimeline, png, csv, title) -> None:
    if png is not None and timeline.plot(png, title=title) is None:
        import warnings

        statuses = gpu_statuses(timeline.to_frame())
        warnings.warn(f"no GPU memory samples (the workers report: {statuses}): {png} was not "
                      "written", stacklevel=3)
    if csv is not None:
        timeline.to_frame().to_csv(csv, index=False)

"""The whole job on a cluster: ETL, training, and what it cost (time, memory), measured one
way for the command and the benchmarks."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from dask.utils import format_bytes

from dask_gpu_interop import cluster_workers, memory_report

from . import etl, placement, train
from .progress import stage_line


def _host_memory(dask_worker=None) -> dict:
    """This worker process's resident memory: now, and the highest since it started."""
    import resource

    import psutil

    rss = psutil.Process().memory_info().rss
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak *= 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    monitor = getattr(dask_worker, "monitor", None)
    seen = max(monitor.quantities["memory"], default=0) if monitor is not None else 0
    return {"rss": int(rss), "peak_rss": int(max(peak, seen, rss))}


@dataclass
class JobResult:
    device: str
    workers: int
    etl: etl.EtlResult
    training: train.TrainResult
    memory: dict  # the GPU memory report (MemoryReport)
    host: dict[str, dict]
    stages: dict[str, float] = field(default_factory=dict)
    placement: placement.Placement | None = None  # where the training data lived, and why

    def lines(self) -> list[str]:
        e, t = self.etl, self.training
        out = [
            f"device: {self.device}, {self.workers} worker(s)",
            "stage times:",
            *(stage_line(name, seconds) for name, seconds in self.stages.items()),
            f"ETL:      {e.summary()}",
            *([self.placement.line()] if self.placement else []),
            f"training: {t.train_rows:,} rows on {t.workers} worker(s), test {t.test_rows:,} "
            f"rows ({t.holdout}); {t.train_rows / t.seconds:,.0f} rows/s",
            f"test AUC: {t.auc:.4f} (train AUC {t.train_auc:.4f})",
            "peak host memory per worker (since it started):",
        ]
        out += [f"  {address}  {format_bytes(m['peak_rss'])} (now {format_bytes(m['rss'])})"
                for address, m in sorted(self.host.items())]
        out += ["GPU memory per worker:", *("  " + line for line in str(self.memory).splitlines())]
        return out


def run(client, device: str, plan, *, bad_rows: str = "error", rounds: int = train.ROUNDS,
        holdout: str | None = None, params: dict | None = None, progress: bool = False,
        echo=None, training_data: str = "auto", join: str = "quarter") -> JobResult:
    """ETL then training on ``client``'s cluster; ``echo(text)`` reports each stage as it ends.

    ``training_data``: where the table lives for training ("auto", "device", "host"; see
    ``placement``), decided before any work; a ValueError says why it cannot fit. ``join``:
    how rows meet their acquisition fields (``loan_join``; a shuffled join makes the
    partitions where its shuffle puts them, not on the workers that train them)."""
    say = echo or (lambda text: None)
    planning = time.perf_counter()
    memory = placement.measure(client, device)
    threads = max(client.nthreads().values(), default=1)
    estimated = placement.estimate(plan, threads)
    placed = placement.choose(estimated, memory, device, training_data)
    say(placed.line())
    # the workers that will train, and each partition made on the one it trains on
    workers = len(cluster_workers(client))
    trainers = train.training_workers(workers, estimated.rows, device)
    where = train.targets(plan.quarters, holdout, train.ranked_workers(client)[:trainers])
    planned = time.perf_counter() - planning
    on_host = device == "gpu" and placed.where == "host"
    say(f"ETL: {len(plan.parts)} partitions of {plan.layout.name} files ...")
    result = etl.run(plan, device=device, bad_rows=bad_rows, progress=progress,
                     into="host" if on_host else "device", workers=where, join=join)
    for line in result.shuffles:
        say(f"shuffle: {line}")
    say(f"ETL done: {result.summary()}")
    say(f"training ({rounds} rounds) ...")
    merged = {**train.PARAMS, **(params or {})}
    if device == "gpu" and merged.get("grow_policy") == "lossguide" and workers > 1:
        say(f"note: {train.SEVERAL_WORKERS_HINT}")
    # XGBoost quantizes host partitions on the worker's CPU cores: all of the worker's share
    trained = train.train(client, result.frame, result.quarters, device, rounds=rounds,
                          holdout=holdout, params=params, progress=progress, echo=say,
                          nthread=memory.cores_per_worker if on_host else None,
                          workers=trainers)
    say(f"training done: {trained.train_seconds:.2f} s after {trained.dmatrix_seconds:.2f} s "
        f"of its matrix, test AUC {trained.auc:.4f}")
    reporting = time.perf_counter()
    report, host = memory_report(client), client.run(_host_memory)
    return JobResult(
        device=device,
        workers=workers,
        etl=result,
        training=trained,
        memory=report,
        host=host,
        stages={"placement": planned, "ETL": result.seconds - result.join_seconds,
                **({"join": result.join_seconds} if result.join != "quarter" else {}),
                "DMatrix": trained.dmatrix_seconds,
                "training": trained.train_seconds, "report": time.perf_counter() - reporting},
        placement=placed,
    )

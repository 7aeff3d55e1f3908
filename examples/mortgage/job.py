"""The whole job on a cluster: ETL, training, and what it cost (time, memory), measured one
way for the command and the benchmarks."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from dask.utils import format_bytes

from dask_gpu_interop import cluster_workers, memory_report

from . import etl, output, placement, train
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
        echo=None, training_data: str = "auto", join: str = "quarter",
        features_out: str | None = None, overwrite: bool = False, inputs=()) -> JobResult:
    """ETL then training on ``client``'s cluster; ``echo(text)`` reports each stage as it ends.

    The ETL streams into XGBoost (``train.stream``): each worker makes its partitions one at
    a time as XGBoost reads them into its quantized matrix, which lives where ``placement``
    decides (``training_data``: "auto", "device", "host"), before any work; a ValueError says
    why it cannot fit. ``features_out``: the ETL writes the feature table there first (its
    own stage), and XGBoost reads it back a file at a time. ``join``: how rows meet their
    acquisition fields (``loan_join``); a shuffled join holds the performance rows in the
    workers' memory, and trains on the joined table as it lies (``xgboost.dask``)."""
    say = echo or (lambda text: None)
    planning = time.perf_counter()
    memory = placement.measure(client, device)
    estimated = placement.estimate(plan)
    placed = placement.choose(estimated, memory, device, training_data)
    say(placed.line())
    workers = len(cluster_workers(client))
    trainers = train.training_workers(workers, estimated.rows, device)
    planned = time.perf_counter() - planning
    merged = {**train.PARAMS, **(params or {})}
    if device == "gpu" and merged.get("grow_policy") == "lossguide" and workers > 1:
        say(f"note: {train.SEVERAL_WORKERS_HINT}")
    if join != "quarter":
        return _run_held(client, device, plan, placed, trainers, planned, say, bad_rows=bad_rows,
                         rounds=rounds, holdout=holdout, params=params, progress=progress,
                         join=join, memory=memory, features_out=features_out,
                         overwrite=overwrite, inputs=inputs)
    stages = {"placement": planned}
    parquet = None
    if features_out:
        say(f"ETL: {len(plan.parts)} partitions of {plan.layout.name} files, written to "
            f"{features_out} ...")
        written = etl.write(features_out, plan, device=device, bad_rows=bad_rows,
                            overwrite=overwrite, progress=progress, data=list(inputs))
        say(f"ETL done: {written.summary()}")
        stages["ETL"] = written.seconds
        parquet = [os.path.join(features_out, etl.PART_FILE.format(i))
                   for i in range(len(plan.parts))]
    source = "the feature table's files" if parquet else f"{plan.layout.name} files"
    say(f"ETL into XGBoost's matrix: {len(plan.parts)} partitions of {source} on {trainers} "
        f"worker(s), one at a time ...")
    streamed = train.stream(client, plan, device, rounds=rounds, holdout=holdout, params=params,
                            progress=progress, echo=say, workers=trainers,
                            bad_rows="skip" if parquet else bad_rows,
                            external=placed.external, cache_host_ratio=placed.cache_host_ratio,
                            keep=placed.keep, prefetch=placed.prefetch, parquet=parquet)
    trained = streamed.training
    result = written if parquet else _etl_result(plan, streamed, bad_rows)
    say(f"matrix: {_passes(streamed, bool(parquet), placed.keep)}")
    if streamed.memory:
        say(f"GPU memory: {_memory(streamed.memory, placed)}")
    say(f"training done: {trained.train_seconds:.2f} s after {trained.dmatrix_seconds:.2f} s "
        f"of its matrix, test AUC {trained.auc:.4f}")
    first = streamed.passes[0] if streamed.passes else streamed.matrices_seconds
    if parquet:
        stages["DMatrix"] = streamed.matrices_seconds
    else:
        stages["ETL and sketch"] = first
        stages["quantize"] = streamed.matrices_seconds - first
    stages["training"] = trained.train_seconds
    reporting = time.perf_counter()
    report, host = memory_report(client), client.run(_host_memory)
    stages["report"] = time.perf_counter() - reporting
    return JobResult(device=device, workers=workers, etl=result, training=trained,
                     memory=report, host=host, stages=stages, placement=placed)


def _passes(streamed, parquet: bool, kept: bool) -> str:
    """What building the matrix took, pass by pass (the slowest worker's)."""
    passes = ", ".join(f"{s:.2f}" for s in streamed.passes)
    again = ("the partitions kept from the first" if kept else
             "each file read again at each" if parquet else
             "the ETL's partitions made again at each")
    return (f"XGBoost's {streamed.matrix} matrix, {len(streamed.passes)} passes over each "
            f"worker's partitions ({again}): {passes} s; {streamed.matrices_seconds:.2f} s in all")


def _memory(memory: dict, placed) -> str:
    """What the GPUs held, beside what the placement predicted."""
    text = f"XGBoost's matrices {format_bytes(memory.get('matrices', 0))}"
    if memory.get("peak"):
        text += f", the CUDA pool's peak {format_bytes(memory['peak'])}"
    if placed.peak_bytes:
        text += f" (predicted {format_bytes(placed.peak_bytes)})"
    return text


def _etl_result(plan, streamed, bad_rows: str) -> etl.EtlResult:
    """The ETL's figures from the batches' reports: the rows kept, the bad rows (warned about
    under ``bad_rows="warn"``), and the first pass's time."""
    rows, count, bad = etl.judge(streamed.reports, len(streamed.reports), bad_rows)
    first = streamed.passes[0] if streamed.passes else streamed.matrices_seconds
    return etl.EtlResult(None, plan.quarters, rows, plan.input_bytes, count, bad, first,
                         len(plan.parts))


def _run_held(client, device, plan, placed, trainers, planned, say, *, bad_rows, rounds,
              holdout, params, progress, join, memory, features_out, overwrite,
              inputs) -> JobResult:
    """The job with a shuffled join: the joined table held in the workers' memory (in host
    memory where XGBoost's matrix does not fit the GPUs), trained with ``xgboost.dask``."""
    on_host = device == "gpu" and placed.where == "host"
    say(f"ETL: {len(plan.parts)} partitions of {plan.layout.name} files ...")
    result = etl.run(plan, device=device, bad_rows=bad_rows, progress=progress,
                     into="host" if on_host else "device", join=join)
    for line in result.shuffles:
        say(f"shuffle: {line}")
    say(f"ETL done: {result.summary()}")
    writing = time.perf_counter()
    if features_out:
        with output.Staged(features_out, what="feature table", overwrite=overwrite,
                           inputs=list(inputs)) as staging:
            result.frame.to_parquet(staging, write_index=False)
    written = time.perf_counter() - writing
    say(f"training ({rounds} rounds) ...")
    trained = train.train(client, result.frame, result.quarters, device, rounds=rounds,
                          holdout=holdout, params=params, progress=progress, echo=say,
                          nthread=memory.cores_per_worker if on_host else None,
                          workers=trainers)
    say(f"training done: {trained.train_seconds:.2f} s after {trained.dmatrix_seconds:.2f} s "
        f"of its matrix, test AUC {trained.auc:.4f}")
    reporting = time.perf_counter()
    report, host = memory_report(client), client.run(_host_memory)
    return JobResult(
        device=device, workers=len(cluster_workers(client)), etl=result, training=trained,
        memory=report, host=host,
        stages={"placement": planned, "ETL": result.seconds - result.join_seconds,
                "join": result.join_seconds, **({"written": written} if features_out else {}),
                "DMatrix": trained.dmatrix_seconds,
                "training": trained.train_seconds, "report": time.perf_counter() - reporting},
        placement=placed)

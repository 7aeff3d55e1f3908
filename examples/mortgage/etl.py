"""The ETL as a dask DataFrame of cuDF or pandas partitions, one per piece of the files.

A partition's task reads its pieces, adds the per-loan features and the label and joins each
row to its loan's acquisition fields: in the classic layout from a task per quarter that reads
its acquisition file once, in the current layout from the loan's first row. The table stays in
the workers' memory for ``xgboost.dask``, or is written to Parquet.

Bad rows are counted in the tasks and judged on the client: ``bad_rows="error"`` raises one
``BadRowsError`` naming every bad row's file and line; "warn" and "skip" drop and count them.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

import dask
import dask.dataframe as dd
from dask.utils import format_bytes

from . import features, files, gpu_workers, output, read, schema
from .progress import current_client, wait
from .read import BadRow

KEPT_BAD_ROWS = 1000  # bad rows a report keeps in full (all are counted)


@dataclass
class Report:
    """What one task read: rows kept, and its bad rows (the first KEPT_BAD_ROWS in full)."""

    rows: int = 0
    bad_count: int = 0
    bad: list[BadRow] = field(default_factory=list)

    @classmethod
    def of(cls, result: read.ReadResult) -> Report:
        return cls(result.rows, len(result.bad), result.bad[:KEPT_BAD_ROWS])


def load_acquisitions(paths, device: str, names):
    """(acquisitions ready to join, report) of one quarter's classic acquisition files."""
    pieces = [files.Piece(p, 0, files.text_size(p)) for p in paths]
    result = read.read(pieces, schema.CLASSIC_ACQUISITION, schema.ACQUISITION_READ, device,
                       "skip", names, unique_ids=True)
    acquisitions = features.acquisitions(result.frame)
    if device == "gpu":
        gpu_workers.synchronize()
    return acquisitions, Report.of(result)


def acquisition_view(frame) -> features.Acquisitions:
    """Each loan's acquisition fields from its first reporting month (the current layout)."""
    if not features.in_order(frame):
        frame = frame.sort_values(["loan_id", features.PERIOD])
    first = features.filled(frame["loan_id"].diff(), 1) != 0
    return features.acquisitions(frame.loc[first, list(schema.ACQUISITION_READ)])


def process_part(part: files.Part, layout: schema.Layout, acquisitions, device: str, names):
    """One partition's feature table, and the report of what its task read."""
    if layout.name == schema.CURRENT.name:
        columns = schema.PERFORMANCE_READ + schema.ACQUISITION_READ[1:]
        result = read.read(part.pieces, layout, columns, device, "skip", names)
        perf, result.frame = result.frame, None  # freed as it is used
        acq = acquisition_view(perf)
        perf = perf.drop(columns=list(schema.ACQUISITION_READ[1:]))
    else:
        result = read.read(part.pieces, layout, schema.PERFORMANCE_READ, device, "skip", names)
        (perf, result.frame), acq = (result.frame, None), acquisitions
    report = Report(len(perf), len(result.bad), result.bad[:KEPT_BAD_ROWS])
    perf = features.performance_features(perf)
    table = features.feature_table(perf, acq)
    if device == "gpu":
        gpu_workers.synchronize()
    return table, report


def meta(device: str = "cpu"):
    """An empty feature table: pandas, or cuDF on GPUs."""
    frame = features.meta()
    if device == "gpu":
        import cudf

        return cudf.DataFrame(frame)
    return frame


def graph(plan: files.Plan, device: str):
    """(feature table as a dask DataFrame, the reports of its tasks), not computed yet."""
    acquisitions = {}
    if plan.layout.name != schema.CURRENT.name:
        for quarter in dict.fromkeys(plan.quarters):
            acquisitions[quarter] = dask.delayed(load_acquisitions, pure=False, nout=2)(
                plan.acquisition_files(quarter), device, plan.names)
    tasks = [dask.delayed(process_part, pure=False, nout=2)(
        part, plan.layout, acquisitions[part.quarter][0] if acquisitions else None, device,
        plan.names) for part in plan.parts]
    frame = dd.from_delayed([t[0] for t in tasks], meta=meta(device), verify_meta=False)
    reports = [t[1] for t in tasks] + [a[1] for a in acquisitions.values()]
    return frame, reports


@dataclass
class EtlResult:
    frame: dd.DataFrame | None  # persisted; None when written to files
    quarters: list[str | None]  # the quarter of each partition
    rows: int
    input_bytes: int
    bad_count: int
    bad: list[BadRow]
    seconds: float
    partitions: int
    write_seconds: float | None = None  # writing the table out, after the ETL

    def summary(self) -> str:
        seconds = self.seconds or float("nan")
        text = (f"{self.rows:,} rows from {format_bytes(self.input_bytes)} of text in "
                f"{self.partitions} partitions, {self.seconds:.2f} s ({self.rows / seconds:,.0f} "
                f"rows/s, {format_bytes(self.input_bytes / seconds)}/s)")
        if self.bad_count:
            text += f"; {self.bad_count:,} bad rows dropped"
        if self.write_seconds is not None:
            text += f"; written in {self.write_seconds:.2f} s"
        return text


def run(plan: files.Plan, *, device: str = "cpu", bad_rows: str = "error",
        progress: bool = False) -> EtlResult:
    """The ETL of ``plan``, its table kept in the workers' memory (or local threads')."""
    read.check_policy(bad_rows)
    started = time.perf_counter()
    frame, reports = graph(plan, device)
    frame, reports = _persist(frame, reports, len(plan.parts), progress, device)
    rows, count, bad = _judge(reports, len(plan.parts), bad_rows)
    return EtlResult(frame, plan.quarters, rows, plan.input_bytes, count, bad,
                     time.perf_counter() - started, len(plan.parts))


def write(out: str, plan: files.Plan, *, device: str = "cpu", bad_rows: str = "error",
          overwrite: bool = False, progress: bool = False, data=None) -> EtlResult:
    """Run the ETL and write the feature table to ``out``, Parquet files written by the workers
    (who must see ``out``'s parent) and renamed into place when complete (see ``output``).
    ``data``, the paths given for the input, and the plan's files may not be or hold ``out``."""
    given = [data] if isinstance(data, (str, os.PathLike)) else list(data or ())
    with output.Staged(out, what="feature table", overwrite=overwrite,
                       inputs=[*given, *plan.inputs()]) as staging:
        result = run(plan, device=device, bad_rows=bad_rows, progress=progress)
        started = time.perf_counter()
        result.frame.to_parquet(staging, write_index=False)
    result.write_seconds = time.perf_counter() - started
    result.frame = None
    return result


def _persist(frame, reports, parts: int, progress: bool, device: str):
    """Persist the table and compute the reports: on the current client, or local threads."""
    client = current_client()
    if client is None:  # local threads: the tables and the reports in one computation
        computed = dask.compute(*frame.to_delayed(), *reports)
        tables, reports = computed[:frame.npartitions], list(computed[frame.npartitions:])
        frame = dd.from_delayed([dask.delayed(t) for t in tables], meta=meta(device))
        return frame, reports
    frame = client.persist(frame)
    futures = client.compute(reports)
    if progress:
        wait(futures[:parts], "ETL partitions")
    return frame, client.gather(futures)


def _judge(reports: list[Report], parts: int, policy: str) -> tuple[int, int, list[BadRow]]:
    """(rows kept, bad rows, the bad rows kept in full); raises under ``policy="error"``."""
    count = sum(r.bad_count for r in reports)
    rows = [row for r in reports for row in r.bad]
    if count and policy == "error":
        raise read.BadRowsError(rows, count)
    if count and policy == "warn":
        warnings.warn(read.describe(rows, count).rsplit("\n", 1)[0]
                      + "\nThese rows were dropped (bad_rows='warn').", stacklevel=3)
    return sum(r.rows for r in reports[:parts]), count, rows

"""The ETL: a task per partition of the files, on cuDF or pandas.

A partition's task reads its pieces, adds the per-loan features and the label and joins each
row to its loan's acquisition fields: in the classic layout from a task per quarter that reads
its acquisition file once, in the current layout from the loan's first row; in the classic
layout ``join="loan"`` or ``"dask"`` instead shuffles both sides on loan_id between the workers
and joins each pair of output partitions (``loan_join``).

Two ways to use the tables:

- :func:`write` streams them: each task writes its partition's table to a Parquet file of its
  own and returns only its report, so that the workers hold no more than the partitions they
  are working on, whatever the size of the data;
- :func:`run` keeps them in the workers' memory as a dask DataFrame, for ``xgboost.dask``: in
  the GPUs' memory, or converted to pandas in the workers' host memory
  (``into="host"``) when the table is larger than the GPUs hold.

Bad rows are counted in the tasks and judged on the client once every task has ended:
``bad_rows="error"`` raises one ``BadRowsError`` naming every bad row's file and line; "warn"
and "skip" drop and count them.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dask
from dask.utils import format_bytes

from . import features, files, loan_join, output, read, schema
from .progress import current_client, wait
from .read import BadRow

if TYPE_CHECKING:
    import dask.dataframe as dd

# dask.dataframe is imported where a graph is made, on the client: a worker's first task
# imports this module to run its function, and need not wait for dask.dataframe.

KEPT_BAD_ROWS = 1000  # bad rows a report keeps in full (all are counted)
PART_FILE = "part.{:05d}.parquet"  # partition i's file: in partition order, by name too
PLACES = ("device", "host")  # where ``run`` keeps the table on GPU workers


@dataclass
class Report:
    """What one task read: rows kept, its bad rows (the first KEPT_BAD_ROWS in full), and the
    bytes of the file it wrote (when streamed)."""

    rows: int = 0
    bad_count: int = 0
    bad: list[BadRow] = field(default_factory=list)
    written_bytes: int = 0

    @classmethod
    def of(cls, result: read.ReadResult) -> Report:
        return cls(result.rows, len(result.bad), result.bad[:KEPT_BAD_ROWS])


def read_acquisitions(paths, device: str, names):
    """(acquisition rows as read, report) of one quarter's classic acquisition files."""
    pieces = [files.Piece(p, 0, files.text_size(p)) for p in paths]
    result = read.read(pieces, schema.CLASSIC_ACQUISITION, schema.ACQUISITION_READ, device,
                       "skip", names, unique_ids=True)
    return result.frame, Report.of(result)


def load_acquisitions(paths, device: str, names):
    """(acquisitions ready to join, report) of one quarter's classic acquisition files."""
    frame, report = read_acquisitions(paths, device, names)
    return features.acquisitions(frame), report


def acquisition_view(frame) -> features.Acquisitions:
    """Each loan's acquisition fields from its first reporting month (the current layout)."""
    if not features.in_order(frame):
        frame = frame.sort_values(["loan_id", features.PERIOD])
    first = features.filled(frame["loan_id"].diff(), 1) != 0
    return features.acquisitions(frame.loc[first, list(schema.ACQUISITION_READ)])


def performance_part(part: files.Part, layout: schema.Layout, device: str, names):
    """(one partition's performance rows with their per-loan features and label, report):
    classic layout only, no acquisition field joined yet."""
    result = read.read(part.pieces, layout, schema.PERFORMANCE_READ, device, "skip", names)
    perf, result.frame = result.frame, None  # freed as it is used
    report = Report(len(perf), len(result.bad), result.bad[:KEPT_BAD_ROWS])
    return features.performance_features(perf), report


def placed(table, device: str, into: str = "device"):
    """``table`` where ``run`` keeps it: ``into="host"``, a GPU's table as pandas."""
    return table.to_pandas() if device == "gpu" and into == "host" else table


def process_part(part: files.Part, layout: schema.Layout, acquisitions, device: str, names,
                 into: str = "device"):
    """One partition's feature table, and the report of what its task read; ``into="host"``:
    a GPU's table handed back as pandas, in the worker's host memory."""
    if layout.name == schema.CURRENT.name:
        columns = schema.PERFORMANCE_READ + schema.ACQUISITION_READ[1:]
        result = read.read(part.pieces, layout, columns, device, "skip", names)
        perf, result.frame = result.frame, None  # freed as it is used
        acq = acquisition_view(perf)
        perf = perf.drop(columns=list(schema.ACQUISITION_READ[1:]))
        report = Report(len(perf), len(result.bad), result.bad[:KEPT_BAD_ROWS])
        perf = features.performance_features(perf)
    else:
        perf, report = performance_part(part, layout, device, names)
        acq = acquisitions
    return placed(features.feature_table(perf, acq), device, into), report


def write_part(path: str, part: files.Part, layout: schema.Layout, acquisitions, device: str,
               names) -> Report:
    """One partition's feature table written to the Parquet file ``path`` (by cuDF on GPUs, by
    pandas and pyarrow on CPUs), and the report of its task: the table is freed when the task
    ends, so that a worker holds only the partitions it is working on."""
    table, report = process_part(part, layout, acquisitions, device, names)
    report.written_bytes = write_table(path, table)
    return report


def write_table(path: str, table) -> int:
    """``table`` written to the Parquet file ``path``; the file's bytes."""
    table.to_parquet(path, index=False)
    return os.path.getsize(path)


PIECES = ("all", "head", "tail")  # a batch's rows of its partition (head, tail: see train)


@dataclass
class BatchInfo:
    """What a training batch reports: its rows and positive labels, and the report of the
    ETL task that made it (None where another batch counts that task, or where the table was
    read back from Parquet)."""

    rows: int
    positives: int
    report: Report | None = None


def piece_of(table, piece: str, share: float):
    """``table``'s rows in a batch: all, or the head or the tail of a single quarter's split
    (the last ``share`` of the rows in the tail)."""
    if piece == "all":
        return table
    cut = len(table) - int(len(table) * share)
    return table.iloc[:cut] if piece == "head" else table.iloc[cut:]


def batch(source, layout: schema.Layout, acquisitions, device: str, names, piece: str = "all",
          share: float = 0.0, counted: bool = True, acquisitions_counted: bool = False):
    """(the feature table of one training batch, its ``BatchInfo``): partition ``source`` (a
    ``files.Part`` of text, made by the ETL here; or the path of a Parquet file the ETL wrote)
    cut to ``piece``. ``acquisitions``: the quarter's (acquisitions, report) pair, classic
    layout. ``counted``: this batch carries its ETL task's report (and, with
    ``acquisitions_counted``, its quarter's acquisitions' report), so that each is counted
    once however many batches a partition or a quarter makes."""
    if isinstance(source, files.Part):
        acq, acq_report = acquisitions if acquisitions is not None else (None, None)
        table, report = process_part(source, layout, acq, device, names)
        if acquisitions_counted and acq_report is not None:
            report = Report(report.rows, report.bad_count + acq_report.bad_count,
                            report.bad + acq_report.bad[:KEPT_BAD_ROWS - len(report.bad)])
    else:
        table, report = read_table(source, device), None
    table = piece_of(table, piece, share)
    info = BatchInfo(len(table), int(table[schema.LABEL].sum()), report if counted else None)
    return table, info


def read_table(path: str, device: str):
    """A feature table the ETL wrote (one Parquet file), on cuDF or pandas."""
    if device == "gpu":
        import cudf

        return cudf.read_parquet(path)
    import pandas as pd

    return pd.read_parquet(path)


def meta(device: str = "cpu"):
    """An empty feature table: pandas, or cuDF on GPUs."""
    frame = features.meta()
    if device == "gpu":
        import cudf

        return cudf.DataFrame(frame)
    return frame


def acquisition_tasks(plan: files.Plan, device: str) -> dict:
    """Each quarter's acquisitions task (classic layout; none in the current one): shared by
    the quarter's partitions, and released by the scheduler once they are done."""
    if plan.layout.name == schema.CURRENT.name:
        return {}
    return {quarter: dask.delayed(load_acquisitions, pure=False, nout=2)(
                plan.acquisition_files(quarter), device, plan.names)
            for quarter in dict.fromkeys(plan.quarters)}


def graph(plan: files.Plan, device: str, into: str = "device"):
    """(feature table as a dask DataFrame, the reports of its tasks), not computed yet."""
    import dask.dataframe as dd

    if into not in PLACES:
        raise ValueError(f"into={into!r}: choose one of {', '.join(PLACES)}")
    acquisitions = acquisition_tasks(plan, device)
    tasks = [dask.delayed(process_part, pure=False, nout=2)(
        part, plan.layout, acquisitions[part.quarter][0] if acquisitions else None, device,
        plan.names, into) for part in plan.parts]
    frame = dd.from_delayed([t[0] for t in tasks],
                            meta=meta("cpu" if into == "host" else device), verify_meta=False)
    reports = [t[1] for t in tasks] + [a[1] for a in acquisitions.values()]
    return frame, reports


def streamed(plan: files.Plan, device: str, directory: str) -> list:
    """The reports of tasks that each write their partition's table into ``directory``
    (``PART_FILE``), then those of the acquisitions tasks; not computed yet."""
    acquisitions = acquisition_tasks(plan, device)
    reports = [dask.delayed(write_part, pure=False)(
        os.path.join(directory, PART_FILE.format(i)), part, plan.layout,
        acquisitions[part.quarter][0] if acquisitions else None, device, plan.names)
        for i, part in enumerate(plan.parts)]
    return reports + [a[1] for a in acquisitions.values()]


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
    written_bytes: int | None = None  # the Parquet files, when the tables were written
    join: str = "quarter"  # how rows met their acquisition fields (loan_join.JOINS)
    join_seconds: float = 0.0  # a shuffled join's shuffles, within ``seconds``
    shuffles: list[str] = field(default_factory=list)  # the library shuffle's statistics


    def summary(self) -> str:
        seconds = self.seconds or float("nan")
        text = (f"{self.rows:,} rows from {format_bytes(self.input_bytes)} of text in "
                f"{self.partitions} partitions, {self.seconds:.2f} s ({self.rows / seconds:,.0f} "
                f"rows/s, {format_bytes(self.input_bytes / seconds)}/s)")
        if self.written_bytes is not None:
            text += (f", read and written in one stage: {format_bytes(self.written_bytes)} of "
                     "Parquet")
        if self.join != "quarter":
            text += (f"; joined by loan_id ({self.join} shuffle): {self.join_seconds:.2f} s of "
                     "shuffles")
        if self.bad_count:
            text += f"; {self.bad_count:,} bad rows dropped"
        return text


def run(plan: files.Plan, *, device: str = "cpu", bad_rows: str = "error",
        progress: bool = False, into: str = "device", join: str = "quarter") -> EtlResult:
    """The ETL of ``plan``, its table kept in the workers' memory (or local threads'): on GPU
    workers in device memory, or with ``into="host"`` as pandas in their host memory.
    ``join``: how rows meet their loan's acquisition fields (``loan_join``); a shuffled one
    ("loan", "dask") keeps each output partition of one quarter, for training's held-out
    quarter."""
    read.check_policy(bad_rows)
    _check_join(join, plan)
    started = time.perf_counter()
    if join != "quarter":
        return _run_shuffled(plan, device, bad_rows, progress, into, join, started)
    frame, reports = graph(plan, device, into)
    frame, reports = _persist(frame, reports, len(plan.parts), progress)
    rows, count, bad = judge(reports, len(plan.parts), bad_rows)
    return EtlResult(frame, plan.quarters, rows, plan.input_bytes, count, bad,
                     time.perf_counter() - started, len(plan.parts))


def write(out: str, plan: files.Plan, *, device: str = "cpu", bad_rows: str = "error",
          overwrite: bool = False, progress: bool = False, data=None,
          join: str = "quarter") -> EtlResult:
    """Run the ETL and write the feature table to ``out``: a Parquet file per partition
    (``part.00000.parquet``, ... in partition order), each written by the task that made it
    into a staging folder beside ``out`` (which the workers must see), and renamed into place
    once every task has ended and the bad rows are judged (see ``output``). ``data``, the
    paths given for the input, and the plan's files may not be or hold ``out``. ``join``: a
    shuffled join ("loan", "dask"; ``loan_join``) holds the performance rows of the whole
    dataset in the workers' memory until the shuffles end; each output partition's task then
    writes its file."""
    read.check_policy(bad_rows)
    _check_join(join, plan)
    given = [data] if isinstance(data, (str, os.PathLike)) else list(data or ())
    with output.Staged(out, what="feature table", overwrite=overwrite,
                       inputs=[*given, *plan.inputs()]) as staging:
        started = time.perf_counter()
        joined = None
        if join == "quarter":
            reports = _compute(streamed(plan, device, staging), len(plan.parts), progress)
        else:
            joined = _shuffled(plan, device, join, False, progress)
            writes = [dask.delayed(write_joined, pure=False)(
                os.path.join(staging, PART_FILE.format(i)), perf, acq, device)
                for i, (perf, acq) in enumerate(joined.pairs)]
            reports = joined.reports + _compute(writes, len(writes), progress,
                                                "joined partitions")
        rows, count, bad = judge(reports, len(plan.parts), bad_rows)
        seconds = time.perf_counter() - started
    return EtlResult(None, plan.quarters, rows, plan.input_bytes, count, bad, seconds,
                     len(plan.parts), sum(r.written_bytes for r in reports), join,
                     *((joined.seconds, joined.stats) if joined else ()))


def _shuffled(plan: files.Plan, device: str, join: str, by_quarter: bool, progress: bool):
    """Both sides of a shuffled join in the workers' memory (``loan_join.shuffled``)."""
    perf = [dask.delayed(performance_part, pure=False, nout=2)(
        part, plan.layout, device, plan.names) for part in plan.parts]
    acq = [dask.delayed(read_acquisitions, pure=False, nout=2)(paths, device, plan.names)
           for paths in plan.acquisitions.values()]
    return loan_join.shuffled(_needs_client(join), perf, acq, plan.quarters, join,
                              by_quarter=by_quarter, progress=progress)


def joined_part(perf, acq, device: str, into: str = "device"):
    """One output partition of a shuffled join as its feature table (``loan_join``)."""
    return placed(loan_join.feature_part(perf, acq), device, into)


def write_joined(path: str, perf, acq, device: str) -> Report:
    """One output partition of a shuffled join written as its feature table to the Parquet
    file ``path``; a report of the bytes written (its rows were counted where they were
    read)."""
    return Report(written_bytes=write_table(path, joined_part(perf, acq, device)))


def _check_join(join: str, plan: files.Plan) -> None:
    loan_join.check(join, plan.layout)


def _needs_client(join: str):
    """The current client: a shuffled join runs on a distributed cluster (ValueError if none)."""
    client = current_client()
    if client is None:
        raise ValueError(f"join={join!r} shuffles between workers: start a distributed client "
                         "(the commands do)")
    return client


def _run_shuffled(plan, device, bad_rows, progress, into, join, started) -> EtlResult:
    """``run`` with a shuffled join: the table kept in the workers' memory, each output
    partition of one quarter."""
    import dask.dataframe as dd

    client = _needs_client(join)
    joined = _shuffled(plan, device, join, True, progress)
    tables = client.compute([dask.delayed(joined_part, pure=False)(
        perf, acq, device, into) for perf, acq in joined.pairs])
    if progress:
        wait(tables, "joined partitions")
    else:
        from distributed import wait as settle

        settle(tables)
    frame = dd.from_delayed(tables, meta=meta("cpu" if into == "host" else device),
                            verify_meta=False)
    rows, count, bad = judge(joined.reports, len(plan.parts), bad_rows)
    return EtlResult(frame, joined.quarters, rows, plan.input_bytes, count, bad,
                     time.perf_counter() - started, len(plan.parts), None, join,
                     joined.seconds, joined.stats)


def _compute(reports: list, parts: int, progress: bool, what: str = "ETL partitions"
             ) -> list[Report]:
    """The reports, computed on the current client (or local threads). Where a task fails or
    the wait is interrupted, the tasks not started are cancelled and those running awaited,
    so that none writes into a folder being removed."""
    client = current_client()
    if client is None:
        return list(dask.compute(*reports))
    futures = client.compute(reports)
    try:
        if progress:
            wait(futures[:parts], what)
        return client.gather(futures)
    except BaseException:
        client.cancel(futures)
        _settle(client, {future.key for future in futures})
        raise


def _running(keys, dask_worker=None) -> int:
    """How many of the tasks ``keys`` a worker is still running (cancelled ones included)."""
    return sum(task.key in keys for task in dask_worker.state.executing)


def _settle(client, keys: set, timeout: float = 60.0) -> None:
    """Wait (at most ``timeout`` seconds) until no worker runs any of the tasks ``keys``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not any(client.run(_running, keys).values()):
                return
        except Exception:  # the cluster is going away: nothing more to wait for
            return
        time.sleep(0.1)


def _persist(frame, reports, parts: int, progress: bool):
    """Persist the table and compute the reports: on the current client, or local threads."""
    import dask.dataframe as dd

    client = current_client()
    if client is None:  # local threads: the tables and the reports in one computation
        computed = dask.compute(*frame.to_delayed(), *reports)
        tables, reports = computed[:frame.npartitions], list(computed[frame.npartitions:])
        frame = dd.from_delayed([dask.delayed(t) for t in tables], meta=frame._meta)
        return frame, reports
    frame = client.persist(frame)
    futures = client.compute(reports)
    if progress:
        wait(futures[:parts], "ETL partitions")
    return frame, client.gather(futures)


def judge(reports: list[Report], parts: int, policy: str) -> tuple[int, int, list[BadRow]]:
    """(rows kept, bad rows, the bad rows kept in full); raises under ``policy="error"``."""
    count = sum(r.bad_count for r in reports)
    rows = [row for r in reports for row in r.bad]
    if count and policy == "error":
        raise read.BadRowsError(rows, count)
    if count and policy == "warn":
        warnings.warn(read.describe(rows, count).rsplit("\n", 1)[0]
                      + "\nThese rows were dropped (bad_rows='warn').", stacklevel=3)
    return sum(r.rows for r in reports[:parts]), count, rows

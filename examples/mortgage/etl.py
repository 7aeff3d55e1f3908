"""The ETL as a Dask graph: performance chunks joined to their quarter's acquisitions.

One task per chunk of a performance file (chunks end at loan boundaries, at most about
``partition_size`` each, 1 GiB on GPUs and 256 MiB on CPUs by default, so device memory per
task is bounded) reads it, adds the per-loan features and the label, joins the loan's
acquisition row (read once per quarter: by the chunk's own task when it is the quarter's only
chunk, else by one task whose result the quarter's chunks share) and keeps the 45 features and
the label. The result is a dask DataFrame of cuDF or pandas partitions, one per chunk, in file
order, ready for ``xgboost.dask`` without passing through the client.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise

import dask
import dask.dataframe as dd
import numpy as np
from dask.utils import format_bytes, parse_bytes

from . import features, read, schema
from .backend import Backend
from .read import BadRow, Source
from .stages import stage

# Bytes of text per task, by device. A GPU's time per chunk is mostly fixed costs (launches,
# syncs, Python), so larger chunks run faster: on an H200 one chunk ran at 1.1 GB/s at
# 126 MiB, 1.9 at 249 MiB, 2.75 at 462 MiB and 3.7 at 0.9 GiB, its device peak 2.9-3.1x the
# chunk (benchmarks/results/mortgage-stages-gpu-dense-sizes-1xH200.md); the whole ETL of 10.8 GiB
# took 5.06 s in 1 GiB chunks, 10.44 s in 256 MiB ones. CPU workers are one core each: smaller
# chunks keep them all busy.
PARTITION_SIZES = {"gpu": "1GiB", "cpu": "256MiB"}
DEFAULT_PARTITION_SIZE = PARTITION_SIZES["cpu"]


def partition_size_for(device: str, partition_size: int | str | None = None) -> int | str:
    """``partition_size``, or the default of ``device`` ("gpu" or "cpu") when it is None."""
    return PARTITION_SIZES[device] if partition_size is None else partition_size
KEPT_BAD_ROWS = 1000  # bad rows a report keeps in full (all are counted)


# ---------------------------------------------------------------------------------------------
# Inputs


def _natural(path: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def find_files(spec, what: str, pattern: str) -> list[str]:
    """Files named by ``spec``: a file, a directory (files matching ``pattern`` in it), a glob,
    or a list of those; sorted naturally (quarter, then part number)."""
    specs = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    found = []
    for item in specs:
        item = os.fspath(item)
        if os.path.isdir(item):
            matches = glob.glob(os.path.join(item, pattern))
        elif os.path.isfile(item):
            matches = [item]
        else:
            matches = glob.glob(item)
        found += [m for m in matches if os.path.isfile(m)]
    if not found:
        raise FileNotFoundError(
            f"no {what} files found for {spec!r}: give a file, a directory holding "
            f"{pattern} files, or a glob such as 'perf/{pattern}'"
        )
    return sorted(set(found), key=_natural)


def find_dataset(directory: str) -> tuple[list[str], list[str], str | None]:
    """(performance files, acquisition files, names.csv or None) of a dataset directory: the
    classic layout (perf/, acq/, names.csv) or all the files side by side."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory}: no such directory")

    def where(sub):
        path = os.path.join(directory, sub)
        return path if os.path.isdir(path) else directory

    perf = find_files(where("perf"), "performance", "Performance_*")
    acq = find_files(where("acq"), "acquisition", "Acquisition_*")
    names = os.path.join(directory, "names.csv")
    return perf, acq, names if os.path.isfile(names) else None


@dataclass
class Plan:
    """What the ETL reads: performance chunks, the acquisition file of each chunk, names."""

    chunks: list[Source]
    acquisitions: dict[str, list[Source]]  # key of a chunk -> the acquisition files it joins
    names: dict[str, str] | None
    input_bytes: int

    def key(self, chunk: Source) -> str:
        return chunk.quarter if chunk.quarter in self.acquisitions else "*"

    @property
    def quarters(self) -> list[str | None]:
        """The quarter of every chunk (and so of every output partition)."""
        return [c.quarter for c in self.chunks]

    def subset(self, chunks: list[Source]) -> Plan:
        """The plan of some of the chunks, with only the acquisition files they join."""
        keys = {self.key(c) for c in chunks}
        sources = {s.path: s for k in keys for s in self.acquisitions[k]}
        size = sum(os.path.getsize(p) for p in sources)
        size += sum((c.end or os.path.getsize(c.path)) - c.start for c in chunks)
        return Plan(list(chunks), {k: self.acquisitions[k] for k in keys}, self.names, size)


def plan(perf, acq, names: str | None = None,
         partition_size: int | str = DEFAULT_PARTITION_SIZE) -> Plan:
    """Find the files and cut performance files into chunks of about ``partition_size``."""
    size = parse_bytes(partition_size) if isinstance(partition_size, str) else int(partition_size)
    if size <= 0:
        raise ValueError(f"partition_size={partition_size!r}: must be positive")
    perf_files = find_files(perf, "performance", "Performance_*")
    acq_files = find_files(acq, "acquisition", "Acquisition_*")
    by_quarter: dict[str, list[Source]] = {}
    for path in acq_files:
        by_quarter.setdefault(schema.quarter_of(path) or "*", []).append(
            Source(path, quarter=schema.quarter_of(path)))
    named = {q for q in by_quarter if q != "*"}
    chunks, total = [], sum(os.path.getsize(p) for p in acq_files)
    for path in perf_files:
        quarter = schema.quarter_of(path)
        if quarter is not None and named and quarter not in named:
            raise FileNotFoundError(
                f"{path} is from {quarter} but no acquisition file of {quarter} was given "
                f"(expected Acquisition_{quarter}.txt among: {', '.join(acq_files[:5])}"
                f"{' ...' if len(acq_files) > 5 else ''})"
            )
        file_size = os.path.getsize(path)
        total += file_size
        pieces = max(1, -(-file_size // size))
        bounds = [round(i * file_size / pieces) for i in range(pieces + 1)]
        chunks += [Source(path, start, stop, quarter) for start, stop in pairwise(bounds)]
    acquisitions = dict(by_quarter)
    if any(c.quarter not in named for c in chunks):  # joined with every acquisition file
        acquisitions["*"] = [s for sources in by_quarter.values() for s in sources]
    return Plan(chunks, acquisitions, read.read_names(names), total)


# ---------------------------------------------------------------------------------------------
# Tasks


@dataclass
class ChunkReport:
    """What one task read: rows, bad rows (the first KEPT_BAD_ROWS in full), and the reports
    of the acquisition files it loaded itself (see :func:`process_chunk`)."""

    path: str
    rows: int = 0
    bad_count: int = 0
    bad: list[BadRow] = field(default_factory=list)
    acquisitions: list[ChunkReport] = field(default_factory=list)

    @classmethod
    def of(cls, path: str, result: read.ReadResult) -> ChunkReport:
        return cls(path, result.rows, len(result.bad), result.bad[:KEPT_BAD_ROWS])


def load_acquisitions(sources: list[Source], device: str, policy: str, names):
    """(acquisition frame, reports) of the files that one group of chunks joins."""
    backend = Backend(device)
    frames, reports = [], []
    with stage("acquisitions"):
        for source in sources:
            result = read.read_table(source, schema.ACQUISITION, backend, policy, names)
            frames.append(result.frame)
            reports.append(ChunkReport.of(source.path, result))
    frame = frames[0] if len(frames) == 1 else backend.df.concat(frames, ignore_index=True)
    if len(frames) > 1 and int(frame["loan_id"].nunique()) != len(frame):
        raise ValueError(
            "the same loan_id appears in more than one acquisition file of "
            f"{', '.join(s.path for s in sources[:5])}: give each quarter's file once"
        )
    return frame, reports


def process_chunk(source: Source, acquisitions, device: str, policy: str, names,
                  intermediate: bool = False, out: str | None = None, index: int = 0):
    """Read, featurize, join and clean one chunk: (frame or rows written, report).

    ``acquisitions``: what :func:`load_acquisitions` returned for the chunk's quarter, or
    the quarter's acquisition files, loaded here when no other chunk joins them.
    """
    loaded = []
    if isinstance(acquisitions, list):
        acquisitions = load_acquisitions(acquisitions, device, policy, names)
        loaded = acquisitions[1]
    backend = Backend(device)
    with stage("read"):
        result = read.read_table(source, schema.PERFORMANCE, backend, policy, names)
    frame, result.frame = result.frame, None  # the frame's columns are freed as they are used
    with stage("features"):
        frame = features.performance_features(frame)
    if intermediate:
        frame = features.join_acquisition(frame, acquisitions[0])
    else:
        with stage("table"):
            frame = features.feature_table(frame, acquisitions[0])
    report = ChunkReport.of(source.path, result)
    report.acquisitions = loaded
    if out is None:
        return frame, report
    frame.to_parquet(os.path.join(out, f"part.{index:05d}.parquet"), index=False)
    return len(frame), report


def _tasks(plan: Plan, device: str, policy: str, intermediate: bool, out: str | None = None):
    """One task per chunk, and one per group of acquisition files that several chunks join
    (or none). A chunk that alone joins its group loads it in its own task: one task fewer
    (each costs a few ms of round trips to the scheduler), and the chunk depends on no other
    task, so it goes to the first free worker instead of the one that holds its
    acquisitions."""
    joins = Counter(plan.key(chunk) for chunk in plan.chunks)
    shared = {key: dask.delayed(load_acquisitions, pure=False, nout=2)(
        sources, device, policy, plan.names) for key, sources in plan.acquisitions.items()
        if joins[key] != 1}
    chunks = [dask.delayed(process_chunk, pure=False, nout=2)(
        chunk, shared.get(plan.key(chunk), plan.acquisitions[plan.key(chunk)]), device,
        policy, plan.names, intermediate, out, i) for i, chunk in enumerate(plan.chunks)]
    return chunks, [a[1] for a in shared.values()]


def meta(device: str = "cpu", intermediate: bool = False):
    """An empty frame with the ETL output's columns and dtypes (pandas or cuDF)."""
    cpu = Backend("cpu")
    perf = read.empty_frame(schema.PERFORMANCE, cpu)
    acq = read.empty_frame(schema.ACQUISITION, cpu)
    frame = features.performance_features(perf)
    if intermediate:
        frame = features.join_acquisition(frame, acq)
    else:
        frame = features.feature_table(frame, acq)
    return frame if device == "cpu" else Backend(device).df.DataFrame(frame)


# ---------------------------------------------------------------------------------------------
# Running it


@dataclass
class EtlResult:
    frame: dd.DataFrame | None  # persisted; None when written to files
    quarters: list[str | None]  # quarter of each partition
    rows: int
    input_bytes: int
    bad_count: int
    bad: list[BadRow]
    seconds: float
    partitions: int

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else float("nan")

    @property
    def bytes_per_second(self) -> float:
        return self.input_bytes / self.seconds if self.seconds else float("nan")

    def summary(self) -> str:
        text = (f"{self.rows:,} rows from {format_bytes(self.input_bytes)} of text in "
                f"{self.partitions} partitions, {self.seconds:.2f} s "
                f"({self.rows_per_second:,.0f} rows/s, "
                f"{format_bytes(self.bytes_per_second)}/s)")
        if self.bad_count:
            text += f"; {self.bad_count:,} bad rows dropped"
        return text


def _reports_outcome(reports, policy: str) -> tuple[int, list[BadRow]]:
    flat = []
    for item in reports:
        for report in item if isinstance(item, list) else [item]:
            flat += [report, *report.acquisitions]
    count = sum(r.bad_count for r in flat)
    rows = [row for r in flat for row in r.bad]
    if count and policy == "warn":
        warnings.warn(read.describe(rows, count).rsplit("\n", 1)[0]
                      + "\nThese rows were dropped (bad_rows='warn').", stacklevel=3)
    return count, rows


def _compute(collections, progress: bool):
    """Persist and wait, on the current client (with a progress bar) or on local threads."""
    client = _client()
    if client is None:
        return dask.persist(*collections)
    from distributed import progress as show
    from distributed import wait

    persisted = client.persist(list(collections))
    if progress:
        show(persisted)
    wait(persisted)
    return persisted


def _client():
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def run(perf, acq, names: str | None = None, *, device: str = "cpu",
        partition_size: int | str | None = None, bad_rows: str = "error",
        intermediate: bool = False, progress: bool = False) -> EtlResult:
    """Run the ETL and keep the result in the cluster's memory (for training).

    ``perf``/``acq``: files, directories or globs. ``device``: "gpu" (cuDF) or "cpu" (pandas).
    ``partition_size``: text per task (default: ``PARTITION_SIZES[device]``).
    Bad rows raise :class:`~.read.BadRowsError` (``bad_rows="error"``), or are dropped with a
    warning ("warn") or only counted ("skip"). ``intermediate``: keep ids, dates and the
    per-loan features instead of the 45-feature table.
    """
    read.check_policy(bad_rows)
    the_plan = plan(perf, acq, names, partition_size_for(device, partition_size))
    return run_plan(the_plan, device=device, bad_rows=bad_rows, intermediate=intermediate,
                    progress=progress)


def run_plan(the_plan: Plan, *, device: str = "cpu", bad_rows: str = "error",
             intermediate: bool = False, progress: bool = False) -> EtlResult:
    """:func:`run` on the files of a :func:`plan`."""
    read.check_policy(bad_rows)
    started = time.perf_counter()
    chunks, acq_reports = _tasks(the_plan, device, bad_rows, intermediate)
    persisted = _compute([*chunks, *acq_reports], progress)
    chunks, acq_reports = persisted[: len(chunks)], persisted[len(chunks):]
    reports = dask.compute(*[c[1] for c in chunks], *acq_reports)
    frame = dd.from_delayed([c[0] for c in chunks], meta=meta(device, intermediate),
                            verify_meta=False)
    (frame,) = _compute([frame], False)
    count, bad = _reports_outcome(reports, bad_rows)
    rows = sum(r.rows for r in reports[: len(chunks)])
    return EtlResult(frame, the_plan.quarters, rows, the_plan.input_bytes, count, bad,
                     time.perf_counter() - started, len(the_plan.chunks))


def write(out: str, perf, acq, names: str | None = None, *, device: str = "cpu",
          partition_size: int | str | None = None, bad_rows: str = "error",
          overwrite: bool = False, progress: bool = False) -> EtlResult:
    """Run the ETL and write the feature table to ``out``, a directory of Parquet files (one per
    chunk, written by the workers: ``out`` must be visible to them)."""
    read.check_policy(bad_rows)
    the_plan = plan(perf, acq, names, partition_size_for(device, partition_size))
    return write_plan(out, the_plan, device=device, bad_rows=bad_rows, overwrite=overwrite,
                      progress=progress)


def check_output(out: str, overwrite: bool = False) -> str:
    """The absolute path of ``out``, after checking that it may be (re)written."""
    out = os.path.abspath(out)
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} exists: remove it, or pass overwrite=True (--overwrite)")
    return out


def write_plan(out: str, the_plan: Plan, *, device: str = "cpu", bad_rows: str = "error",
               overwrite: bool = False, progress: bool = False) -> EtlResult:
    """:func:`write` on the files of a :func:`plan`."""
    read.check_policy(bad_rows)
    out = check_output(out, overwrite)
    if os.path.exists(out):
        shutil.rmtree(out) if os.path.isdir(out) else os.remove(out)
    os.makedirs(out)
    started = time.perf_counter()
    chunks, acq_reports = _tasks(the_plan, device, bad_rows, False, out)
    persisted = _compute([*chunks, *acq_reports], progress)
    results = dask.compute(*persisted)
    chunk_results = results[: len(chunks)]
    count, bad = _reports_outcome([r[1] for r in chunk_results] + list(results[len(chunks):]),
                                  bad_rows)
    rows = int(np.sum([r[0] for r in chunk_results]))
    return EtlResult(None, the_plan.quarters, rows, the_plan.input_bytes, count, bad,
                     time.perf_counter() - started, len(the_plan.chunks))

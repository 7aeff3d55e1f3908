"""The classic layout's join of each performance row to its loan's acquisition row, three ways.

- ``quarter`` (the default): each partition's task joins its rows to its quarter's acquisition
  file, read once by a task the quarter's partitions share. Nothing moves between workers, but
  it relies on the files' layout: a loan whose acquisition row is in another quarter's file
  (or in a file without a quarter in its name, beside files that have one) gets its acquired
  features as missing (-1), as a loan with no acquisition row does.
- ``loan``: the performance rows of every partition (with their per-loan features and label)
  and the acquisition rows of every quarter are both hash-partitioned on ``loan_id`` into the
  same number of partitions with the library's all-to-all, :func:`dask_gpu_interop.shuffle`,
  so that a loan's performance rows and its acquisition row land in the same output partition
  index wherever they were read; each pair of output partitions then becomes its feature table
  where it lies. The result does not depend on which file holds a loan's acquisition row.
- ``dask``: the same with dask's own shuffle (``DataFrame.shuffle``), for comparison; on the
  library's GPU clusters that is dask's task shuffle (``dask_gpu_interop.shuffle_config``).

Both shuffled joins hold the performance rows of the whole dataset in the workers' memory
between the read and the join (dask-cuda's and the library's GPU workers spill to host
memory what does not fit), where the per-quarter join holds only the partitions in flight.
They need a distributed client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import features, schema

JOINS = ("quarter", "loan", "dask")
DEFAULT = "quarter"
KEY = "loan_id"


def check(join: str, layout: schema.Layout) -> None:
    """ValueError, saying what to do, for a join that ``layout``'s files cannot take."""
    if join not in JOINS:
        raise ValueError(f"join={join!r}: choose one of {', '.join(JOINS)}")
    if join != DEFAULT and layout.name == schema.CURRENT.name:
        raise ValueError(
            f"--join {join} joins the classic layout's acquisition files, and these files are "
            "in the current layout, where each row carries its loan's acquisition fields: "
            "leave --join out")


@dataclass
class Shuffled:
    """Both sides of a shuffled join in the workers' memory: ``pairs``, the (performance,
    acquisitions) partitions of each output partition, as delayed objects; the quarter of
    each; the reports of the reading tasks (performance first, then acquisitions); the
    shuffles' seconds and, for the library's, one line of statistics each."""

    pairs: list[tuple]
    quarters: list[str | None]
    reports: list
    seconds: float
    stats: list[str] = field(default_factory=list)
    frames: list = field(default_factory=list)  # the shuffled frames: ``pairs`` need them kept


def _empty(frame):
    return frame.iloc[:0]


def _shuffle(client, frame, npartitions: int, join: str):
    """(``frame`` hash-partitioned on loan_id into ``npartitions``, in the workers' memory;
    the library's statistics or None)."""
    if join == "loan":
        from dask_gpu_interop import shuffle

        return shuffle(frame, KEY, npartitions=npartitions, ignore_index=True, client=client,
                       return_stats=True)
    from distributed import wait

    out = client.persist(frame.shuffle(KEY, npartitions=npartitions, ignore_index=True))
    wait(out)
    return out, None


def shuffled(client, perf: list, acq: list, quarters: list, join: str, *,
             by_quarter: bool = False, progress: bool = False) -> Shuffled:
    """Read the performance rows and the acquisition rows (``perf``, ``acq``: delayed tasks
    that each give a (frame, report) pair; ``quarters``: the quarter of each of ``perf``),
    then shuffle both on loan_id (``join``: "loan" or "dask") into as many partitions as
    ``perf`` has. ``by_quarter``: the performance rows of each quarter shuffled apart, into
    that many partitions each (with the acquisitions shuffled once into the same number), so
    that every output partition is of one quarter, as training's held-out quarter needs."""
    import dask.dataframe as dd

    from .progress import wait

    if not acq:
        raise ValueError(f"join={join!r}: no acquisition files to join")
    futures = client.compute([t[0] for t in perf + acq] + [t[1] for t in perf + acq])
    tables, report_futures = futures[:len(futures) // 2], futures[len(futures) // 2:]
    if progress:
        wait(tables[:len(perf)], "ETL partitions")
    perf_tables, acq_tables = tables[:len(perf)], tables[len(perf):]
    del futures, tables  # the shuffles release the tables read once they are split
    perf_meta = client.submit(_empty, perf_tables[0]).result()
    acq_meta = client.submit(_empty, acq_tables[0]).result()
    groups: dict[str | None, list] = {}
    for quarter, table in zip(quarters, perf_tables, strict=True):
        groups.setdefault(quarter if by_quarter else None, []).append(table)
    del perf_tables
    npartitions = max(len(group) for group in groups.values())
    started = time.perf_counter()
    lines = []
    acquired, seen = _shuffle(client, dd.from_delayed(acq_tables, meta=acq_meta,
                                                      verify_meta=False), npartitions, join)
    lines += [f"acquisitions: {seen}"] if seen else []
    del acq_tables
    frames, acquired = [acquired], acquired.to_delayed()
    pairs, quarters = [], []  # now: the quarter of each output partition
    for quarter in list(groups):
        frame = dd.from_delayed(groups.pop(quarter), meta=perf_meta, verify_meta=False)
        rows, seen = _shuffle(client, frame, npartitions, join)
        lines += [f"performance rows{f' of {quarter}' if quarter else ''}: {seen}"] if seen else []
        pairs += zip(rows.to_delayed(), acquired, strict=True)
        frames.append(rows)
        quarters += [quarter] * npartitions
    seconds = time.perf_counter() - started
    return Shuffled(pairs, quarters, client.gather(report_futures), seconds, lines, frames)


def feature_part(perf, acq):
    """The feature table of one output partition's performance rows (with their per-loan
    features) and acquisition rows (as read)."""
    return features.feature_table(perf, features.acquisitions(acq))

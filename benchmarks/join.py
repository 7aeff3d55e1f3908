"""A join across GPUs: mortgage-like performance rows with their acquisition rows on loan_id,
the library's shuffle_merge against dask's own merge.

    python -m benchmarks.join [--sizes 256MiB,2GiB] [--rows-per-loan 36]
                              [--partitions-per-worker 8] [--acquisition-partitions-per-worker 2]
                              [--methods library,tasks,p2p] [--p2p-up-to 256MiB]
                              [--protocols ucx,tcp] [--clusters library,dask-cuda]
                              [--repeats 3] [--workers 2] [--device gpu|cpu] [--pool-size 0.6]
                              [--spill] [--dry-run] [--out DIR] [--machine 2xH100] [--commit abc1234]

Each worker makes its share of two synthetic tables, as the mortgage data has them but with no
file layout to lean on: performance rows (loan_id int64, period int32, current_upb float64,
loan_age int32; ``--sizes`` bytes of them per worker) whose loan ids are drawn at random from
every loan, so that each loan's rows are spread over every partition, and one acquisition row
per loan (loan_id, orig_rate float64, orig_upb float64, credit_score int32), the loans dealt
to the acquisition partitions in turn. Loan ids look like the real ones (twelve digits, not
consecutive). The two are then joined on loan_id, inner, and kept in memory, by each method:

- ``library``: ``dask_gpu_interop.shuffle_merge`` (both sides shuffled into the performance
  side's partitions with the library's all-to-all, then a merge per pair of partitions);
- ``tasks``, ``p2p``: dask's own ``performance.merge(acquisition, on="loan_id",
  shuffle_method=...)``; which join dask planned (hash join or broadcast) is recorded.

Every performance row has its loan, so the join has as many rows as the performance table.
The first run of each method at each size is checked, untimed: that count, and a checksum of
every row's hash (columns in name order), which must be the same for every method. Timed runs
alternate, round by round in a rotated order. ``--device cpu`` runs the same with pandas on CPU
worker processes over TCP. Results: DIR/join-MACHINE.md and .json (benchmarks/common.py).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time

from dask.utils import format_bytes, parse_bytes

from .common import Script, alternate, header, say
from .shuffle import (
    METHODS,
    check_clusters,
    checksum,
    cluster_options,
    on_each_cluster,
    rate,
    workers_of,
)

PERFORMANCE_ROW_BYTES = 24  # loan_id int64, period int32, current_upb float64, loan_age int32
ACQUISITION_ROW_BYTES = 28  # loan_id int64, orig_rate float64, orig_upb float64, score int32
LOAN_BASE = 100_000_000_000  # twelve digits
LOAN_STRIDE = 7919  # ids not consecutive


# ------------------------------------------------------------------ tasks, run on the workers


def _modules(device: str):
    if device == "gpu":
        import cudf
        import cupy

        return cupy, cudf.DataFrame
    import numpy
    import pandas

    return numpy, pandas.DataFrame


def loan_ids(xp, indices):
    return LOAN_BASE + indices.astype(xp.int64) * LOAN_STRIDE


def make_performance(index: int, rows: int, loans: int, device: str):
    """``rows`` monthly rows of loans drawn at random from all ``loans``."""
    xp, frame = _modules(device)
    rng = xp.random.default_rng(index)
    out = frame({
        "loan_id": loan_ids(xp, rng.integers(0, loans, rows, dtype=xp.int64)),
        "period": rng.integers(0, 240, rows, dtype=xp.int64).astype(xp.int32),
        "current_upb": rng.random(rows, dtype=xp.float64) * 400_000,
        "loan_age": rng.integers(0, 360, rows, dtype=xp.int64).astype(xp.int32),
    })
    if device == "gpu":
        xp.cuda.runtime.deviceSynchronize()
    return out


def make_acquisition(index: int, count: int, loans: int, device: str):
    """One row for each loan ``index``, ``index + count``, ... below ``loans``."""
    xp, frame = _modules(device)
    which = xp.arange(index, loans, count, dtype=xp.int64)
    out = frame({
        "loan_id": loan_ids(xp, which),
        "orig_rate": 2.0 + (which % 600).astype(xp.float64) / 100,
        "orig_upb": 50_000.0 + (which % 9_000).astype(xp.float64) * 50,
        "credit_score": (580 + which % 270).astype(xp.int32),
    })
    if device == "gpu":
        xp.cuda.runtime.deviceSynchronize()
    return out


# ------------------------------------------------------------------ the client side


def build_tables(client, device: str, per_worker: int, args):
    """Both tables made on the workers, and a function giving them as frames under new names.
    Returns (tables, futures kept alive, performance rows, loans)."""
    import dask.dataframe as dd
    from distributed import wait

    workers = sorted(client.nthreads())
    performance_parts = args.partitions_per_worker * len(workers)
    rows = max(1, per_worker // args.partitions_per_worker // PERFORMANCE_ROW_BYTES)
    loans = max(1, rows * performance_parts // args.rows_per_loan)
    acquisition_parts = args.acquisition_partitions_per_worker * len(workers)
    performance = [client.submit(make_performance, i, rows, loans, device, pure=False,
                                 workers=[workers[i % len(workers)]])
                   for i in range(performance_parts)]  # fmt: skip
    acquisition = [client.submit(make_acquisition, i, acquisition_parts, loans, device,
                                 pure=False, workers=[workers[i % len(workers)]])
                   for i in range(acquisition_parts)]  # fmt: skip
    wait(performance + acquisition)
    metas = (make_performance(0, 0, 1, "cpu"), make_acquisition(0, 1, 0, "cpu"))
    if device == "gpu":
        import cudf

        metas = tuple(cudf.from_pandas(m) for m in metas)

    def tables(run: int):
        return (dd.from_delayed(performance, meta=metas[0], verify_meta=False,
                                prefix=f"performance-{run}"),
                dd.from_delayed(acquisition, meta=metas[1], verify_meta=False,
                                prefix=f"acquisition-{run}"))  # fmt: skip

    return tables, (performance, acquisition), rows * performance_parts, loans


def dask_join_plan(performance, acquisition, method: str) -> str:
    """The join dask plans for ``method``: the names of its lowered join and shuffle steps
    (a hash join moves both sides, a broadcast join only the smaller)."""
    joined = performance.merge(acquisition, on="loan_id", shuffle_method=method)
    names = {type(e).__name__ for e in joined.expr.lower_completely().walk()}
    steps = sorted(n for n in names if any(w in n for w in ("Join", "Merge", "Shuffle")))
    return ", ".join(steps) or "?"


def join_once(performance, acquisition, method: str):
    """(the joined frame in memory, seconds)."""
    from distributed import wait

    import dask_gpu_interop

    started = time.perf_counter()
    if method == "library":
        joined = dask_gpu_interop.shuffle_merge(performance, acquisition, on="loan_id")
    else:
        joined = performance.merge(acquisition, on="loan_id", shuffle_method=method)
    joined = joined.persist()
    wait(joined)
    return joined, time.perf_counter() - started


def runs_planned(args) -> list[tuple[str, str, int, list[str]]]:
    planned = []
    for kind, protocol, size in itertools.product(args.clusters, args.protocols, args.sizes):
        methods = [m for m in args.methods if m != "p2p" or size <= args.p2p_up_to]
        planned.append((kind, protocol, size, methods))
    return planned


def entry_key(kind: str, protocol: str, size: int, method: str) -> str:
    return f"{kind}|{protocol}|{size}|{method}"


def measure(args, run) -> None:
    workers = workers_of(args)
    if workers < 1:
        raise SystemExit("the join needs a worker (a GPU with --device gpu)")
    results = run.payload
    results.update({
        "workers": workers, "device": args.device,
        "sizes": args.sizes, "repeats": args.repeats, "rows_per_loan": args.rows_per_loan,
        "partitions": workers * args.partitions_per_worker,
        "acquisition_partitions": workers * args.acquisition_partitions_per_worker,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "NCCL_"))},
        "tables": {}, "runs": {}, "errors": {},
    })  # fmt: skip
    on_each_cluster(args, runs_planned(args), workers, run, measure_size)


def measure_size(client, args, kind, protocol, size, methods, names, results) -> None:
    tables, made, rows, loans = build_tables(client, args.device, size, args)
    results["tables"][str(size)] = {"performance_rows": rows, "loans": loans,
                                    "performance_bytes": rows * PERFORMANCE_ROW_BYTES,
                                    "acquisition_bytes": loans * ACQUISITION_ROW_BYTES}
    entries = {m: results["runs"].setdefault(entry_key(kind, protocol, size, m), {})
               for m in methods}  # fmt: skip
    for method in methods:
        if method != "library":
            entries[method]["plan"] = dask_join_plan(*tables(next(names)), method)
    for round_, method in alternate(methods, args.repeats + 1, rotate=True):
        entry = entries[method]
        if "error" in entry:
            continue
        try:
            joined, seconds = join_once(*tables(next(names)), method)
            if round_ == 0:  # the warm-up, checked
                count = int(joined.map_partitions(len).compute().sum())
                entry["check"] = {"rows": count, "rows_ok": count == rows,
                                  "checksum": str(checksum(joined))}
                entry["seconds"] = []
                del joined
                continue
            del joined
            entry["seconds"].append(seconds)
            say(f"{kind} {protocol} {format_bytes(size)} {method} run {round_}: {seconds:.3f} s")
        except Exception as err:  # one failure must not lose the other rows
            entry["error"] = f"{type(err).__name__}: {err}"
            say(f"{kind} {protocol} {format_bytes(size)} {method} failed: {entry['error']}")
    sums = {e["check"]["checksum"] for e in entries.values() if e.get("check")}
    for entry in entries.values():
        if entry.get("check"):
            entry["check"]["same_as_others"] = len(sums) == 1
    del tables, made


# ------------------------------------------------------------------ the report


def split_key(key: str) -> tuple[str, str, int, str]:
    kind, protocol, size, method = key.split("|")
    return kind, protocol, int(size), method


def markdown(results: dict) -> str:
    workers = results["workers"]
    lines = [
        *header(f"Join on loan_id, {results['machine_name']}", results["command"],
                results["machine"], results["commit"], results["date"]),
        f"- {workers} workers ({results['device']}), one thread each; performance rows per "
        f"worker: {', '.join(format_bytes(s) for s in results['sizes'])} "
        f"({results['partitions']} partitions in all), about {results['rows_per_loan']} per "
        f"loan; one acquisition row per loan ({results['acquisition_partitions']} partitions); "
        f"inner join, kept in memory; medians of {results['repeats']} runs, methods alternated",
        f"- UCX/NCCL environment as found: {results['env'] or 'none set'}",
    ]
    for where, error in (results.get("errors") or {}).items():
        lines.append(f"- {where.replace('|', ' ')}: failed: {error[:300]}")
    groups: dict[tuple[str, str], list[str]] = {}
    for key in results["runs"]:
        groups.setdefault(split_key(key)[:2], []).append(key)
    for (kind, protocol), keys in groups.items():
        lines += ["", f"### {kind} cluster, {protocol.upper()}", "",
                  "| performance per worker | method | median s | min s | both tables GB/s | "
                  "vs tasks | dask's join | rows | checked |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
        for key in keys:
            lines.append(table_row(results, key))
    return "\n".join(lines) + "\n"


def table_row(results: dict, key: str) -> str:
    kind, protocol, size, method = split_key(key)
    entry = results["runs"][key]
    table = results["tables"].get(str(size)) or {}
    if not entry.get("seconds"):
        why = entry.get("error") or "no timed run"
        return f"| {format_bytes(size)} | {method} | failed: {why[:160]} |" + " |" * 6
    med = statistics.median(entry["seconds"])
    both = (table.get("performance_bytes", 0) + table.get("acquisition_bytes", 0)) / med / 1e9
    tasks = results["runs"].get(f"{kind}|{protocol}|{size}|tasks", {})
    versus = (f"{statistics.median(tasks['seconds']) / med:.2f}x"
              if tasks.get("seconds") and method != "tasks" else "-")
    found = entry.get("check") or {}
    ok = "ok" if found.get("rows_ok") and found.get("same_as_others") else f"FAILED {found}"
    return (f"| {format_bytes(size)} | {method} | {med:.3f} | {min(entry['seconds']):.3f} | "
            f"{rate(both)} | {versus} | {entry.get('plan', '-')} | {found.get('rows', 0):,} | "
            f"{ok} |")


# ------------------------------------------------------------------ the command line


def options(parser) -> None:
    parser.add_argument("--sizes", default="256MiB,2GiB",
                        help="performance bytes made on each worker, comma-separated")
    parser.add_argument("--rows-per-loan", type=int, default=36,
                        help="performance rows per loan, on average")  # fmt: skip
    parser.add_argument("--partitions-per-worker", type=int, default=8,
                        help="performance partitions per worker")  # fmt: skip
    parser.add_argument("--acquisition-partitions-per-worker", type=int, default=2)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"of: {', '.join(METHODS)}")
    parser.add_argument("--p2p-up-to", default="256MiB",
                        help="p2p runs only at sizes up to this (it goes through host memory)")
    cluster_options(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the runs it would make; start nothing")  # fmt: skip


def check_arguments(parser_, args) -> None:
    try:
        args.sizes = [parse_bytes(s) for s in args.sizes.split(",") if s.strip()]
        args.p2p_up_to = parse_bytes(args.p2p_up_to)
    except ValueError as err:
        parser_.error(f"--sizes / --p2p-up-to: {err}")
    if not args.sizes or min(args.sizes) < 1:
        parser_.error("--sizes: at least one size, each above zero")
    check_clusters(parser_, args)
    for flag in ("rows_per_loan", "partitions_per_worker", "acquisition_partitions_per_worker",
                 "repeats"):
        if getattr(args, flag) < 1:
            parser_.error(f"--{flag.replace('_', '-')} must be at least 1")


def dry_run(args) -> str:
    """What ``args`` would run, one line per configuration; nothing starts."""
    workers = (f"{args.workers} worker{'s' if args.workers > 1 else ''}" if args.workers
               else "one worker per GPU" if args.device == "gpu" else "2 workers")
    lines = [f"{workers} ({args.device}); performance {args.partitions_per_worker} "
             f"partitions per worker, acquisition {args.acquisition_partitions_per_worker}; "
             f"{args.repeats} timed runs per method after a checked one"]  # fmt: skip
    joins = 0
    for kind, protocol, size, methods in runs_planned(args):
        joins += len(methods) * (args.repeats + 1)
        lines.append(f"{kind} cluster, {protocol}: {format_bytes(size)} of performance rows per "
                     f"worker: {', '.join(methods)} ({len(methods) * (args.repeats + 1)} joins)")
    lines.append(f"{joins} joins in all")
    return "\n".join(lines)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="join", dry_run=dry_run,
                gpus=lambda args: workers_of(args) if args.device == "gpu" else 0)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

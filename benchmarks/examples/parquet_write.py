"""The mortgage ETL's Parquet write, cuDF's ways side by side on the same feature tables.

    python -m benchmarks.examples.parquet_write --data DIR [--partitions 2] [--rounds 3]

The etl command's task ends by writing its partition's feature table to a Parquet file
(``etl.write_table``: ``to_parquet(path, index=False)``, Snappy, statistics per row group,
dictionaries). Here the first ``--partitions`` partitions of DIR (the GPU's partition size,
classic or current layout) are made into feature tables once, in one process with the GPU
workers' environment and a plain RMM pool (``common.as_gpu_worker``); then every way of
writing them runs on every table, rounds alternating in a rotating order, the first round
discarded: seconds per table, the file's bytes, and whether the file reads back to the same
rows. The ways:

- ``etl``: the example's own write (``etl.write_table``);
- ``zstd``, ``lz4``, ``uncompressed``: other codecs (``compression=``);
- ``no statistics``: ``statistics="NONE"``;
- ``no dictionary``: ``use_dictionary=False``;
- ``host buffer``: the same file written into host memory, then to the file in one call;
- ``pyarrow``: the table copied to host memory and written by pyarrow (Snappy).

The harness (benchmarks/common.py) records the machine and the commit and writes
``--out``/mortgage-parquet-write-MACHINE.md (and .json).
"""

from __future__ import annotations

import io
import os
import shutil
import time

from ..common import (
    Script,
    alternate,
    as_gpu_worker,
    header,
    median_range,
    require_dataset,
    say,
    summary,
)


def _etl(table, path):
    from examples.mortgage import etl

    etl.write_table(path, table)


def _options(**options):
    def write(table, path):
        table.to_parquet(path, index=False, **options)
    return write


def _host_buffer(table, path):
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    with open(path, "wb") as f:
        f.write(buffer.getbuffer())


def _pyarrow(table, path):
    import pyarrow.parquet as pq

    pq.write_table(table.to_arrow(preserve_index=False), path, compression="snappy")


WAYS = {"etl": _etl, "zstd": _options(compression="ZSTD"), "lz4": _options(compression="LZ4"),
        "uncompressed": _options(compression=None), "no statistics": _options(statistics="NONE"),
        "no dictionary": _options(use_dictionary=False), "host buffer": _host_buffer,
        "pyarrow": _pyarrow}


def tables(directory: str, count: int) -> list:
    """The feature tables of the first ``count`` partitions of ``directory``, on the GPU."""
    from examples.mortgage import etl, files

    size = files.partition_size_for("gpu")
    plan = files.plan(directory, partition_size=size)
    found = []
    for part in plan.parts[:count]:
        acquisitions = None
        if plan.acquisitions:
            acquisitions = etl.load_acquisitions(plan.acquisition_files(part.quarter), "gpu",
                                                 plan.names)[0]
        found.append(etl.process_part(part, plan.layout, acquisitions, "gpu", plan.names)[0])
    return found


def options(parser) -> None:
    parser.add_argument("--data", required=True, help="A dataset made by the README's generate.")
    parser.add_argument("--partitions", type=int, default=2, help="Feature tables to write.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds after the first.")


def check(parser, args) -> None:
    if args.partitions < 1 or args.rounds < 1:
        parser.error("--partitions and --rounds: at least 1")


def measure(args, run) -> None:
    require_dataset(args.data)
    as_gpu_worker()
    import cudf

    made = tables(args.data, args.partitions)
    run.payload["tables"] = [{"rows": len(t), "columns": len(t.columns),
                              "device_bytes": int(t.memory_usage().sum())} for t in made]
    found = run.payload["ways"] = {name: [] for name in WAYS}
    scratch = run.scratch()
    for round_, name in alternate(list(WAYS), args.rounds + 1, rotate=True):
        for i, table in enumerate(made):
            path = os.path.join(scratch, f"{i}.parquet")
            started = time.perf_counter()
            WAYS[name](table, path)
            seconds = time.perf_counter() - started
            if round_:
                same = len(cudf.read_parquet(path)) == len(table)
                found[name].append({"table": i, "seconds": seconds,
                                    "bytes": os.path.getsize(path), "same rows": same})
            os.remove(path)
        if round_:
            say(f"{name}: {found[name][-len(made):]}")
    shutil.rmtree(scratch, ignore_errors=True)


def markdown(payload: dict) -> str:
    lines = [*header("The mortgage ETL's Parquet write, cuDF's ways side by side",
                     payload["command"], payload["machine"], payload["commit"],
                     payload.get("date")), ""]
    made = payload.get("tables", [])
    lines += [f"Tables: {len(made)}, " + "; ".join(
        f"{t['rows']:,} rows, {t['columns']} columns, "
        f"{t['device_bytes'] / 2**20:,.0f} MiB on the GPU"
        for t in made), "",
        "Seconds per table, median (range) of every table and round after the first; the file's "
        "MiB (median); against the etl command's way.", "",
        "| way | seconds | file MiB | time / etl's | reads back the same rows |",
        "| --- | --- | --- | --- | --- |"]
    ways = payload.get("ways", {})
    etl = [r["seconds"] for r in ways.get("etl", [])]
    base = summary(etl)["median"] if etl else None
    for name, results in ways.items():
        if not results:
            continue
        seconds = [r["seconds"] for r in results]
        size = summary([r["bytes"] / 2**20 for r in results])["median"]
        ratio = f"{summary(seconds)['median'] / base:.2f}" if base else ""
        same = "yes" if all(r["same rows"] for r in results) else "no"
        lines.append(f"| {name} | {median_range(seconds, '{:.3f}')} | {size:,.1f} | {ratio} | "
                     f"{same} |")
    return "\n".join(lines) + "\n"


SCRIPT = Script(__file__, __doc__, options=options, check=check, measure=measure,
                markdown=markdown, name="mortgage-parquet-write")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

"""The mortgage ETL against its readers' ceiling: each device's ETL stage beside the reader it
is built on, on the same files, in one run.

    python -m benchmarks.examples.etl_ceiling --data DIR [--size 9GB] [--layouts classic,current]
        [--runs 2] [--reader-runs 3]

For each layout, on a dataset made by the README's ``generate`` command:

- the GPU's ceiling: ``cudf.read_csv`` of the ETL's columns as text (the loan id as int64),
  every file in 1 GiB byte ranges, in one warm process (the first pass discarded), with the
  environment the etl command gives its GPU workers (kvikio's I/O threads among it);
- the CPUs' ceiling: pyarrow's multithreaded CSV reader, the same columns as text, every core;
- the README's ``etl --data DIR --out OUT --device gpu|cpu``, alternating: its ETL stage (the
  figure it reports) as GB/s of input text, and that as a share of its own device's reader;
- the write: the command's Parquet write beside ``cudf.DataFrame.to_parquet`` of the same
  feature table in one process (read back from the command's output; a first write
  discarded).

The harness (benchmarks/common.py) records the machine and the commit and writes
``--out``/mortgage-etl-ceiling-MACHINE.md (and .json).
"""

from __future__ import annotations

import os
import shutil
import time

from ..common import Script, header, in_child, interleave, median_range, say, summary
from .mortgage import EXAMPLE, check_layouts, dataset_options, figures_of, generate

RANGE = 2**30  # the GPU reader's byte range


def read_jobs(directory: str) -> list[tuple[str, list[str], list[str], dict]]:
    """(path, the file's column names, the ETL's columns of it, their dtypes) for every file
    the ETL reads in ``directory``."""
    from examples.mortgage import files, schema

    plan = files.plan(directory, partition_size=RANGE)
    columns = list(schema.PERFORMANCE_READ)
    if plan.layout.name == schema.CURRENT.name:
        columns += list(schema.ACQUISITION_READ[1:])
    jobs = []

    def add(path, layout, wanted):
        names = [layout.classic[c] for c in wanted]
        dtypes = {name: "int64" if c == "loan_id" else "str" for c, name in zip(wanted, names, strict=True)}
        jobs.append((path, list(layout.names), names, dtypes))

    for path in sorted({p.path for part in plan.parts for p in part.pieces}):
        add(path, plan.layout, columns)
    for path in sorted({p for group in plan.acquisitions.values() for p in group}):
        add(path, schema.CLASSIC_ACQUISITION, schema.ACQUISITION_READ)
    return jobs


def gpu_reader(jobs) -> float:
    """Seconds for ``cudf.read_csv`` of every job's columns, 1 GiB byte ranges."""
    import cudf

    started = time.perf_counter()
    for path, names, usecols, dtypes in jobs:
        size = os.path.getsize(path)
        for offset in range(0, size, RANGE):
            cudf.read_csv(path, sep="|", header=None, names=names, usecols=usecols,
                          dtype=dtypes, byte_range=(offset, min(RANGE, size - offset)),
                          quoting=3, na_filter=False)
    return time.perf_counter() - started


def cpu_reader(jobs) -> float:
    """Seconds for pyarrow's multithreaded reader of every job's columns."""
    import pyarrow as pa
    from pyarrow import csv

    started = time.perf_counter()
    for path, names, usecols, dtypes in jobs:
        types = {name: pa.int64() if dtype == "int64" else pa.string()
                 for name, dtype in dtypes.items()}
        csv.read_csv(path, read_options=csv.ReadOptions(column_names=names, use_threads=True),
                     parse_options=csv.ParseOptions(delimiter="|", quote_char=False),
                     convert_options=csv.ConvertOptions(include_columns=usecols,
                                                        column_types=types))
    return time.perf_counter() - started


def gpu_write(table_directory: str, scratch: str) -> float:
    """Seconds for ``cudf.DataFrame.to_parquet`` of the feature table in ``table_directory``."""
    import cudf

    frame = cudf.read_parquet(table_directory)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    started = time.perf_counter()
    frame.to_parquet(os.path.join(scratch, "part.parquet"), index=False)
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def timed_in_child(setup: str, call: str, runs: int, env: dict | None = None) -> list[float]:
    """The seconds ``call`` returns, in a fresh process after ``setup`` (this module is ``m``)
    with ``env`` added to the environment: ``runs`` + 1 calls, the first (the process's
    warm-up) discarded."""
    return in_child(f"[{call} for _ in range({runs})]", env=env,
                    setup=f"from benchmarks.examples import etl_ceiling as m\n{setup}\n{call}")


def layout_runs(directory: str, runs: int, reader_runs: int, scratch: str) -> dict:
    from dask_gpu_interop.worker import gpu_workers
    from examples.mortgage import files

    workers_env = {k: v for k, v in gpu_workers.ENVIRON.items() if k not in os.environ}
    input_bytes = files.plan(directory, partition_size=RANGE).input_bytes
    jobs = f"jobs = m.read_jobs({directory!r})"
    result = {"input_bytes": input_bytes,
              "gpu reader": timed_in_child(jobs, "m.gpu_reader(jobs)", reader_runs, workers_env),
              "cpu reader": timed_in_child(jobs, "m.cpu_reader(jobs)", reader_runs),
              "gpu": [], "cpu": []}
    say(f"readers {os.path.basename(directory)}: gpu {result['gpu reader']}, "
        f"cpu {result['cpu reader']}")
    out = os.path.join(scratch, "ceiling-features.parquet")
    for _, device in interleave({"gpu": runs, "cpu": runs}):
        figures, _, wall = figures_of([*EXAMPLE, "etl", "--data", directory, "--out", out,
                                       "--overwrite", "--device", device])
        found = figures["etl"]
        result[device].append({"wall": wall, "etl": found["seconds"],
                               "write": None})  # written in the ETL stage: no figure of its own
        say(f"etl {device} {os.path.basename(directory)}: {result[device][-1]}")
    result["gpu to_parquet"] = timed_in_child("pass", f"m.gpu_write({out!r}, {out + '.scratch'!r})",
                                              2)
    shutil.rmtree(out, ignore_errors=True)
    return result


def _rate(input_bytes: int, seconds: list[float]) -> str:
    return median_range([input_bytes / s / 1e9 for s in seconds])


def markdown(payload: dict) -> str:
    lines = [*header(f"The mortgage ETL against its readers ({payload['machine_name']})",
                     payload["command"], payload["machine"], payload["commit"],
                     payload.get("date")), "",
             "GB/s of input text (10^9 bytes), median (range). Readers: one warm process, the "
             "ETL's columns as text (the GPU's with the etl command's worker environment). ETL: the ETL stage of the README's etl command (whole "
             "process: imports, cluster start, write excluded). Share: the ETL's median over "
             "its own device's reader's.", "",
             "| layout | input | GPU reader | GPU ETL | GPU share | CPU reader | CPU ETL | "
             "CPU share | GPU ETL / CPU ETL |", "| --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- |"]
    for layout, r in payload["layouts"].items():
        size = r["input_bytes"]
        rates = {name: [size / s for s in seconds] for name, seconds in (
            ("gpu reader", r["gpu reader"]), ("cpu reader", r["cpu reader"]),
            ("gpu", [x["etl"] for x in r["gpu"]]), ("cpu", [x["etl"] for x in r["cpu"]]))}
        mid = {name: summary(values)["median"] for name, values in rates.items()}
        lines.append(
            f"| {layout} | {size / 2**30:.2f} GiB | {_rate(size, r['gpu reader'])} "
            f"| {_rate(size, [x['etl'] for x in r['gpu']])} | {mid['gpu'] / mid['gpu reader']:.0%} "
            f"| {_rate(size, r['cpu reader'])} | {_rate(size, [x['etl'] for x in r['cpu']])} "
            f"| {mid['cpu'] / mid['cpu reader']:.0%} | {mid['gpu'] / mid['cpu']:.1f}x |")
    lines += ["", "The etl command's whole wall clock, seconds (as a user waits for it): its work "
              "lines (the ETL and the write) and the rest (imports, the cluster's start and "
              "stop).", "",
              "| layout | device | wall | ETL + write | wall - (ETL + write) | CPU wall / GPU wall |",
              "| --- | --- | --- | --- | --- | --- |"]
    for layout, r in payload["layouts"].items():
        walls = {device: [x["wall"] for x in r[device]] for device in ("gpu", "cpu")}
        for device in ("gpu", "cpu"):
            if not r[device]:
                continue
            work = [x["etl"] + (x["write"] or 0.0) for x in r[device]]
            rest = [w - k for w, k in zip(walls[device], work, strict=True)]
            versus = (f"{summary(walls['cpu'])['median'] / summary(walls['gpu'])['median']:.1f}x"
                      if device == "gpu" and walls["cpu"] else "")
            lines.append(f"| {layout} | {device} | {median_range(walls[device])} | "
                         f"{median_range(work)} | "
                         f"{median_range(rest)} | "
                         f"{versus} |")
    lines += ["", "The feature table's Parquet write, seconds: the etl command's write line "
              "against `cudf.DataFrame.to_parquet` of the same table in one process.", "",
              "| layout | etl command's write (GPU) | to_parquet | ratio |", "| --- | --- | --- | --- |"]
    for layout, r in payload["layouts"].items():
        writes = [x["write"] for x in r["gpu"] if x["write"] is not None]
        if writes and r.get("gpu to_parquet"):
            ratio = summary(writes)["median"] / summary(r["gpu to_parquet"])["median"]
            lines.append(f"| {layout} | {median_range(writes)} | "
                         f"{median_range(r['gpu to_parquet'])} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    dataset_options(parser, "9GB")
    parser.add_argument("--runs", type=int, default=2, help="etl commands per device and layout.")
    parser.add_argument("--reader-runs", type=int, default=3, help="Timed passes per reader.")


def measure(args, run) -> None:
    run.payload["layouts"] = {}
    scratch = run.scratch(near=args.data)
    for layout in args.layouts:
        directory = os.path.join(args.data, f"{layout}-{args.size}")
        generate(directory, args.size, layout, args.workers)
        run.payload["layouts"][layout] = layout_runs(directory, args.runs, args.reader_runs,
                                                     scratch)
        run.save()


SCRIPT = Script(__file__, __doc__, options=options, check=check_layouts, measure=measure,
                markdown=markdown, name="mortgage-etl-ceiling")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

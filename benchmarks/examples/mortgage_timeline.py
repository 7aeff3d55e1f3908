"""Where the `etl` command's ETL time goes across its tasks: a timeline of one run.

    python -m benchmarks.examples.mortgage_timeline --data DIR [--data DIR2] [--warm] [--commit C]
        [--out DIR] [-- ETL FLAGS...]

Runs the README's command, ``python -m examples.mortgage etl --data DIR --out OUT`` (with
``--device gpu`` unless the flags after ``--`` say otherwise), in this process, and records
dask's task stream around its ETL: when the first task starts, each task's compute time (the
classic layout's acquisition tasks apart), how busy the worker threads are, the last wave's
idle threads and what follows the last task. A partition's task reads, builds and writes its
table (the command streams it to Parquet). ``--warm`` runs the ETL a second time on the same
cluster, before the feature table is moved into place (its tasks write the same files again),
so that the first run's one-time costs (the first call of each kernel, libraries loading) show
as the difference. This explains the ETL's
figure; the figure that counts is benchmarks.examples.mortgage's. The harness (benchmarks/common.py)
records the machine and the commit and writes ``--out``/mortgage-timeline-MACHINE[-TAG].md (and
.json).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from ..common import Script, header, say


def timeline(records: list[dict], started: float, finished: float) -> dict:
    """What a task stream says about one ETL that ran from ``started`` to ``finished``
    (wall-clock seconds)."""
    tasks = []
    for record in records:
        compute = [s for s in record["startstops"] if s["action"] == "compute"]
        if not compute:
            continue
        name = record["key"][0] if isinstance(record["key"], tuple) else record["key"]
        kind = "acquisitions" if "load_acquisitions" in str(name) else (
            "partition" if "write_part" in str(name) or "process_part" in str(name)
            else "other")
        tasks.append({"kind": kind, "worker": record.get("worker"), "thread": record.get("thread"),
                      "start": compute[0]["start"] - started,
                      "stop": compute[-1]["stop"] - started,
                      "seconds": sum(s["stop"] - s["start"] for s in compute)})
    tasks.sort(key=lambda t: t["start"])
    threads: dict = {}
    for task in tasks:
        threads.setdefault((task["worker"], task["thread"]), []).append(task)
    span = finished - started
    ends = sorted(max(t["stop"] for t in ts) for ts in threads.values())
    parts = [t["seconds"] for t in tasks if t["kind"] == "partition"]
    acquisitions = [t["seconds"] for t in tasks if t["kind"] == "acquisitions"]
    return {
        "etl_seconds": span,
        "tasks": tasks,
        "threads": len(threads),
        "first_start": min((t["start"] for t in tasks if t["kind"] != "other"), default=None),
        "after_last": span - ends[-1] if ends else None,
        "idle_at_end": (ends[-1] - ends[0]) if len(ends) > 1 else 0.0,
        "busy": (sum(t["seconds"] for t in tasks) / (len(threads) * span)) if threads else 0.0,
        "partition_first": parts[0] if parts else None,
        "partition_median": statistics.median(parts) if parts else None,
        "partition_max": max(parts) if parts else None,
        "partition_min": min(parts) if parts else None,
        "partitions": len(parts),
        "acquisitions": acquisitions,
    }


def _cudf_imported() -> bool:
    """Whether this process has finished importing cuDF (a worker starts it in the background)."""
    module = sys.modules.get("cudf")
    return module is not None and not getattr(module.__spec__, "_initializing", False)


def record(command_args: list[str], warm: bool) -> list[dict]:
    """Run the etl command with ``command_args``; each ETL's timeline (two with ``warm``)."""
    from distributed import get_client, get_task_stream

    from examples.mortgage import cli
    from examples.mortgage import etl as etl_module

    original, runs = etl_module._compute, []

    def recorded(reports, parts, progress):
        for repeat in range(2 if warm else 1):
            imported = all(get_client().run(_cudf_imported).values())
            with get_task_stream() as stream:
                started = time.time()
                result = original(reports, parts, progress)
                finished = time.time()
            runs.append(timeline(stream.data, started, finished)
                        | {"repeat": repeat, "cudf_imported": imported})
        return result

    etl_module._compute = recorded
    try:
        cli.mortgage.main(["etl", *command_args], standalone_mode=False)
    finally:
        etl_module._compute = original
    return runs


def _s(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(payload: dict) -> str:
    lines = [*header("Where the mortgage `etl` command's ETL time goes (task timeline)",
                     payload["command"], payload["machine"], payload["commit"], payload["date"],
                     versions=False), "",
             "Seconds from the start of the ETL (its line's figure). busy: the worker threads' "
             "task time over threads x ETL time. idle at end: from the first thread's last "
             "task end to the last's.", "",
             "| data | run | cuDF imported at start | ETL | first task starts | partitions (first / median / min-max) | "
             "acquisition tasks | threads | busy | idle at end | after last task |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for data, runs in payload["runs"].items():
        for run in runs:
            acq = ", ".join(f"{a:.3f}" for a in run["acquisitions"]) or "-"
            lines.append(
                f"| {os.path.basename(data)} | {'warm' if run['repeat'] else 'first'} | "
                f"{'yes' if run['cudf_imported'] else 'no'} | {run['etl_seconds']:.3f} | {_s(run['first_start'])} | {run['partitions']}: "
                f"{_s(run['partition_first'])} / {_s(run['partition_median'])} / "
                f"{_s(run['partition_min'])}-{_s(run['partition_max'])} | {acq} | "
                f"{run['threads']} | {run['busy']:.0%} | {_s(run['idle_at_end'])} | "
                f"{_s(run['after_last'])} |")
    lines += ["", "Tasks of each run (a: acquisitions, p: partition; start-stop in seconds from "
              "the ETL's start):", ""]
    for data, runs in payload["runs"].items():
        for run in runs:
            spans = " ".join(f"{t['kind'][0]}{t['start']:.2f}-{t['stop']:.2f}"
                             for t in run["tasks"] if t["kind"] != "other")
            lines.append(f"- {os.path.basename(data)}, "
                         f"{'warm' if run['repeat'] else 'first'}: {spans}")
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--data", action="append", required=True,
                        help="A dataset (either layout); may be given more than once.")
    parser.add_argument("--warm", action="store_true",
                        help="Also time a second ETL on the same cluster.")
    parser.add_argument("--tag", default="", help="Added to the results file's name.")


def check_arguments(parser, args) -> None:
    """The etl command's flags (those after ``--``) in ``flags``, on the GPU unless they say
    otherwise."""
    args.flags = args.rest if "--device" in args.rest else ["--device", "gpu", *args.rest]


def measure(args, run) -> None:
    run.payload["runs"] = {}
    scratch = run.scratch()
    for data in args.data:
        out = os.path.join(scratch, "features.parquet")
        run.payload["runs"][data] = record(
            ["--data", data, "--out", out, "--overwrite", *args.flags], args.warm)
        for one in run.payload["runs"][data]:
            say(f"{os.path.basename(data)}: ETL {one['etl_seconds']:.2f} s, first task at "
                f"{_s(one['first_start'])}, busy {one['busy']:.0%}, idle at end "
                f"{_s(one['idle_at_end'])}")


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="mortgage-timeline", gpus=lambda args: None, rest=True)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

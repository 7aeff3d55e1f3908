"""Where the example's ETL spends its time on a cluster: the ETL run several times on one
cluster, as the README's command starts it, with the task stream and the workers' sampled
profile of each run.

    python -m benchmarks.examples.mortgage_first_run --data DIR [--device gpu] [--runs 3]
        [--threads-per-worker 2] [--memory async] [--out DIR]

The README's ``etl`` command starts a new cluster and runs the ETL once; this harness keeps
the cluster and runs it again, so the difference between the first run and the later ones is
what a fresh cluster pays once (imports and first calls on the workers). Per run: the ETL's
seconds, when the first task started computing, the seconds the workers spent computing by
task prefix (count, sum, median), the seconds no task was computing, and the functions the
workers' sampling profiler saw most. This explains the ETL's time; the figure that counts is
benchmarks.examples.mortgage's. With ``--out``, the harness (benchmarks/common.py) writes
``--out``/mortgage-first-run-DEVICE-tTHREADS-MEMORY-MACHINE.md (and .json) with the machine and
the commit.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

from ..common import Script, header, median_range


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``intervals`` (their union)."""
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def stream_summary(records: list[dict], started: float, stopped: float | None = None) -> dict:
    """From a task stream: first compute start after ``started``; per task prefix the count,
    sum and median of compute seconds; seconds per action (compute, deserialize, transfer);
    and, with ``stopped``, the seconds between ``started`` and ``stopped`` that no task was
    computing."""
    from dask.utils import key_split

    first = None
    seconds: dict = defaultdict(float)
    computes: dict = defaultdict(list)
    intervals = []
    for record in records:
        prefix = key_split(record["key"])
        for part in record.get("startstops", ()):
            took = part["stop"] - part["start"]
            seconds[f"{part['action']}:{prefix}"] += took
            if part["action"] == "compute":
                computes[prefix].append(took)
                intervals.append((part["start"], part["stop"]))
                first = part["start"] if first is None else min(first, part["start"])
    out = {
        "first_compute_after_s": None if first is None else first - started,
        "seconds": dict(sorted(seconds.items(), key=lambda item: -item[1])),
        "tasks": {prefix: {"count": len(t), "sum_s": sum(t), "median_s": statistics.median(t),
                           "max_s": max(t)}
                  for prefix, t in sorted(computes.items(), key=lambda item: -sum(item[1]))},
    }
    if stopped is not None:
        out["idle_s"] = (stopped - started) - busy_seconds(intervals)
    return out


def hot_functions(profile: dict, top: int = 25) -> list[dict]:
    """The functions a sampling profile (``Client.profile``'s tree) saw most: for each, the
    samples where it was running itself and those where it was on the stack."""
    own: dict = defaultdict(int)
    total: dict = defaultdict(int)

    def walk(node, stack):
        identifier = node.get("identifier", "root")
        description = node.get("description", {})
        name = (f"{description.get('name', '?')} ({os.path.basename(description.get('filename', '?'))}"
                f":{description.get('line_number', '?')})") if description else identifier
        children = node.get("children", {})
        if name not in stack:  # count a recursive function once per sample
            total[name] += node.get("count", 0)
        own[name] += node.get("count", 0) - sum(c.get("count", 0) for c in children.values())
        for child in children.values():
            walk(child, stack | {name})

    for child in profile.get("children", {}).values():
        walk(child, frozenset())
    names = sorted(total, key=lambda n: -total[n])
    return [{"function": n, "on_stack": total[n], "own": own[n]} for n in names[:top]]


def markdown(payload: dict) -> str:
    """The runs' table: the first run against the later ones, with the spread of those."""
    lines = [*header("The ETL run several times on one cluster (what a fresh cluster pays once)",
                     payload["command"], payload["machine"], payload["commit"], payload["date"],
                     versions=False),
             f"- {payload['partitions']} partitions, {payload['bytes'] / 2**30:.2f} GiB of text; "
             f"cluster ready in {payload['cluster_ready_s']:.2f} s", "",
             "| run | ETL | GB/s | first task computing after | no task computing | "
             "tasks by compute time (count, sum) |", "| --- | --- | --- | --- | --- | --- |"]
    for row in payload["runs"]:
        tasks = "; ".join(f"{prefix} {t['count']}, {t['sum_s']:.2f} s"
                          for prefix, t in list(row["tasks"].items())[:3])
        lines.append(f"| {row['run']} | {row['etl_s']:.2f} s | {row['gb_per_s']:.2f} | "
                     f"{row['first_compute_after_s'] or 0:.2f} s | {row['idle_s']:.2f} s | "
                     f"{tasks} |")
    later = [row["etl_s"] for row in payload["runs"][1:]]
    if later:
        lines += ["", f"Later runs' ETL: {median_range(later)} s, median (min-max)."]
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--data", required=True)
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads-per-worker", type=int, default=None)
    parser.add_argument("--memory", choices=("pool", "async"), default="pool",
                        help="GPU memory: the plugin's RMM pool (the etl command's default) or "
                             "CUDA's async pool (the whole job's).")
    parser.add_argument("--partition-size", default=None)


def measure(args, run) -> None:
    from distributed import get_task_stream

    from dask_gpu_interop import cluster_client
    from examples.mortgage import etl, files

    size = files.partition_size_for(args.device, args.partition_size)
    plan = files.plan(args.data, partition_size=size)
    memory = {"async_alloc": True} if args.memory == "async" else None
    started = time.perf_counter()
    results = []
    with cluster_client(device=args.device, threads_per_worker=args.threads_per_worker,
                        memory=memory) as (client, device):
        ready = time.perf_counter() - started
        print(f"cluster ready in {ready:.2f} s ({device}); {len(plan.parts)} partitions, "
              f"threads per worker {args.threads_per_worker or 'default'}", flush=True)
        for number in range(args.runs):
            with get_task_stream(client) as stream:
                wall = time.time()
                result = etl.run(plan, device=device)
                stopped = time.time()
            summary = stream_summary(stream.data, wall, stopped)
            summary["hot"] = hot_functions(client.profile(start=wall, stop=stopped))
            row = {"run": number + 1, "etl_s": stopped - wall, "gb_per_s":
                   plan.input_bytes / (stopped - wall) / 1e9, **summary}
            del result
            results.append(row)
            print(f"run {number + 1}: ETL {row['etl_s']:.2f} s ({row['gb_per_s']:.2f} GB/s), "
                  f"first compute after {summary['first_compute_after_s'] or 0:.2f} s, "
                  f"no task computing {summary['idle_s']:.2f} s", flush=True)
            for prefix, t in summary["tasks"].items():
                print(f"  {prefix}: {t['count']} tasks, {t['sum_s']:.2f} s, median "
                      f"{t['median_s'] * 1e3:.0f} ms, max {t['max_s'] * 1e3:.0f} ms", flush=True)
            for hot in summary["hot"][:15]:
                print(f"    {hot['on_stack']:5d} {hot['own']:5d}  {hot['function']}", flush=True)
    run.payload.update(cluster_ready_s=ready, runs=results, partitions=len(plan.parts),
                       bytes=plan.input_bytes)


def name(args, payload) -> str:
    return (f"mortgage-first-run-{args.device}-t{args.threads_per_worker or 0}-"
            f"{args.memory}-{payload['machine_name']}")


SCRIPT = Script(__file__, __doc__, options=options, measure=measure, markdown=markdown,
                name=name, gpus=lambda args: None, out=None)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

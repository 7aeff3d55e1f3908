"""Where a fresh cluster's first ETL loses its time: the example's ETL run three times on one
cluster, as the README's command starts it, with the task stream of each run.

    python benchmarks/mortgage_first_run.py --data DIR [--device gpu] [--runs 3] [--out DIR]

The README's ``etl`` command starts a new cluster and runs the ETL once; this harness keeps
the cluster and runs it again, so the difference between the first run and the later ones is
what a fresh cluster pays once (imports and first calls on the workers). Per run: the ETL's
seconds, when the first task started computing, and the time the workers spent computing and
deserializing, by task prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stream_summary(records: list[dict], started: float) -> dict:
    """From a task stream: first compute start after ``started``, and seconds per prefix and
    action (compute, deserialize, transfer)."""
    from dask.utils import key_split

    first = None
    seconds: dict = defaultdict(float)
    for record in records:
        prefix = key_split(record["key"])
        for part in record.get("startstops", ()):
            seconds[f"{part['action']}:{prefix}"] += part["stop"] - part["start"]
            if part["action"] == "compute":
                first = part["start"] if first is None else min(first, part["start"])
    return {
        "first_compute_after_s": None if first is None else first - started,
        "seconds": dict(sorted(seconds.items(), key=lambda item: -item[1])),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None, help="Write the figures as JSON here.")
    args = parser.parse_args(argv)

    from distributed import get_task_stream

    from dask_gpu_interop import cluster_client
    from examples.mortgage import etl, files

    plan = files.plan(args.data, partition_size=files.partition_size_for(args.device, None))
    started = time.perf_counter()
    results = []
    with cluster_client(device=args.device) as (client, device):
        ready = time.perf_counter() - started
        print(f"cluster ready in {ready:.2f} s ({device})", flush=True)
        for run in range(args.runs):
            with get_task_stream(client) as stream:
                wall = time.time()
                result = etl.run(plan, device=device)
            summary = stream_summary(stream.data, wall)
            del result
            row = {"run": run + 1, "etl_s": None, **summary}
            row["etl_s"] = time.time() - wall
            results.append(row)
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(summary["seconds"].items())[:6])
            print(f"run {run + 1}: ETL {row['etl_s']:.2f} s, first compute after "
                  f"{summary['first_compute_after_s'] or 0:.2f} s; {top}", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"mortgage-first-run-{args.device}.json"), "w") as f:
            json.dump({"cluster_ready_s": ready, "runs": results, "argv": argv or sys.argv[1:]},
                      f, indent=1)


if __name__ == "__main__":
    main()

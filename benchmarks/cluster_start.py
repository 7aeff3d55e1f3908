"""Where a GPU cluster's start goes: the whole job's "cluster start" stage, taken apart.

    python benchmarks/cluster_start.py [--rounds 2] [--out DIR]

Each variant runs in a fresh Python process (imports included, as a user's command pays them)
and times from the process's first line to a client with its worker ready, then the close.
Variants, rounds interleaved:

- ``import dask_cuda``: the client's import of dask-cuda alone;
- ``LocalCUDACluster``: dask-cuda's cluster, one worker, no plugin;
- ``cluster_client``: the library's local GPU cluster (the plugin's preload, RMM pool);
- ``cluster_client async``: the same with ``async_alloc=True`` (the mortgage job's default);
- ``cuDF imported during the start``: the async cluster with the mortgage command's background
  imports of cuDF (the client's while the cluster starts, then the workers');
- ``cuDF imported after the start``: both imports started once the cluster is up.
The last two also time when cuDF is imported on the client and the worker ("cuDF ready"): the
ETL's first task can start no earlier.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import command_line, machine, machine_name, say, write_results  # noqa: E402

PRELUDE = "import importlib, time; t0 = time.perf_counter(); cudf_ready = None\n"
VARIANTS = {
    "import dask_cuda": "import dask_cuda\nready = time.perf_counter()\nclosed = ready\n",
    "LocalCUDACluster": """
        from dask_cuda import LocalCUDACluster
        from distributed import Client
        cluster = LocalCUDACluster(n_workers=1, dashboard_address=None)
        client = Client(cluster); client.wait_for_workers(1)
        ready = time.perf_counter()
        client.close(); cluster.close()
        closed = time.perf_counter()
    """,
    "cluster_client": """
        from dask_gpu_interop import cluster_client
        with cluster_client(device="gpu") as (client, device):
            ready = time.perf_counter()
        closed = time.perf_counter()
    """,
    "cluster_client async": """
        from dask_gpu_interop import cluster_client
        with cluster_client(device="gpu", memory={"async_alloc": True}) as (client, device):
            ready = time.perf_counter()
        closed = time.perf_counter()
    """,
    "cuDF imported during the start": """
        from dask_gpu_interop import cluster_client
        from examples.mortgage import warm
        warm.import_in_background("cudf")
        with cluster_client(device="gpu", memory={"async_alloc": True}) as (client, device):
            warm.workers(client)
            ready = time.perf_counter()
            client.run(importlib.import_module, "cudf"); import cudf
            cudf_ready = time.perf_counter()
        closed = time.perf_counter()
    """,
    "cuDF imported after the start": """
        from dask_gpu_interop import cluster_client
        from examples.mortgage import warm
        with cluster_client(device="gpu", memory={"async_alloc": True}) as (client, device):
            warm.workers(client)
            warm.import_in_background("cudf")
            ready = time.perf_counter()
            client.run(importlib.import_module, "cudf"); import cudf
            cudf_ready = time.perf_counter()
        closed = time.perf_counter()
    """,
}
EPILOGUE = ('print("RESULT", json.dumps({"start": ready - t0, "stop": closed - ready, '
            '"cudf": cudf_ready and cudf_ready - t0}))\n')


def one(name: str) -> dict:
    code = "import json\n" + PRELUDE + textwrap.dedent(VARIANTS[name]) + EPILOGUE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{name}: no result\n{(out.stdout + out.stderr)[-2000:]}")


def markdown(runs: dict, argv, info: dict) -> str:
    lines = ["# A GPU cluster's start, taken apart (one worker, fresh processes)", "",
             f"Machine: {', '.join(info['gpus'])}; {info['cpu']}.",
             f"Command: `{command_line(__file__, argv)}`; median (min-max) of the rounds.", "",
             "| variant | start | cuDF ready | stop |", "| --- | --- | --- | --- |"]
    for name, values in runs.items():
        cells = []
        for key in ("start", "cudf", "stop"):
            series = [v[key] for v in values if v.get(key) is not None]
            cells.append(f"{statistics.median(series):.2f} ({min(series):.2f}-{max(series):.2f}) s"
                         if series else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    runs = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            result = one(name)
            runs[name].append(result)
            say(f"{name}: {result}")
    info = machine()
    text = markdown(runs, argv if argv is not None else sys.argv[1:], info)
    print(text)
    write_results(os.path.join(args.out, f"cluster-start-{machine_name(info)}"), text,
                  {"runs": runs, "machine": info})


if __name__ == "__main__":
    main()

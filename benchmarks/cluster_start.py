"""Where a GPU cluster's start goes: the whole job's "cluster start" stage, taken apart.

    python -m benchmarks.cluster_start [--rounds 2] [--out DIR]

Each variant runs in a fresh Python process (imports included, as a user's command pays them)
and times from the process's first line to a client with its worker ready, then the close.
Variants, rounds interleaved:

- ``import dask_cuda``: the client's import of dask-cuda alone;
- ``LocalCUDACluster``: dask-cuda's cluster, one worker, no plugin;
- ``cluster_client``: the library's local GPU cluster (the plugin's preload, RMM pool): one
  GPU's worker runs in the client's process;
- ``cluster_client, worker process``: the same with ``processes=True``, a dask-cuda worker
  process as ``LocalCUDACluster`` starts;
- ``cluster_client async``: the in-process cluster with ``async_alloc=True`` (the mortgage
  job's default);
- ``cuDF imported during the start``: the async cluster with the mortgage command's background
  imports of cuDF (the client's while the cluster starts, then the workers');
- ``cuDF imported after the start``: both imports started once the cluster is up.
The last two also time when cuDF is imported on the client and the worker ("cuDF ready"): the
ETL's first task can start no earlier. The harness (benchmarks/common.py) rotates the variants'
order round by round, records the machine and the commit and writes
``--out``/cluster-start-MACHINE.md (and .json).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from .common import ROOT, Script, alternate, header, median_range, say

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
    "cluster_client, worker process": """
        from dask_gpu_interop import cluster_client
        with cluster_client(device="gpu", processes=True) as (client, device):
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
        from dask_gpu_interop import import_in_background
        import_in_background("cudf")
        with cluster_client(device="gpu", memory={"async_alloc": True}) as (client, device):
            import_in_background("cudf", client=client)
            ready = time.perf_counter()
            client.run(importlib.import_module, "cudf"); import cudf
            cudf_ready = time.perf_counter()
        closed = time.perf_counter()
    """,
    "cuDF imported after the start": """
        from dask_gpu_interop import cluster_client, import_in_background
        with cluster_client(device="gpu", memory={"async_alloc": True}) as (client, device):
            import_in_background("cudf", client=client)
            import_in_background("cudf")
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
                         timeout=300, cwd=ROOT)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{name}: no result\n{(out.stdout + out.stderr)[-2000:]}")


def markdown(payload: dict) -> str:
    lines = [*header("A GPU cluster's start, taken apart (one worker, fresh processes)",
                     payload["command"], payload["machine"], payload["commit"],
                     payload["date"], used=1, versions=False),
             "", "Median (min-max) of the rounds.", "",
             "| variant | start | cuDF ready | stop |", "| --- | --- | --- | --- |"]
    for name, values in payload["runs"].items():
        cells = []
        for key in ("start", "cudf", "stop"):
            series = [v[key] for v in values if v.get(key) is not None]
            cells.append(f"{median_range(series)} s" if series else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--rounds", type=int, default=2)


def measure(args, run) -> None:
    runs = run.payload["runs"] = {name: [] for name in VARIANTS}
    for _, name in alternate(VARIANTS, args.rounds, rotate=True):
        result = one(name)
        runs[name].append(result)
        say(f"{name}: {result}")


SCRIPT = Script(__file__, __doc__, options=options, measure=measure, markdown=markdown,
                name="cluster-start")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

"""The mortgage ETL + XGBoost benchmark, side by side: 1 and 2 GPUs, with the plugin's pool and
with plain cudaMalloc, and the same machine's CPUs with pandas.

    python benchmarks/mortgage.py --gb 10 --data /scratch/mortgage-10gb
    python benchmarks/mortgage.py --gb 10 --configs gpu1-pool,gpu1-cudamalloc,gpu2-pool,cpu

One dataset (generated once, reused when --data already holds one) is read by every
configuration, each on a fresh local cluster: a warm-up ETL of one chunk per worker
(imports, CUDA contexts), a probe of one chunk's peak device memory, then the timed ETL
(persisted, as training needs it; ``--etl-runs N``: the median of N) and the timed training on
a held-out quarter. The markdown table, with the
command and the machine, goes to benchmarks/results/mortgage-<machine>.md (and .json), rewritten
after every configuration so that a failure later keeps what was measured.

Configurations:
  gpu1-pool, gpu2-pool               LocalCUDACluster with the GPUMemoryPlugin (RMM pool)
  gpu1-async, gpu2-async             the same with the plugin's CUDA async pool (async_alloc)
  gpu1-cudamalloc, gpu2-cudamalloc   LocalCUDACluster without the plugin: RMM's and CuPy's
                                     allocations go straight to cudaMalloc (counted by RMM's
                                     statistics adaptor, which does not pool)
  cpu                                LocalCluster, one single-threaded process per core, pandas
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
import traceback

from dask.utils import format_bytes, parse_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's root: examples/
CONFIGS = ("gpu1-pool", "gpu1-cudamalloc", "gpu1-async", "gpu2-pool", "gpu2-cudamalloc",
           "cpu")  # and gpuN-*
CONFIG = re.compile(r"^(?:gpu(?P<gpus>[1-9][0-9]*)-(?:pool|cudamalloc|async)|cpu)$")
DEFAULT_CONFIGS = "gpu1-pool,gpu1-cudamalloc,gpu2-pool,cpu"


def gpu_count(config: str) -> int:
    """GPUs a configuration uses: N of gpuN-pool / gpuN-cudamalloc, 0 for cpu."""
    return int(CONFIG.match(config).group("gpus") or 0)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def command_line(script: str, argv=None) -> str:
    """How a benchmark was run (``argv``, or this process's own), for its results file."""
    args = sys.argv[1:] if argv is None else argv
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(script), *args])


def choices(parser, flag: str, text: str, allowed) -> list[str]:
    """The comma-separated items of ``flag``'s ``text``; a usage error for one not allowed."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item not in allowed:
            parser.error(f"{flag}: {item!r} is not one of {', '.join(allowed)}")
    return items


def write_results(stem: str, text: str, payload: dict) -> None:
    """``stem``.md (the markdown ``text``) and ``stem``.json (``payload``)."""
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".md", "w") as f:
        f.write(text)
    with open(stem + ".json", "w") as f:
        json.dump(payload, f, indent=1, default=str)


# ---------------------------------------------------------------------------------------------
# The machine


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    import psutil

    cpu = platform.processor()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    gpus = [line.split(", ") for line in _run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
         "--format=csv,noheader"]).splitlines() if line]
    versions = {}
    for name in ("dask", "distributed", "pandas", "pyarrow", "numpy", "xgboost", "cudf",
                 "dask_cudf", "dask_cuda", "rmm", "cupy"):
        with contextlib.suppress(Exception):
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "?")
    return {
        "host": socket.gethostname(),
        "cpu": f"{cpu} ({os.cpu_count()} cores visible)",
        "memory": format_bytes(psutil.virtual_memory().total),
        "gpus": [f"{g[0]} ({g[1]}, driver {g[2]})" if len(g) == 3 else ", ".join(g) for g in gpus],
        "gpu_count": len(gpus),
        "python": platform.python_version(),
        "versions": versions,
    }


def machine_name(info: dict) -> str:
    if info["gpus"]:
        name = info["gpus"][0].split(" (")[0].lower().replace("nvidia", "").strip()
        return "-".join(name.split()) or "gpu"
    return info["host"].split(".")[0]


# ---------------------------------------------------------------------------------------------
# The data


def dataset(directory: str, gb: float, years: str, seed: int, loans_per_part: int,
            workers: int | None):
    """The dataset in ``directory``: reused if there, else generated on a CPU cluster.

    A generated dataset is flushed to disk before the timing starts, so that the first
    configuration does not run while tens of GB of fresh pages are written back (on the 4xH200
    the first configuration after generation ran 16% longer than the same one run last; the
    write-back is the likely cause).
    """
    from dask_gpu_interop import cluster_client
    from examples.mortgage import etl
    from examples.mortgage import generate as gen

    pending = os.path.join(directory, ".generating")
    if os.path.exists(pending):
        raise SystemExit(f"{directory} holds a generated dataset that was never finished (a run "
                         "stopped while writing it): delete the directory, or give another "
                         "--data")
    with contextlib.suppress(FileNotFoundError):
        perf, acq, names = etl.find_dataset(directory)
        size = sum(os.path.getsize(p) for p in perf + acq)
        say(f"reusing the dataset in {directory}: {format_bytes(size)}, {len(perf)} "
            "performance files")
        return {"directory": directory, "bytes": size, "generated": False,
                "files": len(perf)}
    first, last = gen.parse_years(years)
    target = int(gb * 1e9)
    loans = gen.loans_for_size(target, first, last, seed=seed)
    spec = gen.Spec(first, last, loans_per_quarter=loans, seed=seed,
                    loans_per_part=loans_per_part)
    say(f"generating ~{gb} GB in {directory}: {len(spec.quarters)} quarters x {loans:,} loans, "
        f"{spec.parts_per_quarter} part(s) per quarter ...")
    os.makedirs(directory, exist_ok=True)
    open(pending, "w").close()
    # at most 32 processes: a cluster of 64 failed to close in time on a 64-core machine
    with cluster_client(device="cpu", n_workers=workers or min(os.cpu_count() or 1, 32),
                        threads_per_worker=1):
        made = gen.generate(directory, spec, progress=sys.stdout.isatty())
    say(f"generated {format_bytes(made.bytes)} ({made.rows:,} rows) in {made.seconds:.1f} s")
    started = time.perf_counter()
    os.sync()
    os.remove(pending)
    say(f"flushed to disk in {time.perf_counter() - started:.1f} s")
    return {"directory": directory, "bytes": made.bytes, "generated": True,
            "generate_seconds": made.seconds, "rows": made.rows, "loans": made.loans,
            "years": years, "loans_per_quarter": loans, "files": len(made.performance)}


# ---------------------------------------------------------------------------------------------
# Clusters


def _plain_cuda_on_worker() -> str:
    """No pool: RMM's default resource (cudaMalloc) with statistics; CuPy through RMM."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    rmm.statistics.enable_statistics()
    cupy.cuda.set_allocator(rmm_cupy_allocator)
    return type(rmm.mr.get_current_device_resource()).__name__


def _device_peak_on_worker() -> dict:
    """Peak and current bytes through RMM on this worker, with or without the plugin."""
    import rmm

    stats = rmm.statistics.get_statistics()
    if stats is None:
        return {}
    return {"peak_bytes": int(stats.peak_bytes), "current_bytes": int(stats.current_bytes)}


@contextlib.contextmanager
def cluster_for(config: str, args):
    """(client, device) of a fresh local cluster for ``config``."""
    from dask_gpu_interop import cluster_client

    if config == "cpu":
        with cluster_client(device="cpu", n_workers=args.cpu_workers or os.cpu_count(),
                            threads_per_worker=1) as (client, device):
            yield client, device
        return
    gpus = gpu_count(config)
    if config.endswith(("-pool", "-async")):
        memory = {k: v for k, v in (("pool_size", args.pool_size),
                                    ("maximum_pool_size", args.maximum_pool_size)) if v}
        if config.endswith("-async"):
            memory = {"async_alloc": True}
        with cluster_client(device="gpu", n_workers=gpus, protocol=args.protocol,
                            memory=memory, threads_per_worker=args.gpu_threads) as (client,
                                                                                    device):
            yield client, device
        return
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    with LocalCUDACluster(n_workers=gpus, threads_per_worker=args.gpu_threads,
                          protocol=args.protocol,
                          dashboard_address=None) as cluster, Client(cluster) as client:
        resources = client.run(_plain_cuda_on_worker)
        say(f"  no plugin: {sorted(set(resources.values()))} on every worker, CuPy through RMM")
        yield client, "gpu"


# ---------------------------------------------------------------------------------------------
# One configuration

# XGBoost's device memory for training, per byte of the feature table (float32 features): its
# quantile matrix (about 9 bits per feature and row at 256 bins), gradients and predictions.
# An estimate, checked against the device's free memory before training starts.
TRAINING_NEED = 0.45


def _device_free_on_worker() -> int:
    from dask_gpu_interop.device import memory_info

    return memory_info()[0]


def training_room(client, frame) -> dict:
    """Whether XGBoost is likely to fit next to the persisted feature table on every GPU.

    In pool mode the pool keeps what the ETL needed at its peak, and XGBoost (no RMM in the
    PyPI wheels) allocates beside it: the device's free memory is what it has.
    """
    free = client.run(_device_free_on_worker)
    table = int(frame.memory_usage(index=True).sum().compute())
    need = int(table / max(len(free), 1) * TRAINING_NEED)
    least = min(free.values())
    short = need > least
    why = (f"XGBoost needs about {format_bytes(need)} per GPU ({TRAINING_NEED} x the "
           f"{format_bytes(table // max(len(free), 1))} feature table each GPU holds); the "
           f"fullest GPU has {format_bytes(least)} free (more GPUs, or --no-train-guard to try)")
    return {"table_bytes": table, "need_per_gpu": need, "least_free": least, "short": short,
            "why": why}


def _chunk_peak(chunk, acquisitions, device, names) -> dict:
    """Peak device bytes of the whole ETL of one chunk, on a worker (RMM statistics)."""
    import rmm

    from examples.mortgage import etl

    if rmm.statistics.push_statistics() is None:
        return {}
    try:
        etl.process_chunk(chunk, acquisitions, device, "error", names)
    finally:
        stats = rmm.statistics.pop_statistics()
    return {"peak_bytes": int(stats.peak_bytes)}


def probe(client, device: str, the_plan) -> dict:
    """One chunk's ETL alone on a worker: its peak device bytes against its size."""
    import dask

    from examples.mortgage import etl

    chunk = max(the_plan.chunks, key=lambda c: c.end - c.start)
    size = chunk.end - chunk.start
    try:
        acq = dask.delayed(etl.load_acquisitions, pure=False)(
            the_plan.acquisitions[the_plan.key(chunk)], device, "error", the_plan.names)
        peak = client.compute(dask.delayed(_chunk_peak, pure=False)(
            chunk, acq, device, the_plan.names)).result().get("peak_bytes")
    except Exception as exc:  # a probe that fails must not cost the configuration
        say(f"  one-chunk memory probe failed: {exc!r}")
        return {"chunk_bytes": size}
    ratio = peak / size if peak else None
    say(f"  one chunk ({format_bytes(size)}): peak {format_bytes(peak or 0)} on the device"
        + (f" ({ratio:.2f}x)" if ratio else " (no RMM statistics)"))
    return {"chunk_bytes": size, "chunk_peak_bytes": peak, "chunk_peak_ratio": ratio}


def _params_text(args) -> str:
    params = getattr(args, "params", None)
    return f" with {', '.join(f'{k}={v}' for k, v in params.items())}" if params else ""


def _tree_order(names) -> list[str]:
    """Stage names (``a``, ``a/b``) in the order first seen, each under its parent: a stage
    first entered late still shows inside the stage that holds it."""
    ordered: list[str] = []
    for name in names:
        parent = name.rsplit("/", 1)[0] if "/" in name else None
        if parent not in ordered:
            ordered.append(name)
            continue
        at = ordered.index(parent) + 1
        while at < len(ordered) and ordered[at].startswith(parent + "/"):
            at += 1
        ordered.insert(at, name)
    return ordered


def _partition_sizes(args, results) -> str:
    """The chunk size of the configurations measured (each device's own by default)."""
    from examples.mortgage import etl

    devices = sorted({"cpu" if r["config"] == "cpu" else "gpu" for r in results})
    return ", ".join(f"{etl.partition_size_for(d, args.partition_size)} on {d.upper()}s"
                     for d in devices)


def warm_up_chunks(the_plan, workers: int) -> list:
    """The first chunk of each of the first ``workers`` quarters: one per worker, and each
    also loads its quarter's acquisitions. Two chunks of one quarter share one load, which
    left one worker's first load of acquisitions, with its one-time costs, in the timed ETL
    (on 2xH200 acquisitions then took 0.21-0.30 s per worker against 0.18-0.24 s for all of
    them on one GPU, mortgage-2xH200-dense-stages-lock-*.md; with this warm-up 0.12 s,
    mortgage-2xH200-dense-stages.md)."""
    picked: dict = {}
    for chunk in the_plan.chunks:
        picked.setdefault(the_plan.key(chunk), chunk)
        if len(picked) == workers:
            break
    return list(picked.values())


def chunks_per_worker(tasks: list[dict]) -> list[int]:
    """How many chunk tasks each worker ran, most first (from a task stream's records)."""
    from collections import Counter

    counts = Counter(t["worker"] for t in tasks if "process_chunk" in str(t["key"]))
    return sorted(counts.values(), reverse=True)


def timed_etl(client, the_plan, device: str, args) -> tuple:
    """(the last run's result, every run as {"seconds", "chunks_per_worker"}): ``--etl-runs``
    runs on the same cluster."""
    from distributed import get_task_stream

    from examples.mortgage import etl

    runs, result = [], None
    for _ in range(args.etl_runs):
        result = None  # the previous run's frame is freed before the next
        with get_task_stream(client) as stream:
            result = etl.run_plan(the_plan, device=device, bad_rows=args.bad_rows,
                                  progress=sys.stdout.isatty())
        runs.append({"seconds": result.seconds,
                     "chunks_per_worker": chunks_per_worker(stream.data)})
        say(f"  ETL: {result.summary()}")
    return result, runs


def run_config(config: str, args, the_plan) -> dict:
    from dask_gpu_interop import memory_report
    from examples.mortgage import etl, job, stages, train

    out = {"config": config, "chunks": len(the_plan.chunks)}
    started = time.perf_counter()
    with cluster_for(config, args) as (client, device):
        workers = len(client.scheduler_info()["workers"])
        out.update(device=device, workers=workers, cluster_seconds=time.perf_counter() - started)
        say(f"{config}: {workers} worker(s) up in {out['cluster_seconds']:.1f} s; warm-up ...")
        etl.run_plan(the_plan.subset(warm_up_chunks(the_plan, workers)), device=device)

        if device == "gpu":
            out.update(probe(client, device, the_plan))
        say(f"  ETL of {format_bytes(the_plan.input_bytes)} ...")
        if args.stages:
            client.run(stages.start_process_profile, device)
        result, runs = timed_etl(client, the_plan, device, args)
        if args.stages:
            out["stages"] = client.run(stages.stop_process_profile)
        out.update(etl_seconds=statistics.median(r["seconds"] for r in runs), etl_runs=runs,
                   rows=result.rows, input_bytes=result.input_bytes,
                   partitions=result.partitions, bad_rows=result.bad_count)
        if device == "gpu":
            report = memory_report(client)
            peaks = {a: s.get("peak_bytes") for a, s in report.items()}
            if not any(peaks.values()):
                peaks = {a: s.get("peak_bytes") for a, s in
                         client.run(_device_peak_on_worker).items()}
            out["device_peak_bytes"] = peaks
        room = (training_room(client, result.frame)
                if args.rounds and device == "gpu" and args.train_guard else None)
        if room and room["short"]:
            out["train_skipped"] = room["why"]
            say(f"  training skipped: {room['why']}")
        elif args.rounds:
            say(f"  training ({args.rounds} rounds) ...")
            try:
                trained = train.train(client, result.frame, result.quarters, device,
                                      rounds=args.rounds, params=args.params)
            except Exception as exc:  # the ETL's figures are still worth having
                out["train_error"] = "".join(
                    traceback.format_exception_only(type(exc), exc)).strip()
                say(f"  training failed: {out['train_error']}")
            else:
                out.update(dmatrix_seconds=trained.dmatrix_seconds,
                           train_seconds=trained.train_seconds, auc=trained.auc,
                           holdout=trained.holdout, train_rows=trained.train_rows)
                say(f"  training: {trained.seconds:.1f} s, test AUC {trained.auc:.4f}")
        out["host_peak_bytes"] = {a: m["peak_rss"] for a, m in job.host_memory(client).items()}
        del result
    return out


# ---------------------------------------------------------------------------------------------
# The report


def _gbs(r: dict) -> float | None:
    if not r.get("etl_seconds"):
        return None
    return r["input_bytes"] / r["etl_seconds"] / 1e9


def _max(values: dict | None) -> int | None:
    values = [v for v in (values or {}).values() if v]
    return max(values) if values else None


def median_runs(results: list[dict]) -> dict[str, dict]:
    """Each configuration's run with the median ETL time (of an even number, the faster of the
    two middle ones): what the goals and the scaling compare when configurations repeat, as
    they do when runs alternate (``--configs gpu1-pool,gpu2-pool,gpu1-pool,gpu2-pool``)."""
    runs: dict[str, list[dict]] = {}
    for r in results:
        if "error" not in r:
            runs.setdefault(r["config"], []).append(r)
    return {config: sorted(group, key=lambda r: r["etl_seconds"])[(len(group) - 1) // 2]
            for config, group in runs.items()}


def markdown(info: dict, data: dict, results: list[dict], command: str, args) -> str:
    by = median_runs(results)
    cpu = by.get("cpu")
    lines = [
        f"# Mortgage ETL + XGBoost on {machine_name(info)}",
        "",
        f"Measured {datetime.datetime.now().isoformat(timespec='minutes')} with:",
        "",
        "```",
        command,
        "```",
        "",
        f"- machine: {info['host']}, {info['cpu']}, {info['memory']} RAM",
        f"- GPUs: {'; '.join(info['gpus']) or 'none'}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}",
        f"- data: {format_bytes(data['bytes'])} of pipe-delimited text in {data['directory']} "
        f"({data['files']} performance files"
        + (f", years {data['years']}, {data['loans_per_quarter']:,} loans per quarter, "
           f"generated in {data['generate_seconds']:.0f} s" if data.get("generated") else "")
        + f"); chunks of at most {_partition_sizes(args, results)}; {args.rounds} boosting "
        f"rounds{_params_text(args)}; protocol {args.protocol}; {args.gpu_threads} thread(s) "
        "per GPU worker",
        "- each configuration on a fresh local cluster, after a warm-up ETL of one chunk per "
        "worker; "
        "ETL = read + features + label + join + last mile, persisted in worker memory"
        + (f"; {args.etl_runs} timed ETL runs per cluster (see below)" if args.etl_runs > 1
           else ""),
        "",
        "| configuration | workers | ETL s | CSV GB/s | GB/s per GPU | rows/s | ETL vs CPU | "
        "train s | test AUC | peak device / worker | one chunk's device peak | "
        "peak host / worker |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['config']} | failed: {r['error'].splitlines()[-1][:120]} |"
                         + " |" * 10)
            continue
        gbs = _gbs(r)
        gpus = r["workers"] if r["device"] == "gpu" else None
        speed = cpu["etl_seconds"] / r["etl_seconds"] if cpu and r is not cpu else None
        chunk = (f"{format_bytes(r['chunk_peak_bytes'])} ({r['chunk_peak_ratio']:.1f}x "
                 f"{format_bytes(r['chunk_bytes'])})" if r.get("chunk_peak_bytes") else "-")
        device_peak = _max(r.get("device_peak_bytes"))
        lines.append(
            f"| {r['config']} | {r['workers']} | {r['etl_seconds']:.2f} | {gbs:.3f} | "
            f"{f'{gbs / gpus:.3f}' if gpus else '-'} | {r['rows'] / r['etl_seconds']:,.0f} | "
            f"{f'{speed:.1f}x' if speed else '-'} | "
            + (f"{r['dmatrix_seconds'] + r['train_seconds']:.1f} | {r['auc']:.4f} | "
               if "auc" in r else "skipped | - | " if "train_skipped" in r
               else "failed | - | " if "train_error" in r else "- | - | ")
            + f"{format_bytes(device_peak) if device_peak else '-'} | {chunk} | "
            f"{format_bytes(_max(r.get('host_peak_bytes')) or 0)} |"
        )
    notes = []
    for r in results:
        if "train_skipped" in r:
            notes.append(f"- {r['config']}: training skipped: {r['train_skipped']}")
        elif "train_error" in r:
            notes.append(f"- {r['config']}: training failed: "
                         f"{r['train_error'].splitlines()[-1][:300]}")
    if notes:
        lines += [""] + notes
    lines += scaling_lines(results)
    lines += run_lines(results)
    lines += stage_lines(results)
    lines += ["", "## Goals (issue 4)", ""]
    repeated = sorted({r["config"] for r in results if "error" not in r
                       and sum(q.get("config") == r["config"] for q in results) > 1})
    if repeated:
        lines.append(f"- {', '.join(repeated)} ran more than once: each counts by its median "
                     "run")

    def goal(text, value, target, fmt="{:.2f}"):
        if value is None:
            return f"- {text}: not measured"
        mark = "met" if value >= target else "NOT met"
        return f"- {text}: {fmt.format(value)} (goal {fmt.format(target)}: {mark})"

    one = by.get("gpu1-pool")
    two = by.get("gpu2-pool")
    plain = by.get("gpu1-cudamalloc")
    lines.append(goal("ETL, 1 GPU (pool) vs the CPUs", cpu["etl_seconds"] / one["etl_seconds"]
                      if cpu and one else None, 30, "{:.1f}x"))
    lines.append(goal("CSV through the whole ETL per GPU, GB/s", _gbs(one) if one else None, 1.0))
    lines.append(goal("2 GPUs vs 1 GPU (ETL)", one["etl_seconds"] / two["etl_seconds"]
                      if one and two else None, 1.8, "{:.2f}x"))
    if one and plain:
        lines.append(f"- the pool's effect on the ETL (1 GPU): {plain['etl_seconds']:.2f} s with "
                     f"cudaMalloc vs {one['etl_seconds']:.2f} s with the pool "
                     f"({plain['etl_seconds'] / one['etl_seconds']:.2f}x)"
                     + (f"; training {plain['dmatrix_seconds'] + plain['train_seconds']:.1f} s "
                        f"vs {one['dmatrix_seconds'] + one['train_seconds']:.1f} s"
                        if "auc" in one and "auc" in plain else ""))
    ratios = [r["chunk_peak_ratio"] for r in results
              if "error" not in r and r.get("chunk_peak_ratio")]  # every run's
    if ratios:
        lines.append(f"- device memory of one chunk's ETL: at most {max(ratios):.1f}x the chunk "
                     f"(goal about 3x: {'met' if max(ratios) <= 3.5 else 'NOT met'})")
    lines += ["", "Peaks: device from RMM's statistics (the plugin's report, or RMM's adaptor "
              "without the plugin; XGBoost's own allocations are not in them unless it shares "
              "the pool); host is each worker process's peak resident memory.", ""]
    return "\n".join(lines)


# Issue 7: 8 GPUs at least 6.5x one GPU for the ETL (strong scaling efficiency 0.81).
SCALING_GOAL = 6.5 / 8


def scaling(results: list[dict]) -> list[dict]:
    """Strong scaling of the gpuN-pool configurations against the fewest GPUs measured (one,
    when gpu1-pool ran): ETL and training speed-up, and efficiency = speed-up / GPU ratio; a
    repeated configuration by its median run (``median_runs``)."""
    runs = sorted(((gpu_count(config), r) for config, r in median_runs(results).items()
                   if re.match(r"^gpu\d+-pool$", config)), key=lambda run: run[0])
    if len(runs) < 2:
        return []
    base_gpus, base = runs[0]
    trained = [(n, r) for n, r in runs if "auc" in r]
    rows = []
    for n, r in runs:
        row = {"gpus": n, "etl_seconds": r["etl_seconds"],
               "etl_speedup": base["etl_seconds"] / r["etl_seconds"]}
        row["etl_efficiency"] = row["etl_speedup"] / (n / base_gpus)
        if "auc" in r and trained:
            first_n, first = trained[0]
            seconds = r["dmatrix_seconds"] + r["train_seconds"]
            row.update(train_seconds=seconds, train_base_gpus=first_n,
                       train_speedup=(first["dmatrix_seconds"] + first["train_seconds"]) / seconds)
        rows.append(row)
    return rows


def scaling_lines(results: list[dict]) -> list[str]:
    rows = scaling(results)
    if not rows:
        return []
    base = rows[0]["gpus"]
    lines = ["", f"## Strong scaling (issue 7): the same data on more GPUs, against {base} GPU(s)",
             "", "| GPUs | ETL s | ETL speed-up | efficiency | train s | train speed-up |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        train = (f"{row['train_seconds']:.1f} | {row['train_speedup']:.2f}x (vs "
                 f"{row['train_base_gpus']})" if "train_seconds" in row else "- | -")
        lines.append(f"| {row['gpus']} | {row['etl_seconds']:.2f} | {row['etl_speedup']:.2f}x | "
                     f"{row['etl_efficiency']:.0%} | {train} |")
    lines.append("")
    for row in rows[1:]:
        if base != 1:
            continue
        mark = "met" if row["etl_efficiency"] >= SCALING_GOAL else "NOT met"
        lines.append(f"- ETL on {row['gpus']} GPUs: {row['etl_speedup']:.2f}x one GPU (goal "
                     f"{SCALING_GOAL * row['gpus']:.2f}x, the 8-GPU goal of 6.5x pro rata: "
                     f"{mark})")
    return lines


def run_lines(results: list[dict]) -> list[str]:
    """Every timed ETL run of every configuration (``--etl-runs``), in order, with how many
    chunks each worker ran."""
    done = [r for r in results if "error" not in r and len(r.get("etl_runs", [])) > 1]
    if not done:
        return []
    lines = ["", "## Timed ETL runs, in order (each configuration's figure is their median)",
             "", "| configuration | runs, s | median s | chunks per worker |",
             "| --- | --- | ---: | --- |"]
    for r in done:
        seconds = [run["seconds"] for run in r["etl_runs"]]
        spread = ", ".join("/".join(map(str, run.get("chunks_per_worker") or ["?"]))
                           for run in r["etl_runs"])
        lines.append(f"| {r['config']} | {', '.join(f'{t:.2f}' for t in seconds)} | "
                     f"{statistics.median(seconds):.2f} | {spread} |")
    return lines


def stage_totals(run: dict) -> dict[str, float]:
    """Seconds per stage of the timed ETL, averaged over the workers (``--stages``), and the
    rest of each worker's ETL time outside any stage (scheduling, transfers, waiting)."""
    per_worker = [w for w in (run.get("stages") or {}).values() if w]
    if not per_worker:
        return {}
    names = list(dict.fromkeys(name for w in per_worker for name in w))
    out = {name: sum(w.get(name, {}).get("seconds", 0.0) for w in per_worker) / len(per_worker)
           for name in names}  # fmt: skip
    top = sum(seconds for name, seconds in out.items() if "/" not in name)
    out["outside the stages"] = run["etl_seconds"] - top
    return out


def stage_lines(results: list[dict]) -> list[str]:
    runs = [(r["config"], stage_totals(r)) for r in results if "error" not in r]
    runs = [(config, totals) for config, totals in runs if totals]
    if not runs:
        return []
    names = _tree_order(dict.fromkeys(name for _, totals in runs for name in totals))
    lines = ["", "## Where each worker's ETL time goes (--stages: each stage timed after a "
             "device sync, seconds averaged over the workers)", "",
             "| stage | " + " | ".join(config for config, _ in runs) + " |",
             "| --- |" + " ---: |" * len(runs)]
    for name in names:
        label = "&nbsp;&nbsp;" * name.count("/") + name.rsplit("/", 1)[-1]
        lines.append(f"| {label} | " + " | ".join(
            f"{totals[name]:.2f}" if name in totals else "-" for _, totals in runs) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=10.0, help="dataset size to generate (GB)")
    parser.add_argument("--data", default=None,
                        help="dataset directory (reused if it holds one; default "
                             "./mortgage-data-<gb>gb)")
    parser.add_argument("--years", default="2000-2016", help="vintages of a generated dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loans-per-part", type=int, default=40_000,
                        help="loans per generated performance file (about 10 KB each)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help=f"comma-separated, of: {', '.join(CONFIGS)}, gpuN-pool, "
                             "gpuN-cudamalloc (N GPUs)")
    parser.add_argument("--partition-size", default=None,
                        help="text per task (default: the ETL's own, by device: "
                             "1GiB on GPUs, 256MiB on CPUs)")
    parser.add_argument("--rounds", type=int, default=100, help="boosting rounds; 0: no training")
    parser.add_argument("--xgb-param", action="append", default=[], metavar="KEY=VALUE",
                        help="an XGBoost parameter over the notebook's (repeatable), e.g. "
                             "grow_policy=depthwise")
    parser.add_argument("--bad-rows", default="error", choices=("error", "warn", "skip"))
    parser.add_argument("--protocol", default="tcp", choices=("tcp", "ucx"))
    parser.add_argument("--pool-size", default=None, help="the plugin's RMM pool (e.g. 0.5)")
    parser.add_argument("--maximum-pool-size", default=None)
    parser.add_argument("--gpu-threads", type=int, default=1,
                        help="threads per GPU worker (2: one chunk's file read overlaps "
                             "another's GPU work, at twice the chunks in device memory)")
    parser.add_argument("--cpu-workers", type=int, default=None,
                        help="processes of the CPU cluster (default: one per core)")
    parser.add_argument("--etl-runs", type=int, default=1,
                        help="timed ETL runs on each configuration's cluster (its figure is "
                             "their median)")
    parser.add_argument("--stages", action="store_true",
                        help="profile the timed ETL on every worker, stage by stage (adds a "
                             "device sync at each stage's ends)")
    parser.add_argument("--no-train-guard", dest="train_guard", action="store_false",
                        help="train even when XGBoost is unlikely to fit beside the feature "
                             "table on the GPUs")
    parser.add_argument("--machine", default=None, help="name in the results file")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if not CONFIG.match(c)]
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {', '.join(CONFIGS)}, "
                     "or gpuN-pool / gpuN-cudamalloc for N GPUs")
    if args.partition_size is not None:
        parse_bytes(args.partition_size)  # fails early on a bad size
    if args.gpu_threads < 1:
        parser.error(f"--gpu-threads {args.gpu_threads}: give 1 or more")
    if args.etl_runs < 1:
        parser.error(f"--etl-runs {args.etl_runs}: give 1 or more")
    if args.stages and args.etl_runs > 1:
        parser.error("--stages profiles one timed run: leave --etl-runs at 1")
    from examples.mortgage.train import parse_params

    try:
        args.params = parse_params(args.xgb_param)
    except ValueError as exc:
        parser.error(str(exc))

    from examples.mortgage import etl

    info = machine()
    gpus = info["gpu_count"]
    skipped = [c for c in configs if gpu_count(c) > gpus]
    if skipped:
        say(f"skipping {', '.join(skipped)}: {gpus} GPU(s) visible")
    configs = [c for c in configs if c not in skipped]
    directory = os.path.abspath(args.data or f"mortgage-data-{args.gb:g}gb")
    data = dataset(directory, args.gb, args.years, args.seed, args.loans_per_part,
                   args.cpu_workers)
    plans = {}
    for device in sorted({"cpu" if c == "cpu" else "gpu" for c in configs}):
        size = etl.partition_size_for(device, args.partition_size)
        plans[device] = etl.plan(*etl.find_dataset(directory), partition_size=size)
        say(f"{device}: {len(plans[device].chunks)} chunks of at most {size}")

    stem = os.path.join(args.out, f"mortgage-{args.machine or machine_name(info)}")
    command = command_line(__file__, argv)
    results = []
    for config in configs:
        try:
            results.append(run_config(config, args, plans["cpu" if config == "cpu" else "gpu"]))
        except Exception as exc:  # keep going: the other configurations are still worth having
            say(f"{config} failed: {exc!r}")
            traceback.print_exc()
            results.append({"config": config, "error": "".join(
                traceback.format_exception_only(type(exc), exc)).strip()})
        write_results(stem, markdown(info, data, results, command, args),
                      {"machine": info, "data": data, "command": command, "results": results})
        say(f"results so far in {stem}.md")
    print(open(stem + ".md").read())
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

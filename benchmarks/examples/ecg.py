"""ECG pipeline, stage by stage: one GPU against the machine's CPUs, side by side in one run.

    python -m benchmarks.examples.ecg            # 20 h at 250 Hz, GPU (when present) and CPU
    python -m benchmarks.examples.ecg --hours 0.5 --devices cpu     # a quick look, no GPU

Each device runs twice: in one process (Dask's threaded scheduler, no cluster overhead: the
figure the "reading + segmentation + embedding of 20 h under 1 s on a GPU" goal is about), and
on a local cluster (one dask-cuda worker for the GPU with the memory plugin; CPU workers over
all cores). Every timed run follows an untimed warm-up on 10 minutes of ECG in the same
process or cluster, so kernel compilation, cuFFT plans and library imports are not counted.
The synthetic CSV is generated once and kept (``--data``, outside the checkout). With
``--repeats N`` the four runs alternate N times and the tables give medians (the range of
read + segment + embed beside them). The harness (benchmarks/common.py) records the machine and
the commit and writes ``--out``/ecg-MACHINE.md (and .json).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from ..common import Script, alternate, header, median_range

STAGES = ("read", "convolve", "detect", "embed", "train", "score")
SEGMENTATION = ("read", "convolve", "detect", "embed")


def measure(args, run) -> None:
    from dask_gpu_interop import resolve_device

    devices = args.devices.split(",") if args.devices != "auto" else (
        ["gpu", "cpu"] if resolve_device("auto") == "gpu" else ["cpu"])
    for d in devices:
        resolve_device(d)  # a clear error now, not after generating 20 hours of data
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    csv, truth, gen = dataset(data, args.hours, args.rate, args.seed)
    warm_csv, _, _ = dataset(data, 10 / 60, args.rate, args.seed + 1)
    print(f"data: {csv} ({csv.stat().st_size / 1e6:.0f} MB, {truth.summary()}){gen}", flush=True)
    run.payload.update(
        versions=versions(), used=1 if "gpu" in devices else None,
        recording={"hours": truth.seconds / 3600, "rate": truth.rate,
                   "samples": len(truth.signal), "beats": len(truth.peaks), "csv": csv.name,
                   "csv_bytes": csv.stat().st_size})
    runs = {f"{device.upper()} {mode}": (device, mode)
            for device in devices for mode in ("in-process", "cluster")}
    measured = run.payload["runs"] = {label: [] for label in runs}
    for round_, label in alternate(runs, args.repeats):
        print(f"running: {label} (round {round_ + 1}) ...", flush=True)
        measured[label].append(measure_one(csv, warm_csv, truth, args, *runs[label]))
        print(f"  {fmt_times(measured[label][-1]['times'])}", flush=True)


def combine(runs: list[dict]) -> dict:
    """One column from a run's repeats: each stage's median time (the first run's counts and
    scores), and every repeat's read + segment + embed for the range."""
    times = {stage: statistics.median(r["times"][stage] for r in runs)
             for stage in runs[0]["times"]}
    return {**runs[0], "times": times, "segmentation": [stage_value(r, "read+segment+embed")
                                                        for r in runs]}


def options(p) -> None:
    p.add_argument("--hours", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=250.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--devices", default="auto", help="gpu,cpu | cpu | gpu | auto")
    p.add_argument("--max-steps", type=int, default=None,
                   help="cap on VAE training steps (default: the pipeline's, 3000)")
    p.add_argument("--cpu-workers", type=int, default=None,
                   help="CPU cluster workers (default: 4, threads sharing all cores)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    p.add_argument("--data", default=str(cache / "dask-gpu-interop" / "ecg"),
                   help="where the CSVs are kept (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each device and mode, alternating")


def check_arguments(p, args) -> None:
    if args.devices not in ("auto", "cpu", "gpu", "gpu,cpu", "cpu,gpu"):
        p.error(f"--devices {args.devices!r}: gpu,cpu | cpu | gpu | auto")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")


def dataset(folder: Path, hours: float, rate: float, seed: int):
    """The synthetic recording (its truth is regenerated, cheaply) and its CSV, made once."""
    from examples.ecg.synthetic import make_ecg, write_csv

    truth = make_ecg(hours * 3600, rate, seed=seed)
    path = folder / f"ecg-{hours:g}h-{rate:g}Hz-seed{seed}.csv"
    note = ""
    if not path.exists():
        t0 = time.perf_counter()
        tmp = path.with_suffix(".tmp")
        write_csv(tmp, truth.signal)
        tmp.rename(path)
        note = f"; written in {time.perf_counter() - t0:.1f} s"
    return path, truth, note


def measure_one(csv, warm_csv, truth, args, device, mode) -> dict:
    import dask

    from examples.ecg.params import Params
    from examples.ecg.pipeline import evaluate, run

    rate = args.rate
    params = Params(max_steps=args.max_steps) if args.max_steps else Params()
    if mode == "cluster":
        from dask_gpu_interop import cluster_client, cluster_workers

        workers = 1 if device == "gpu" else (args.cpu_workers or min(4, os.cpu_count() or 1))
        with cluster_client(device=device, n_workers=workers) as (client, _):
            client.run(_import_frameworks, device)
            warm_blocks = Path(warm_csv).stat().st_size // (4 * workers) + 1
            run(warm_csv, rate, device=device, blocksize=warm_blocks)
            t0 = time.perf_counter()
            result = run(csv, rate, device=device, params=params)
            wall = time.perf_counter() - t0
            described = cluster_workers(client)
            workers = len(described)
            threads = sum(w["nthreads"] for w in described.values())
        where = f"{workers} worker(s), {threads} thread(s)"
    else:
        cores = os.cpu_count() or 1
        size = Path(csv).stat().st_size
        parts = 4 if device == "gpu" else 2 * cores
        blocksize = max(1 << 20, size // parts + 1)
        with dask.config.set(scheduler="threads"):
            run(warm_csv, rate, device=device)
            t0 = time.perf_counter()
            result = run(csv, rate, device=device, params=params, blocksize=blocksize)
            wall = time.perf_counter() - t0
        where = f"1 process, {cores} threads"
    scores = evaluate(result, truth)
    return {"times": result.times, "wall": wall, "where": where, "chunks": result.chunks,
            "beats": len(result.beats), "f1": scores["detection"]["f1"],
            "auc": scores["outliers"]["auc"], "steps": result.model["steps"]}


def _import_frameworks(device):
    """Warm-up on every worker: the imports the pipeline's tasks would otherwise pay for."""
    import numba  # noqa: F401
    import torch  # noqa: F401

    if device == "gpu":
        import cupy  # noqa: F401
        from numba import cuda  # noqa: F401


def fmt_times(times: dict) -> str:
    return ", ".join(f"{k} {v:.3f} s" for k, v in times.items())


def markdown(payload: dict) -> str:
    columns = {label: combine(runs) for label, runs in payload["runs"].items() if runs}
    labels = list(columns)
    repeats = max(len(c.get("segmentation", [0])) for c in columns.values())
    ecg = payload["recording"]
    lines = [
        *header(f"ECG pipeline, {ecg['hours']:g} h at {ecg['rate']:g} Hz "
                f"({ecg['samples']:,} samples, {ecg['beats']:,} beats)",
                payload["command"], payload["machine"], payload["commit"], payload["date"],
                used=payload["used"], versions=False),
        f"- versions: {payload['versions']}",
        f"- data: `{ecg['csv']}`, {ecg['csv_bytes'] / 1e6:.0f} MB of CSV",
        "",
        "Seconds per stage (wall clock, after a warm-up run in the same process or cluster"
        + (f"; the median of {repeats} runs, the runs alternating" if repeats > 1 else "")
        + ").",
        "",
        "| stage | " + " | ".join(labels) + " |" + "".join(
            f" {s} |" for s in speedup_labels(labels)),
        "| --- " * (1 + len(labels) + len(speedup_labels(labels))) + "|",
    ]
    rows = [*STAGES, "read+segment+embed", "total"]
    for row in rows:
        values = [stage_value(columns[label], row) for label in labels]
        cells = [f"{v:.3f}" for v in values]
        lines.append(f"| {row} | " + " | ".join(cells) + " |" + "".join(
            f" {x} |" for x in speedups(columns, labels, row)))
    lines += [
        "",
        "| run | where | chunks | beats | F1 | AUC | VAE steps |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label in labels:
        c = columns[label]
        lines.append(f"| {label} | {c['where']} | {c['chunks']} | {c['beats']:,} | "
                     f"{c['f1']:.4f} | {c['auc']:.4f} | {c['steps']} |")
    if repeats > 1:
        lines += ["", "read+segment+embed, median (min-max) of the runs: " + "; ".join(
            f"{label} {median_range(columns[label]['segmentation'], '{:.3f}')} s"
            for label in labels)]
    gpu = columns.get("GPU in-process")
    if gpu is not None:
        seg = stage_value(gpu, "read+segment+embed")
        verdict = "met" if seg < 1.0 else "not met"
        lines += ["", f"Goal, reading + segmentation + embedding of {ecg['hours']:g} h "
                      f"under 1 s on one GPU: {seg:.3f} s in one process ({verdict})."]
    lines += [
        "",
        "Notes: *read* parses the CSV into one Dask array (cuDF / pandas); *detect* includes "
        "gathering the candidates to the client and setting the threshold; *train* is on one "
        "worker (see `pipeline.py`). The in-process GPU run uses CuPy's and PyTorch's own "
        "allocators; the cluster run allocates from the worker's RMM pool (GPUMemoryPlugin).",
        "",
    ]
    return "\n".join(lines)


def stage_value(column: dict, row: str) -> float:
    times = column["times"]
    if row == "read+segment+embed":
        return sum(times[s] for s in SEGMENTATION)
    if row == "total":
        return sum(times.values())
    return times[row]


def speedup_labels(labels):
    return [f"GPU/CPU {mode} speedup" for mode in ("in-process", "cluster")
            if f"GPU {mode}" in labels and f"CPU {mode}" in labels]


def speedups(columns, labels, row):
    out = []
    for mode in ("in-process", "cluster"):
        g, c = f"GPU {mode}", f"CPU {mode}"
        if g in labels and c in labels:
            gv, cv = stage_value(columns[g], row), stage_value(columns[c], row)
            out.append(f"{cv / gv:.1f}x" if gv > 0 else "-")
    return out


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("dask", "distributed", "numpy", "pandas", "numba", "numba-cuda", "torch",
                 "cupy-cuda13x", "cupy-cuda12x", "cudf-cu13", "cudf-cu12", "rmm-cu13", "rmm-cu12"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="ecg",
                gpus=lambda args: None if args.devices == "cpu" else 1)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

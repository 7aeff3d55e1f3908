"""The mortgage example's commands as a user runs them: each command's whole wall clock, from
start to prompt, beside the work it reports, GPU and CPUs alternating in one run.

    python -m benchmarks.examples.wall_clock --data DIR [--size 1GB] [--layouts classic,current]
        [--runs 2] [--cpu-runs 2] [--fresh-runs 1] [--job-runs 2] [--ecg-runs 0]
        [--ecg-cpu-runs 1] [--ecg-hours 20] [--ecg-fresh-runs 0] [--source-runs 0]

For each layout the README's ``etl`` command runs on a dataset made by its ``generate``: first
on the GPU as on a fresh machine (the kernel caches emptied: CuPy's, the CUDA driver's,
Numba's), then warm (the caches filled by that run), alternating with the CPUs. Then the default job
(``python -m examples.mortgage``), GPU and CPUs alternating, the ECG example's command
(``python -m examples.ecg --hours H``, each stage it prints) and each command's ``--help``.
Per command: the wall clock, the work the command itself reports (in the figures file its
``--json`` writes: the ETL, which writes the table in the same stage; the job's generate, ETL,
DMatrix and training stages; the ECG's pipeline), and the fixed cost between them
(imports, the cluster's start and stop, first calls). ``--source-runs`` adds etl and --help
runs whose processes compile every module from source, as on a machine whose packages were
installed without bytecode where Python may not write it. The harness (benchmarks/common.py)
writes ``--out``/wall-clock-MACHINE.md (and .json) with the machine and the commit.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

from ..common import Script, header, interleave, median_range, say, summary
from .mortgage import EXAMPLE, JOB_WORK, check_layouts, dataset_options, figures_of, generate, run

WORK_STAGES = ("generate", *JOB_WORK)  # the default job's stages that are its work


def kernel_caches() -> list[str]:
    """Where compiled kernels are kept between runs: CuPy's cache, the CUDA driver's JIT
    cache, Numba's cache."""
    return [os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache")),
            os.environ.get("CUDA_CACHE_PATH", os.path.expanduser("~/.nv/ComputeCache")),
            os.environ.get("NUMBA_CACHE_DIR", os.path.expanduser("~/.cache/numba"))]


def empty_kernel_caches() -> None:
    """As on a fresh machine: the kernel caches emptied (the next run fills them again)."""
    for cache in kernel_caches():
        shutil.rmtree(cache, ignore_errors=True)


def compiled_kernels() -> dict:
    """What the runs since the caches were emptied left in them: the files in each cache, and
    the names of the kernels CuPy compiled (from the sources it saves beside them, with
    ``CUPY_CACHE_SAVE_CUDA_SOURCE=1``)."""
    files, names = {}, set()
    for cache in kernel_caches():
        found = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs]
        files[cache] = len(found)
        for path in found:
            if path.endswith(".cu"):
                with open(path, errors="replace") as source:
                    names.update(re.findall(r"__global__\s+void\s+(\w+)", source.read()))
    return {"files": files, "cupy kernels": sorted(names)}


def etl_command(directory: str, out: str, device: str) -> list[str]:
    return [*EXAMPLE, "etl", "--data", directory, "--out", out, "--overwrite", "--device",
            device]


FROM_SOURCE = ", from source"  # a variant whose processes find no compiled bytecode


def source_env(variant: str) -> dict | None:
    """The environment of a variant: for one "from source", every module compiled from its
    source in every process (Python looks for bytecode in an empty folder and writes none), as
    where packages were installed without bytecode and Python may not write it."""
    if not variant.endswith(FROM_SOURCE):
        return None
    empty = os.path.join(tempfile.gettempdir(), "wall-clock-no-bytecode")
    os.makedirs(empty, exist_ok=True)
    return {"PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}


def one_etl(directory: str, out: str, variant: str) -> dict:
    """One etl command: its wall clock, and its ETL stage (which writes the table) as its
    work."""
    device = variant.removesuffix(FROM_SOURCE)
    figures, _, wall = figures_of(etl_command(directory, out, device), env=source_env(variant))
    work = figures["etl"]["seconds"]
    return {"wall": wall, "work": work, "fixed": wall - work, "etl": work}


def etl_runs(directory: str, out: str, runs: int, cpu_runs: int, fresh_runs: int,
             source_runs: int = 0) -> dict:
    """A layout's etl commands, writing to ``out``: the fresh GPU runs first, then warm GPU
    and CPU alternating (and each compiled from source, ``source_runs`` times)."""
    results = {"gpu fresh": [], "gpu": [], "cpu": []}
    counts = {"gpu": runs, "cpu": cpu_runs}
    counts.update({name + FROM_SOURCE: source_runs for name, n in list(counts.items())
                   if n and source_runs})  # beside each device that runs
    results.update({name: [] for name in counts if name not in results})
    for _ in range(fresh_runs):
        empty_kernel_caches()
        results["gpu fresh"].append({**one_etl(directory, out, "gpu"),
                                     "compiled": compiled_kernels()})
        say(f"etl gpu fresh {os.path.basename(directory)}: {results['gpu fresh'][-1]}")
    for _, name in interleave(counts):
        results[name].append(one_etl(directory, out, name))
        say(f"etl {name} {os.path.basename(directory)}: {results[name][-1]}")
    return results


def job_work(stages: dict) -> float:
    """The seconds of the default job's work among its stages (generating its data, the ETL,
    XGBoost's matrix, the training), either way the job runs; the rest is fixed cost."""
    return sum(stages.get(stage, 0.0) for stage in WORK_STAGES)


def job_runs(runs: int) -> dict:
    """The default job (``python -m examples.mortgage``), GPU and CPUs alternating."""
    results = {"gpu": [], "cpu": []}
    for _, name in interleave({"gpu": runs, "cpu": runs}):
        figures, _, wall = figures_of([*EXAMPLE, "--device", name])
        stages = figures["stages"]
        work = job_work(stages)
        results[name].append({"wall": wall, "work": work, "fixed": wall - work,
                              "stages": stages})
        say(f"job {name}: {results[name][-1]}")
    return results


ECG = [sys.executable, "-m", "examples.ecg"]


def one_ecg(hours: float, device: str, out: str) -> dict:
    """One ECG command: its wall clock, each stage it reports and its pipeline (read to
    score) as its work, and whether the VAE's steps ran as a CUDA graph."""
    figures, _, wall = figures_of([*ECG, "--hours", str(hours), "--device", device, "--out",
                                   out])
    work = figures["pipeline"]
    return {"wall": wall, "work": work, "fixed": wall - work,
            "stages": {**figures["stages"], "pipeline": work}, "graphed": figures["graphed"]}


READ_TORCH = [sys.executable, "-c", "import torch; torch.zeros(1, device='cuda').sum().item()"]


def ecg_runs(runs: int, hours: float, out: str, fresh_runs: int = 0,
             cpu_runs: int | None = None) -> dict:
    """The ECG example's README command: first on the GPU as on a fresh machine (the kernel
    caches emptied), then GPU and CPUs alternating: the wall clock, each stage it prints, and
    the pipeline (read to score) as its work. Before the fresh runs, PyTorch is imported once
    in a process of its own, so that they find its libraries' files read (the operating
    system's file cache is not one a fresh run empties), as the runs after them do."""
    results = {"gpu fresh": [], "gpu": [], "cpu": []}
    if fresh_runs:
        run(READ_TORCH)
    for _ in range(fresh_runs):
        empty_kernel_caches()
        results["gpu fresh"].append({**one_ecg(hours, "gpu", out), "compiled": compiled_kernels()})
        say(f"ecg gpu fresh: {results['gpu fresh'][-1]}")
    for _, name in interleave({"gpu": runs, "cpu": runs if cpu_runs is None else cpu_runs}):
        results[name].append(one_ecg(hours, name, out))
        say(f"ecg {name}: {results[name][-1]}")
    shutil.rmtree(out, ignore_errors=True)
    return results


HELP = {"python -m examples.mortgage --help": [*EXAMPLE, "--help"],
        "python -m examples.mortgage etl --help": [*EXAMPLE, "etl", "--help"],
        "python -m examples.mortgage generate --help": [*EXAMPLE, "generate", "--help"]}


def help_runs(runs: int, source_runs: int = 0) -> dict:
    counts = {name: runs for name in HELP}
    counts.update({name + FROM_SOURCE: source_runs for name in HELP if source_runs})
    results = {name: [] for name in counts}
    for _, name in interleave(counts):
        command = HELP[name.removesuffix(FROM_SOURCE)]
        results[name].append({"wall": run(command, env=source_env(name))[1]})
    return results


def _cell(runs: list[dict], key: str) -> str:
    return median_range([r[key] for r in runs]) if runs else ""


def _cell_of(values: list[float]) -> str:
    return median_range(values) if values else ""


def markdown(payload: dict) -> str:
    lines = [*header(f"The mortgage commands' wall clock ({payload['machine_name']})",
                     payload["command"], payload["machine"], payload["commit"],
                     payload.get("date"))]
    if payload["etl"] or payload["jobs"]:
        lines += mortgage_table(payload)
    if payload.get("ecg"):
        lines += ecg_table(payload["ecg"], payload.get("ecg_hours"))
    if payload["help"]:
        lines += ["", "| command | runs | wall |", "| --- | --- | --- |"]
        lines += [f"| `{name.removesuffix(FROM_SOURCE)}`{name[len(name.removesuffix(FROM_SOURCE)):]}"
                  f" | {len(runs)} | {_cell(runs, 'wall')} |"
                  for name, runs in payload["help"].items()]
    return "\n".join(lines) + "\n"


def mortgage_table(payload: dict) -> list[str]:
    """The mortgage commands' wall clock beside their work, and what a fresh run compiled."""
    lines = ["", "Seconds: median (range). wall: the whole process, as a user waits for it; work: "
             "what the command reports (the ETL, which writes its table in the same stage; the "
             "job's generate, ETL, DMatrix and training); fixed: wall - work. gpu fresh: every kernel cache in the home "
             "directory emptied first. from source: every process compiles every module it "
             "imports (no bytecode found or written), as where packages were installed "
             "without bytecode and Python may not write it.", "",
             "| command | data | device | runs | wall | work | fixed | CPU wall / GPU wall |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = [(f"etl --data ({layout})", payload["datasets"][layout].get("size", ""), runs)
            for layout, runs in payload["etl"].items()]
    if payload["jobs"]:
        rows.append(("python -m examples.mortgage (default job)", "generated", payload["jobs"]))
    for label, size, by_device in rows:
        for device, runs in by_device.items():
            if not runs:
                continue
            versus = ""
            cpu = by_device.get("cpu" + (FROM_SOURCE if device.endswith(FROM_SOURCE) else ""))
            if cpu and not device.startswith("cpu"):
                cpu_wall = summary(r["wall"] for r in cpu)["median"]
                versus = f"{cpu_wall / summary(r['wall'] for r in runs)['median']:.2f}x"
            lines.append(f"| {label} | {size} | {device} | {len(runs)} | {_cell(runs, 'wall')} "
                         f"| {_cell(runs, 'work')} | {_cell(runs, 'fixed')} | {versus} |")
    compiled = [(layout, run["compiled"]) for layout, runs in payload["etl"].items()
                for run in runs.get("gpu fresh", []) if "compiled" in run]
    if compiled:
        lines += ["", "Compiled at run time by a fresh GPU etl command (files each cache holds "
                  "after it; CuPy's kernels by name):", ""]
        lines += [f"- {layout}: {', '.join(f'{path} {n}' for path, n in found['files'].items())}"
                  f"; CuPy: {', '.join(found['cupy kernels']) or 'none'}"
                  for layout, found in compiled]
    return lines


def ecg_table(runs: dict, hours) -> list[str]:
    """The ECG command's wall clock and each stage, GPU against CPUs."""
    names = list(dict.fromkeys(n for device in runs.values() for r in device for n in r["stages"]))
    fresh = bool(runs.get("gpu fresh"))
    lines = ["", f"`python -m examples.ecg --hours {hours:g}`: the wall clock, and each stage "
             "the command prints (work: the pipeline, read to score)"
             + ("; GPU fresh: every kernel cache emptied first (PyTorch imported once before, "
                "in a process of its own: its libraries' files read)" if fresh else "")
             + ".", "",
             "| stage |" + (" GPU fresh |" if fresh else "") + " GPU | CPU | CPU / GPU |",
             "| --- |" + (" --- |" if fresh else "") + " --- | --- | --- |"]
    for name in ["wall", *names]:
        cells = {}
        for device in ("gpu fresh", "gpu", "cpu") if fresh else ("gpu", "cpu"):
            values = [r["wall"] if name == "wall" else r["stages"].get(name)
                      for r in runs[device]]
            cells[device] = [v for v in values if v is not None]
        if not (cells["gpu"] or cells.get("gpu fresh")):
            continue
        gpu = summary(cells["gpu"])["median"] if cells["gpu"] else 0.0
        cpu = summary(cells["cpu"])["median"] if cells["cpu"] else 0.0
        first = (f" {median_range(cells['gpu fresh'])} |" if cells.get("gpu fresh") else
                 " |") if fresh else ""
        lines.append(f"| {name} |{first} {_cell_of(cells['gpu'])} | {_cell_of(cells['cpu'])} | "
                     + (f"{cpu / gpu:.1f}x |" if gpu and cpu else " |"))
    for r in runs.get("gpu fresh", []):
        c = r["compiled"]
        lines.append("\nCompiled by the fresh GPU run (files each cache holds after it; CuPy's "
                     "kernels by name): " + ", ".join(f"{k} {v}" for k, v in c["files"].items())
                     + "; CuPy: " + (", ".join(c["cupy kernels"]) or "none"))
    graphed = {r["graphed"] for r in runs["gpu"]}
    lines.append(f"\nThe GPU's VAE steps ran as a CUDA graph: {'yes' if graphed == {True} else 'no'}.")
    return lines


def options(parser) -> None:
    dataset_options(parser, "1GB", "The etl command's dataset per layout.")
    parser.add_argument("--runs", type=int, default=2, help="Warm GPU etl runs per layout.")
    parser.add_argument("--cpu-runs", type=int, default=2, help="CPU etl runs per layout.")
    parser.add_argument("--fresh-runs", type=int, default=1,
                        help="GPU etl runs per layout as on a fresh machine (caches emptied).")
    parser.add_argument("--job-runs", type=int, default=2,
                        help="Runs of the default job per device (0: skip).")
    parser.add_argument("--help-runs", type=int, default=3, help="Runs of each --help.")
    parser.add_argument("--source-runs", type=int, default=0,
                        help="Runs of each etl command and --help with every module compiled "
                             "from source in every process (no bytecode), beside the others.")
    parser.add_argument("--ecg-runs", type=int, default=0,
                        help="Runs of the ECG example's command per device (0: skip).")
    parser.add_argument("--ecg-cpu-runs", type=int, default=None,
                        help="Runs of the ECG command on the CPUs (default: --ecg-runs).")
    parser.add_argument("--ecg-hours", type=float, default=20.0, help="The ECG's --hours.")
    parser.add_argument("--ecg-fresh-runs", type=int, default=0,
                        help="GPU runs of the ECG command as on a fresh machine (caches "
                             "emptied), before the others.")


def measure(args, run) -> None:
    os.environ.setdefault("CUPY_CACHE_SAVE_CUDA_SOURCE", "1")  # names what a fresh run compiles
    # Numba's cache in one place that a fresh run can empty (by default it writes beside the
    # sources, in __pycache__).
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.expanduser("~/.cache/numba"))
    payload = run.payload
    payload.update(datasets={}, etl={}, jobs={}, help={})
    out = os.path.join(run.scratch(near=args.data), "features.parquet")
    for layout in args.layouts:
        directory = os.path.join(args.data, f"{layout}-{args.size}")
        payload["datasets"][layout] = {**generate(directory, args.size, layout, args.workers),
                                       "size": args.size}
        payload["etl"][layout] = etl_runs(directory, out, args.runs, args.cpu_runs,
                                          args.fresh_runs, args.source_runs)
        run.save()
    if args.job_runs:
        payload["jobs"] = job_runs(args.job_runs)
        run.save()
    if args.ecg_runs:
        payload["ecg_hours"] = args.ecg_hours
        payload["ecg"] = ecg_runs(args.ecg_runs, args.ecg_hours,
                                  os.path.join(run.scratch(near=args.data), "ecg"),
                                  args.ecg_fresh_runs, args.ecg_cpu_runs)
        run.save()
    if args.help_runs:
        payload["help"] = help_runs(args.help_runs, args.source_runs)


SCRIPT = Script(__file__, __doc__, options=options, check=check_layouts, measure=measure,
                markdown=markdown, name="wall-clock")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

"""Scale out: the README's commands on 1, 2, 4 ... GPUs and on the CPUs, whole processes.

    python -m benchmarks.examples.scale_out --etl 9GiB=/tmp/m9 --etl 36GiB=/tmp/m36 \\
        --job 9GiB=/tmp/m9 --default-job --ecg-hours 20 --gpus 1,2,4 --ucx etl \\
        --cpu etl,default,ecg --real-cluster 2 --runs 1 --machine 4xH100
    python -m benchmarks.examples.scale_out --etl 9GiB=/tmp/m9 --gpus 1,2,4 \\
        --joins quarter,loan,dask

Every figure is a command a user types, timed from its start to its exit (the wall clock),
beside the work it reports (in the figures file its ``--json`` writes: the ETL's seconds, the
training's, the ECG's pipeline): N GPUs are the first N of
the machine (``CUDA_VISIBLE_DEVICES``) and the command starts its own local cluster on them;
the CPUs' runs see no GPU. The configurations of one command alternate, round by round. The
first run of each command on the machine is marked: on a fresh machine it pays what later runs
find cached (kernels, files). ``--real-cluster N`` also runs the ``etl`` command on a cluster
started as a user starts one (``python -m dask scheduler`` and ``python -m dask cuda worker
--nthreads 2 --preload dask_gpu_interop.preload`` on N GPUs), to hold its ETL against the
local cluster's on the same files. ``--joins`` runs the ``etl`` and whole-job sections once
with each ``--join`` of the example (its per-quarter join, the join by loan across the GPUs
with the library's all-to-all, and with dask's own shuffle; classic layout), alternating with
the configurations: a run's name then carries its join ("2 GPUs tcp, join loan"; the
per-quarter join keeps the plain name) and its line the join's shuffle seconds.
``--full-teardown`` runs the given sections' configurations of several GPUs (and the CPUs)
once more with the worker processes' full Python teardown at the cluster's close
(``gpu-interop.worker.quick-exit`` off, which also spawns the worker processes that the fork
server would give), alternating: "2 GPUs tcp, full teardown";
``--spawned`` likewise with each worker process a new interpreter instead of a fork of the
library's server (``gpu-interop.worker.fork-server`` off): "CPUs, spawned".
``--worker-process`` runs the given sections' one-GPU configuration once more with its worker
in a process of its own (``--processes``), started as several GPUs' workers are, instead of
in the command's process: "1 GPU tcp, worker process", which tells what a worker process
costs apart from what more GPUs do. ``--tree
NAME=DIR`` (repeatable) runs every configuration once more from another copy of the project
(a checkout or a ``git archive`` of another commit, in DIR), alternating, to measure a change
against the code before it on one machine: "2 GPUs tcp, tree NAME". The datasets
are made beforehand by the README's ``generate`` command; before each command the machine's
dirty pages are written to disk (``os.sync``, not timed), so that no command pays for the
writes of what ran before it. A command that runs past ``--timeout`` is killed with the
processes it started and recorded as failed, with the output it had written, and the rounds go
on. Results: ``--out``/scale-out-MACHINE.md and .json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from dask.utils import format_bytes

from ..common import ROOT, Script, alternate, choices, header, say, spread, summary
from .mortgage import JOB_WORK

PYTHON = sys.executable
EXAMPLE = [PYTHON, "-m", "examples.mortgage"]
SECTIONS = ("etl", "job", "default", "ecg")
JOINS = ("quarter", "loan", "dask")  # the example's --join (examples/mortgage/loan_join.py)
JOINED = ("etl", "job")  # the sections --joins applies to
JOIN_MARK = ", join "  # between a configuration's name and its join
TEARDOWN_MARK = ", full teardown"  # a run whose worker processes tear Python down in full
QUICK_EXIT_OFF = {"DASK_GPU_INTEROP__WORKER__QUICK_EXIT": "false"}
SPAWNED_MARK = ", spawned"  # a run whose worker processes are new interpreters, not forks
FORK_SERVER_OFF = {"DASK_GPU_INTEROP__WORKER__FORK_SERVER": "false"}
#: A configuration's runs with one library setting off, beside its own: mark -> environment.
VARIANTS = {TEARDOWN_MARK: QUICK_EXIT_OFF, SPAWNED_MARK: FORK_SERVER_OFF}
WORKER_PROCESS_MARK = ", worker process"  # one GPU's worker in a process of its own
TREE_MARK = ", tree "  # a run from another copy of the project (--tree NAME=DIR)
GOALS = {"etl_share": 0.85, "etl_rest": 4.0, "etl_four": 3.0, "job_two": 1.5, "job_four": 2.5,
         "real": 0.10}


def visible(gpus: int | None) -> dict:
    """The environment of a run on the first ``gpus`` GPUs (None: on no GPU, the CPUs)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)) if gpus else ""}


def configurations(gpus: list[int], ucx: bool, cpu: bool) -> dict:
    """name -> (environment, flags): "1 GPU tcp", "2 GPUs ucx", ..., "CPUs"; UCX only where
    workers can talk to each other (2 GPUs or more); a worker on each of the N GPUs."""
    out = {}
    for n in gpus:
        for protocol in ("tcp", "ucx") if ucx else ("tcp",):
            if protocol == "ucx" and n < 2:
                continue
            name = f"{n} GPU{'s' if n > 1 else ''} {protocol}"
            # --workers: the commands take one GPU for small data unless told
            out[name] = (visible(n), ["--device", "gpu", "--protocol", protocol,
                                      "--workers", str(n)])
    if cpu:
        out["CPUs"] = (visible(None), ["--device", "cpu"])
    return out


def with_joins(configs: dict, joins: list[str]) -> dict:
    """``configs`` once per join: "2 GPUs tcp, join loan" with ``--join loan`` added; the
    per-quarter join (the commands' default) keeps the plain name and flags."""
    out = {}
    for name, (env, flags) in configs.items():
        for join in joins:
            if join == "quarter":
                out[name] = (env, flags)
            else:
                out[f"{name}{JOIN_MARK}{join}"] = (env, [*flags, "--join", join])
    return out


def with_variant(configs: dict, mark: str) -> dict:
    """``configs``, each of several GPUs and the CPUs followed by itself with the setting of
    ``mark`` (:data:`VARIANTS`) off, e.g. "2 GPUs tcp, full teardown"; one GPU's worker runs
    in the command's process, where neither setting acts."""
    out = {}
    for name, (env, flags) in configs.items():
        out[name] = (env, flags)
        processes = name == "CPUs" or (name[0].isdigit() and int(name.split()[0]) > 1)
        if processes and not variant_of(name):
            out[f"{name}{mark}"] = ({**env, **VARIANTS[mark]}, flags)
    return out


def variant_of(name: str) -> str | None:
    """The :data:`VARIANTS` mark the run ``name`` ends with, if any."""
    return next((mark for mark in VARIANTS if name.endswith(mark)), None)


def with_worker_process(configs: dict) -> dict:
    """``configs``, one GPU's followed by itself with its worker in a process of its own
    (``--processes``): "1 GPU tcp, worker process"."""
    out = {}
    for name, (env, flags) in configs.items():
        out[name] = (env, flags)
        if name.startswith("1 GPU ") and not variant_of(name) and JOIN_MARK not in name:
            out[f"{name}{WORKER_PROCESS_MARK}"] = (env, [*flags, "--processes"])
    return out


def own(name: str) -> bool:
    """Whether the run ``name`` is this code's command as a user types it (the goals are
    those runs' own): no other join, setting, worker placement or tree."""
    return not (JOIN_MARK in name or TREE_MARK in name or WORKER_PROCESS_MARK in name
                or variant_of(name))


def with_trees(configs: dict, trees: list[tuple[str, str]]) -> dict:
    """``configs``, each followed by itself once per tree of ``trees`` ((name, directory)):
    "2 GPUs tcp, tree old", run from that directory (:func:`tree_of`)."""
    out = {}
    for name, value in configs.items():
        out[name] = value
        for tree, _ in trees:
            out[f"{name}{TREE_MARK}{tree}"] = value
    return out


def tree_of(name: str, trees: list[tuple[str, str]]) -> str:
    """The directory the run ``name`` starts its command from: its tree's, else this
    checkout's."""
    _, mark, tree = name.partition(TREE_MARK)
    return dict(trees)[tree] if mark else str(ROOT)


def environment(name: str, configs: dict, trees: list[tuple[str, str]] = ()) -> dict:
    """The environment of the run ``name`` (its configuration's, with its join and variant;
    from a tree, that tree first on ``PYTHONPATH``)."""
    name, mark, tree = name.partition(TREE_MARK)
    if mark:
        path = os.environ.get("PYTHONPATH")
        return {**environment(name, configs),
                "PYTHONPATH": os.pathsep.join([dict(trees)[tree], *([path] if path else [])])}
    mark = variant_of(name)
    env = configs[name.split(JOIN_MARK)[0].removesuffix(mark or "").removesuffix(
        WORKER_PROCESS_MARK)][0]
    return {**env, **VARIANTS[mark]} if mark else env


def dataset(text: str) -> tuple[str, str]:
    """``LABEL=DIR`` -> (label, directory)."""
    label, sep, directory = text.partition("=")
    if not sep or not label or not directory:
        raise ValueError(f"{text!r}: give a dataset as LABEL=DIR, e.g. 9GiB=/tmp/mortgage-9")
    return label, directory


def tree(text: str) -> tuple[str, str]:
    """``NAME=DIR`` -> (name, absolute directory), DIR a copy of the project."""
    name, sep, directory = text.partition("=")
    if not sep or not name or not directory or "," in name:
        raise ValueError(f"--tree {text!r}: give NAME=DIR, e.g. before=/tmp/before (DIR a copy "
                         "of the project: git archive COMMIT | tar -x -C DIR)")
    if not os.path.isfile(os.path.join(directory, "examples", "mortgage", "__main__.py")):
        raise ValueError(f"--tree {text!r}: {directory} holds no copy of the project (no "
                         "examples/mortgage there): git archive COMMIT | tar -x -C DIR")
    return name, os.path.abspath(directory)


#: The exit code recorded for a command that ran past ``--timeout`` (as ``timeout(1)`` says).
TIMED_OUT = 124


def timed(command: list[str], env: dict, timeout: float, cwd=ROOT) -> dict:
    """A whole process, run with ``--json`` into a file of its own from ``cwd``: its wall
    clock, exit code, output (standard output and error as it wrote them) and the figures it
    wrote (None where it wrote none). One that runs past ``timeout`` seconds is killed with
    every process it started (its worker processes too, so that none is left to slow the
    runs after it), and recorded as a failure (:data:`TIMED_OUT`) with what it had written."""
    with tempfile.TemporaryDirectory(prefix="figures-") as folder:
        path = os.path.join(folder, "figures.json")
        started = time.perf_counter()
        with subprocess.Popen([*command, "--json", path], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, **env},
                              start_new_session=True) as process:
            try:
                output, _ = process.communicate(timeout=timeout)
                code = process.returncode
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
                output += f"\n[killed after {timeout:g} s: --timeout]"
                code = TIMED_OUT
        wall = time.perf_counter() - started
        figures = None
        if code != TIMED_OUT and os.path.exists(path):
            with open(path) as f:
                figures = json.load(f)
    return {"wall": wall, "rc": code, "output": output, "figures": figures}


def reported(figures: dict | None) -> dict:
    """What a command's figures say: its stages (the ECG's pipeline among them), its ETL, its
    test AUC (the ECG's: its outlier ranking's on the held-out beats, beside its detection's
    F1)."""
    found: dict = {"stages": dict((figures or {}).get("stages") or {})}
    if not figures:
        return found
    if "pipeline" in figures:
        found["stages"]["pipeline"] = figures["pipeline"]
    if "etl" in figures:
        found["etl"] = figures["etl"]
    if "auc" in figures:
        found["auc"] = figures["auc"]
    scores = figures.get("scores") or {}
    if "outliers" in scores:
        found["auc"] = scores["outliers"]["auc"]
        found["f1"] = scores["detection"]["f1"]
    if figures.get("worker_starts"):
        found["worker_starts"] = figures["worker_starts"]
    return found


def flushed() -> float:
    """Seconds to write every dirty page of the machine to disk (``os.sync``): after it a
    command starts with no earlier writes (the datasets' generation, an earlier run's output)
    still going out, which would throttle its own writes and be timed as its work."""
    started = time.perf_counter()
    os.sync()
    return time.perf_counter() - started


def measure_one(name: str, command: list[str], env: dict, timeout: float, first: bool,
                cwd=ROOT) -> dict:
    flush = flushed()  # not timed as the command's
    run = timed(command, env, timeout, cwd)
    entry = {"wall": run["wall"], "rc": run["rc"], "first": first, "flush": flush,
             **reported(run["figures"])}
    if run["rc"]:
        entry["error"] = run["output"][-3000:]
        say(f"  {name}: FAILED ({run['rc']}) after {run['wall']:.1f} s\n{run['output'][-1500:]}")
    else:
        work = entry.get("etl", {}).get("seconds")
        join = entry.get("etl", {}).get("join_seconds")
        say(f"  {name}: wall {run['wall']:.2f} s" + (f", ETL {work:.2f} s" if work else "")
            + (f" (join's shuffles {join:.2f} s)" if join else "")
            + (f", AUC {entry['auc']:.4f}" if "auc" in entry else ""))
    return entry


def command_of(kind: str, data: str | None, scratch: str, extra: list[str]) -> list[str]:
    if kind == "etl":
        return [*EXAMPLE, "etl", "--data", data, "--out", scratch, "--overwrite", *extra]
    if kind == "job":
        return [*EXAMPLE, *(["--data", data] if data else []), *extra]
    if kind == "ecg":
        return [PYTHON, "-m", "examples.ecg", *extra]
    raise ValueError(kind)


class RealCluster:
    """A scheduler and ``dask cuda worker`` on ``gpus`` GPUs, started as a user starts them."""

    def __init__(self, gpus: int, directory: str, timeout: float = 120):
        self.gpus, self.directory, self.timeout = gpus, directory, timeout
        self.file = os.path.join(directory, "scheduler.json")
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> str:
        env = {**os.environ, **visible(self.gpus)}
        logs = [open(os.path.join(self.directory, f"{n}.log"), "w") for n in ("sched", "work")]
        self.processes.append(subprocess.Popen(
            [PYTHON, "-m", "dask", "scheduler", "--scheduler-file", self.file, "--port", "0",
             "--dashboard-address", ":0"], cwd=ROOT, env=env, stdout=logs[0],
            stderr=subprocess.STDOUT))
        self.processes.append(subprocess.Popen(
            [PYTHON, "-m", "dask", "cuda", "worker", "--scheduler-file", self.file,
             "--nthreads", "2", "--preload", "dask_gpu_interop.preload"],
            cwd=ROOT, env=env, stdout=logs[1], stderr=subprocess.STDOUT))
        subprocess.run([PYTHON, "-m", "dask_gpu_interop.cli", "wait-for-workers",
                        "--scheduler-file", self.file, "-n", str(self.gpus),
                        "--timeout", str(int(self.timeout))], cwd=ROOT, env=env, check=True,
                       timeout=self.timeout + 30)
        with open(self.file) as f:
            return json.load(f)["address"]

    def __exit__(self, *exc):
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        return False


def work_seconds(entry: dict, kind: str) -> float | None:
    if kind == "etl":
        return entry.get("etl", {}).get("seconds")
    stages = entry.get("stages", {})
    if kind == "job":
        return sum(v for k, v in stages.items() if k in JOB_WORK) or None
    return stages.get("pipeline") or None


def table(runs: dict, kind: str) -> list[str]:
    """One command's configurations: wall, work, the rest, against 1 GPU over TCP (and for
    the etl command and the job, their cluster's start and stop lines; for the etl command,
    the steps of its last worker to join, :func:`worker_steps`)."""
    base = [r["wall"] for r in runs.get("1 GPU tcp") or () if not r["rc"]]
    base_wall = summary(base) if base else None  # none where every 1-GPU run failed
    work_name = {"etl": "ETL stage", "job": "ETL + DMatrix + training", "ecg": "pipeline"}[kind]
    cluster = ("cluster start", "cluster stop") if kind in ("etl", "job") else ()
    steps = kind == "etl"
    columns = [*cluster, *([WORKER_STEPS] if steps else [])]
    lines = [f"| configuration | wall | {work_name} | wall - work | wall: 1 GPU / this | "
             f"test AUC | first run on the machine |" + "".join(f" {c} |" for c in columns),
             "| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(columns)]
    for name, entries in runs.items():
        ok = [r for r in entries if not r["rc"]]
        if not ok:
            lines.append(f"| {name} | failed | | | | | |" + " |" * len(columns))
            continue
        wall = summary(r["wall"] for r in ok)
        works = [w for w in (work_seconds(r, kind) for r in ok) if w]
        rest = [r["wall"] - w for r, w in zip(ok, [work_seconds(r, kind) for r in ok], strict=True)
                if w]
        speed = (f"{base_wall['median'] / wall['median']:.2f}x" if base_wall and base_wall["runs"]
                 else "-")
        aucs = ", ".join(sorted({f"{r['auc']:.4f}" for r in ok if "auc" in r})) or "-"
        firsts = ", ".join(f"{r['wall']:.2f} s" for r in ok if r["first"]) or "-"
        stages = []
        for stage in cluster:
            seen = [r["stages"][stage] for r in ok if stage in r.get("stages", {})]
            stages.append(f" {spread(summary(seen)) if seen else '-'} |")
        if steps:
            stages.append(f" {worker_steps(ok)} |")
        lines.append(f"| {name} | {spread(wall)} | {spread(summary(works)) if works else '-'} | "
                     f"{spread(summary(rest)) if rest else '-'} | {speed} | {aucs} | {firsts} |"
                     + "".join(stages))
    return lines


WORKER_STEPS = "last worker to join: process / preloads / memory / joined"


def worker_steps(entries: list[dict]) -> str:
    """The medians over ``entries`` of each step of their last worker to join (seconds from
    the cluster's start, as the command's figures give them), "-" for a step none took."""
    import statistics

    lasts = [r["worker_starts"][0] for r in entries if r.get("worker_starts")]
    if not lasts:
        return "-"
    cells = []
    for step in ("process", "preloads", "memory", "joined"):
        seen = [last[step] for last in lasts if step in last]
        cells.append(f"{statistics.median(seen):.2f}" if seen else "-")
    return " / ".join(cells) + " s"


def goals(payload: dict) -> list[tuple[str, str]]:
    out = []

    def med(entries, key=lambda r: r["wall"]):
        values = [key(r) for r in entries if not r["rc"]]
        values = [v for v in values if v]
        return summary(values)["median"] if values else None

    for label, runs in payload["etl"].items():
        one = runs.get("1 GPU tcp")
        one_work = one and med(one, lambda r: work_seconds(r, "etl"))
        for name, entries in runs.items():
            if not own(name):
                continue
            work = med(entries, lambda r: work_seconds(r, "etl"))
            wall = med(entries)
            if work is None or wall is None:
                continue
            n = int(name.split()[0]) if name[0].isdigit() else None
            out.append((f"etl {label}, {name}: wall at most the work + {GOALS['etl_rest']:g} s",
                        f"{wall - work:.2f} s ({'met' if wall - work <= GOALS['etl_rest'] else 'not met'})"))
            if n and n > 1 and one_work:
                share = one_work / work / n
                out.append((f"etl {label}, {name}: ETL at least {GOALS['etl_share']:g} x N of 1 GPU's",
                            f"{share:.2f} ({'met' if share >= GOALS['etl_share'] else 'not met'})"))
            if n == 4 and one:
                ratio = med(one) / wall
                out.append((f"etl {label}: 4 GPUs at least {GOALS['etl_four']:g}x faster than 1 (wall)",
                            f"{ratio:.2f}x ({'met' if ratio >= GOALS['etl_four'] else 'not met'})"))
    for label, runs in payload["jobs"].items():
        one = runs.get("1 GPU tcp")
        if not one or med(one) is None:
            continue
        for name, entries in runs.items():
            n = int(name.split()[0]) if name[0].isdigit() else None
            wall = med(entries)
            if not n or n == 1 or wall is None or not own(name):
                continue
            ratio = med(one) / wall
            goal = GOALS["job_two"] if n == 2 else GOALS["job_four"] if n == 4 else 1.0
            goal = goal if label != "default" else 1.0
            out.append((f"job {label}, {name}: at least {goal:g}x 1 GPU's speed (wall)",
                        f"{ratio:.2f}x ({'met' if ratio >= goal else 'not met'})"))
    for label, entry in payload["real"].items():
        local, real = entry.get("local"), entry.get("real")
        if local and real and med(local, lambda r: work_seconds(r, "etl")) and med(
                real, lambda r: work_seconds(r, "etl")):
            ratio = med(real, lambda r: work_seconds(r, "etl")) / med(
                local, lambda r: work_seconds(r, "etl"))
            out.append((f"etl {label} on a started cluster: ETL within {GOALS['real']:.0%} of the local cluster's",
                        f"{ratio:.2f} ({'met' if ratio <= 1 + GOALS['real'] else 'not met'})"))
    return out


def markdown(payload: dict) -> str:
    lines = [*header(f"Scale out: the README's commands on 1 to N GPUs ({payload['machine_name']})",
                     payload["command"], payload["machine"], payload["commit"], payload["date"])]
    flushes = [entry.get("flush", 0.0) for entry in all_runs(payload)]
    if flushes:
        lines.append(f"- before each command the machine's dirty pages were written to disk "
                     f"(`sync`, not timed): {max(flushes):.2f} s at the longest")
    for label, runs in payload["etl"].items():
        lines += ["", f"## `python -m examples.mortgage etl --data DIR --out OUT` on {label}", "",
                  *table(runs, "etl")]
    for label, runs in payload["jobs"].items():
        title = ("`python -m examples.mortgage` (the default job)" if label == "default" else
                 f"`python -m examples.mortgage --data DIR` (the whole job) on {label}")
        lines += ["", f"## {title}", "", *table(runs, "job")]
    if payload["ecg"]:
        lines += ["", f"## `python -m examples.ecg {' '.join(payload['ecg_flags'])}`", "",
                  *table(payload["ecg"], "ecg")]
    for label, entry in payload["real"].items():
        lines += ["", f"## `etl` on {label}: a started cluster (`dask cuda worker --nthreads 2 "
                  f"--preload dask_gpu_interop.preload`, {payload['real_gpus']} GPUs, tcp) and "
                  "the local one", "", *table({"local": entry["local"], "started": entry["real"]},
                                               "etl")]
    lines += ["", "## Goals (issue 40)", "", "| goal | result |", "| --- | --- |"]
    lines += [f"| {goal} | {result} |" for goal, result in goals(payload)]
    sizes = {label: format_bytes(size) for label, size in payload.get("sizes", {}).items()}
    if sizes:
        lines += ["", "Datasets (text): " + ", ".join(f"{k} {v}" for k, v in sizes.items())]
    return "\n".join(lines) + "\n"


def all_runs(payload: dict) -> list[dict]:
    """Every run's entry in the results, of every section."""
    entries = [e for section in (payload["etl"], payload["jobs"]) for runs in section.values()
               for name_runs in runs.values() for e in name_runs]  # fmt: skip
    entries += [e for name_runs in payload["ecg"].values() for e in name_runs]
    entries += [e for pair in payload["real"].values() for e in (*pair["local"], *pair["real"])]
    return entries


def options(p) -> None:
    p.add_argument("--etl", action="append", default=[], metavar="LABEL=DIR",
                   help="Time the etl command on this dataset (repeatable).")
    p.add_argument("--job", action="append", default=[], metavar="LABEL=DIR",
                   help="Time the whole job on this dataset (repeatable).")
    p.add_argument("--default-job", action="store_true",
                   help="Time the default job (python -m examples.mortgage).")
    p.add_argument("--ecg-hours", type=float, default=None, help="Time the ECG command.")
    p.add_argument("--gpus", default="1,2", help="GPU counts, e.g. 1,2,4 (none: the CPUs only).")
    p.add_argument("--ucx", default="", metavar="SECTIONS",
                   help="Sections also run over UCX (2 GPUs or more): etl, job, default, ecg.")
    p.add_argument("--cpu", default="", metavar="SECTIONS",
                   help="Sections also run on the CPUs (no GPU visible): etl, job, default, ecg.")
    p.add_argument("--real-cluster", type=int, default=0, metavar="N",
                   help="Also time etl on a started cluster of N GPUs against the local one.")
    p.add_argument("--joins", default="", metavar="JOINS",
                   help="Run the etl and job sections with each of these --join: "
                        f"{', '.join(JOINS)} (classic data; default: the commands' own).")
    p.add_argument("--full-teardown", default="", metavar="SECTIONS",
                   help=f"Of {', '.join(SECTIONS)}: also run them on several GPUs with the "
                        "worker processes' quick exit off.")
    p.add_argument("--spawned", default="", metavar="SECTIONS",
                   help=f"Of {', '.join(SECTIONS)}: also run them on several GPUs and the CPUs "
                        "with each worker process a new interpreter (the fork server off).")
    p.add_argument("--worker-process", default="", metavar="SECTIONS",
                   help=f"Of {', '.join(SECTIONS)}: also run them on one GPU with its worker "
                        "in a process of its own (--processes).")
    p.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                   help="Also run every configuration from this copy of the project (another "
                        "commit's checkout or git archive), alternating (repeatable).")
    p.add_argument("--runs", type=int, default=1, help="Rounds of each command.")
    p.add_argument("--timeout", type=float, default=900, help="Seconds a command may run.")
    p.add_argument("--scratch", default=None,
                   help="Where the etl command writes (a folder of its own is made there, and "
                        "removed at the end).")
    p.add_argument("--dry-run", action="store_true", help="Print the runs; run nothing.")


def check_arguments(p, args) -> None:
    try:
        args.etl = [dataset(t) for t in args.etl]
        args.job = [dataset(t) for t in args.job]
        args.tree = [tree(t) for t in args.tree]
    except ValueError as exc:
        p.error(str(exc))
    if len({name for name, _ in args.tree}) < len(args.tree):
        p.error("--tree: give each tree a name of its own")
    if args.gpus != "none" and not all(n.strip().isdigit() and int(n) > 0
                                       for n in args.gpus.split(",")):
        p.error(f"--gpus {args.gpus!r}: GPU counts such as 1,2,4 (none: the CPUs only)")
    args.gpus = [] if args.gpus == "none" else sorted({int(n) for n in args.gpus.split(",")})
    if args.real_cluster and not args.gpus:
        p.error("--real-cluster needs GPUs (--gpus)")
    args.ucx = choices(p, "--ucx", args.ucx, SECTIONS) if args.ucx else []
    args.cpu = choices(p, "--cpu", args.cpu, SECTIONS) if args.cpu else []
    args.joins = choices(p, "--joins", args.joins, JOINS) if args.joins else []
    args.full_teardown = (choices(p, "--full-teardown", args.full_teardown, SECTIONS)
                          if args.full_teardown else [])
    args.spawned = choices(p, "--spawned", args.spawned, SECTIONS) if args.spawned else []
    args.worker_process = (choices(p, "--worker-process", args.worker_process, SECTIONS)
                           if args.worker_process else [])
    if args.joins and not (args.etl or args.job):
        p.error("--joins applies to --etl and --job: give one of them")
    if args.runs < 1:
        p.error("--runs: at least 1")
    if not (args.etl or args.job or args.default_job or args.ecg_hours):
        p.error("nothing to time: give --etl, --job, --default-job or --ecg-hours")


def plan(args) -> list[tuple[str, str, str, str | None, list[str]]]:
    """(section, label, configuration, data, flags) of every run, in order."""
    runs = []
    sections = [("etl", label, data) for label, data in args.etl]
    sections += [("job", "default", None)] if args.default_job else []
    sections += [("job", label, data) for label, data in args.job]
    sections += [("ecg", "ecg", None)] if args.ecg_hours else []
    for kind, label, data in sections:
        section = "default" if label == "default" else kind
        configs = configurations(args.gpus, section in args.ucx, section in args.cpu)
        if args.joins and section in JOINED:
            configs = with_joins(configs, args.joins)
        if section in args.full_teardown:
            configs = with_variant(configs, TEARDOWN_MARK)
        if section in args.spawned:
            configs = with_variant(configs, SPAWNED_MARK)
        if section in args.worker_process:
            configs = with_worker_process(configs)
        configs = with_trees(configs, args.tree)
        for _, name in alternate(configs, args.runs):
            flags = configs[name][1]
            if kind == "ecg":
                flags = ["--hours", f"{args.ecg_hours:g}", *flags]
            runs.append((kind, label, name, data, flags))
    return runs


def dry_run(args) -> str:
    lines = [f"{kind} {label} [{name}]: {' '.join(command_of(kind, data, 'OUT', flags)[1:])}"
             for kind, label, name, data, flags in plan(args)]
    if args.real_cluster:
        lines.append(f"etl on a started cluster of {args.real_cluster} GPUs, then the local "
                     f"one, on {', '.join(label for label, _ in args.etl)}")
    return "\n".join(lines)


def measure(args, run) -> None:
    payload = run.payload
    payload.update(etl={}, jobs={}, ecg={}, real={}, sizes={}, ecg_flags=[],
                   real_gpus=args.real_cluster)
    configs = configurations(args.gpus, True, True)
    scratch = run.scratch(near=args.scratch)
    out = os.path.join(scratch, "features.parquet")
    seen = set()
    for kind, label, name, data, flags in plan(args):
        section = {"etl": payload["etl"], "job": payload["jobs"], "ecg": None}[kind]
        target = payload["ecg"] if kind == "ecg" else section.setdefault(label, {})
        if kind == "ecg":
            payload["ecg_flags"] = flags[:2]
        if data and label not in payload["sizes"]:
            payload["sizes"][label] = sum(
                os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(data)
                for f in files)
        say(f"{kind} {label} [{name}]")
        target.setdefault(name, []).append(measure_one(
            name, command_of(kind, data, out, flags), environment(name, configs, args.tree),
            args.timeout, first=(kind, label) not in seen, cwd=tree_of(name, args.tree)))
        seen.add((kind, label))
        run.save()
    if args.real_cluster:
        for label, data in args.etl:
            entry = payload["real"].setdefault(label, {"local": [], "real": []})
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(dir=scratch) as where:
                    say(f"etl {label} on a started cluster of {args.real_cluster} GPUs")
                    try:
                        with RealCluster(args.real_cluster, where) as address:
                            entry["real"].append(measure_one(
                                "started", command_of("etl", data, out, ["--scheduler", address]),
                                {}, args.timeout, first=False))
                    except (subprocess.SubprocessError, OSError) as exc:
                        entry["real"].append({"wall": 0, "rc": 1, "first": False,
                                              "error": str(exc)})
                        say(f"  the started cluster failed: {exc}")
                entry["local"].append(measure_one(
                    "local", command_of("etl", data, out, ["--device", "gpu", "--workers",
                                                           str(args.real_cluster)]),
                    visible(args.real_cluster), args.timeout, first=False))
                run.save()


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="scale-out", dry_run=dry_run,
                gpus=lambda args: max(args.gpus, default=1))
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

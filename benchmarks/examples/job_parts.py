"""The mortgage whole job against its parts done alone, on one GPU, on the same files: the
``etl`` command, XGBoost alone on its output, and the job (uncapped, and on a GPU made smaller);
the ``etl`` command on a local cluster against a started one.

    python -m benchmarks.examples.job_parts --data /tmp/mb/classic-9GiB \\
        --data /tmp/mb/classic-32GiB [--sections etl,alone,job,capped,started]
        [--caps 40GB,16GB] [--runs 1] [--tag NAME]

Every ``--data`` folder holds a dataset the README's ``generate`` made. In each round, for
each dataset (the order turned at every round, so that drift hits both alike):

- ``etl``: ``python -m examples.mortgage etl --data D --out OUT --device gpu``;
- ``alone``: XGBoost alone on that OUT (``benchmarks.examples.xgboost_alone``: its matrix and
  training, in a process of its own);
- ``job``: ``python -m examples.mortgage --data D --device gpu``, the whole job;
- ``capped``: the job again with ``--maximum-pool-size CAP`` for each of ``--caps``, beside a
  process that holds the rest of the GPU's memory, so that every library in the job (XGBoost
  too, which the pool does not serve) sees a GPU of CAP;
- ``started``: the ``etl`` command on a started ``dask cuda worker --nthreads 2 --preload
  dask_gpu_interop.preload`` cluster (started once a dataset, not timed), on the local one
  (its worker in the command's process) and on a local one whose worker is a process of its
  own (``--processes``), alternating.

For each command: its wall clock from start to prompt, the figures its ``--json`` wrote, the
GPU's peak memory (NVML, sampled every 50 ms; for a capped run, above what the holding process
takes). The table sets the job beside the sum of its parts (the ``etl`` command's wall clock
and XGBoost alone's matrix and training) and each stage beside the same stage done alone.
A command that fails is recorded with its output's tail, and the next one runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from dask.utils import format_bytes, parse_bytes

from ..common import ROOT, Script, choices, header, say
from .etl_memory import Sampler, nvml_reader, remove_table
from .mortgage import EXAMPLE, run

SECTIONS = ("etl", "alone", "job", "capped", "started")
TIMEOUT = 1200.0
PYTHON = sys.executable


def options(parser) -> None:
    parser.add_argument("--data", action="append", required=True, metavar="DIR",
                        help="a dataset folder (repeat for several sizes)")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"which to run, comma-separated from {', '.join(SECTIONS)}")
    parser.add_argument("--caps", default="40GB,16GB",
                        help="the GPU sizes of the capped jobs, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="rounds over the datasets")
    parser.add_argument("--capped-timeout", type=float, default=TIMEOUT,
                        help="seconds a capped job may take before it is stopped and recorded "
                             "as not finished")
    parser.add_argument("--tag", default="", help="added to the results file's name")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")


def check(parser, args) -> None:
    args.sections = choices(parser, "--sections", args.sections, SECTIONS)
    try:
        args.caps = [parse_bytes(c) for c in args.caps.split(",") if c.strip()]
    except ValueError as err:
        parser.error(f"--caps: {err}")
    if args.runs < 1:
        parser.error("--runs: at least 1")


def _figures(argv, env=None, timeout: float = TIMEOUT
             ) -> tuple[dict | None, str, float, str | None]:
    """(figures, output, wall, error) of an example command run with ``--json``."""
    with tempfile.TemporaryDirectory(prefix="job-parts-") as folder:
        path = os.path.join(folder, "figures.json")
        started = time.perf_counter()
        try:
            text, wall = run([*argv, "--json", path], timeout=timeout, env=env)
        except Exception as err:  # recorded, and the next command runs
            return None, "", time.perf_counter() - started, f"{type(err).__name__}: {err}"[-3000:]
        with open(path) as f:
            return json.load(f), text, wall, None


class Ballast:
    """A process holding ``size`` bytes of the GPU's memory (cudaMalloc), so that the GPU
    looks that much smaller to every library of the measured command."""

    CODE = ("import sys, cupy; p = cupy.cuda.runtime.malloc({size}); "
            "print('held', flush=True); sys.stdin.read(); cupy.cuda.runtime.free(p)")

    def __init__(self, size: int):
        self.size = size
        self.process = subprocess.Popen([PYTHON, "-c", self.CODE.format(size=size)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        if self.process.stdout.readline().strip() != "held":
            raise RuntimeError(f"could not hold {format_bytes(size)} of the GPU's memory")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _device_total() -> int:
    import pynvml

    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)


class Started:
    """A started cluster of one GPU worker: ``python -m dask scheduler`` and ``python -m dask
    cuda worker --nthreads 2 --preload dask_gpu_interop.preload``, stopped by :meth:`close`."""

    def __init__(self, folder: str):
        self.file = os.path.join(folder, "scheduler.json")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
        self.processes = [subprocess.Popen(
            [PYTHON, "-m", "dask", "scheduler", "--scheduler-file", self.file,
             "--no-dashboard"], env=env, cwd=ROOT, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        self.processes.append(subprocess.Popen(
            [PYTHON, "-m", "dask", "cuda", "worker", "--scheduler-file", self.file,
             "--nthreads", "2", "--preload", "dask_gpu_interop.preload"], env=env, cwd=ROOT,
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        run([PYTHON, "-m", "dask_gpu_interop.cli", "wait-for-workers", "--scheduler-file",
             self.file, "--workers", "1"], timeout=300)
        with open(self.file) as f:
            self.address = json.load(f)["address"]

    def close(self) -> None:
        for process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)


def measured(kind: str, argv: list, env=None, ballast: int = 0,
             timeout: float = TIMEOUT) -> dict:
    """One command: wall clock, figures, the GPU's peak memory above the holding process."""
    read = nvml_reader()
    sampler = Sampler(lambda: {0: read()[0]}, 0.05).start() if read else None
    figures, text, wall, error = _figures(argv, env, timeout)
    memory = sampler.stop() if sampler else {}
    peak = memory.get(0, {}).get("peak")
    before = memory.get(0, {}).get("before")
    say(f"{kind}: {wall:.2f} s" + (f" FAILED {error[-300:]}" if error else ""))
    return {"kind": kind, "command": " ".join(argv[1:]), "wall": wall, "figures": figures,
            "error": error, "tail": text[-2500:], "peak": peak, "before": before,
            "ballast": ballast}


def _alone(out: str, etl_json: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="alone-") as folder:
        path = os.path.join(folder, "alone.json")
        argv = [PYTHON, "-m", "benchmarks.examples.xgboost_alone", "--features", out, "--figures",
                etl_json, "--json", path]
        read = nvml_reader()
        sampler = Sampler(lambda: {0: read()[0]}, 0.05).start() if read else None
        started = time.perf_counter()
        try:
            _, wall = run(argv, timeout=TIMEOUT)
            with open(path) as f:
                figures, error = json.load(f), None
        except Exception as err:
            wall, figures, error = time.perf_counter() - started, None, str(err)[-3000:]
        memory = sampler.stop() if sampler else {}
    say(f"alone: {wall:.2f} s" + (f" FAILED {error[-300:]}" if error else ""))
    return {"kind": "alone", "command": " ".join(argv[1:5]), "wall": wall, "figures": figures,
            "error": error, "peak": memory.get(0, {}).get("peak"),
            "before": memory.get(0, {}).get("before")}


def one_dataset(data: str, args, run_, results: list) -> None:
    scratch = run_.scratch(os.path.dirname(os.path.abspath(data)))
    out = os.path.join(scratch, "features")
    gpu = {"CUDA_VISIBLE_DEVICES": "0"}
    etl = [*EXAMPLE, "etl", "--data", data, "--out", out, "--device", "gpu"]
    job = [*EXAMPLE, "--data", data, "--device", "gpu"]

    def keep(entry):
        entry["data"] = data
        results.append(entry)
        run_.save()

    if {"etl", "alone"} & set(args.sections):
        remove_table(out)
        entry = measured("etl", etl, gpu)
        keep(entry)
        if "alone" in args.sections and entry["figures"]:
            figures = os.path.join(scratch, "etl.json")
            with open(figures, "w") as f:
                json.dump(entry["figures"], f)
            keep(_alone(out, figures))
        remove_table(out)
    if "job" in args.sections:
        keep(measured("job", job, gpu))
    if "capped" in args.sections:
        total = _device_total()
        for cap in args.caps:
            ballast = Ballast(max(0, total - cap))
            try:
                keep(measured(f"job, GPU of {format_bytes(cap)}",
                              [*job, "--maximum-pool-size", str(cap)], gpu, ballast.size,
                              args.capped_timeout))
            finally:
                ballast.close()
    if "started" in args.sections:
        started = Started(scratch)
        try:
            for where in ("started", "local", "processes") * 2:
                remove_table(out)
                flags = {"started": ["--scheduler", started.address], "local": [],
                         "processes": ["--processes"]}[where]
                keep(measured(f"etl, {where} cluster", etl + flags, gpu))
        finally:
            started.close()
            remove_table(out)


def measure(args, run_) -> None:
    for directory in args.data:
        if not os.path.isdir(directory):
            raise SystemExit(f"--data {directory}: no such folder; make it with generate")
    results = run_.payload.setdefault("results", [])
    for round_ in range(args.runs):
        order = args.data if round_ % 2 == 0 else list(reversed(args.data))
        for data in order:
            one_dataset(data, args, run_, results)


def _gib(value) -> str:
    return f"{value / 2**30:.1f}" if value else "-"


def _stages(figures: dict | None) -> str:
    if not figures:
        return "-"
    return ", ".join(f"{k} {v:.2f}" for k, v in figures.get("stages", {}).items()
                     if k not in ("start", "other"))


def _by(results, data, kind):
    return [r for r in results if r["data"] == data and r["kind"] == kind]


def comparison(results: list, data: str) -> list[str]:
    """The job against its parts, from the first of each (medians where there are more)."""
    import statistics

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    etl = [r for r in _by(results, data, "etl") if r["figures"]]
    alone = [r for r in _by(results, data, "alone") if r["figures"]]
    job = [r for r in _by(results, data, "job") if r["figures"]]
    if not (etl and alone and job):
        return []
    etl_wall = med(r["wall"] for r in etl)
    etl_line = med(r["figures"]["etl"]["seconds"] for r in etl)
    matrix = med(r["figures"]["matrix"] for r in alone)
    training = med(r["figures"]["training"] for r in alone)
    job_wall = med(r["wall"] for r in job)
    stages = [r["figures"]["stages"] for r in job]
    job_matrix = med(s.get("ETL and sketch", 0) + s.get("quantize", 0) for s in stages)
    job_training = med(s.get("training") for s in stages)
    parts = etl_wall + matrix + training
    lines = [
        f"- whole job {job_wall:.2f} s against its parts {parts:.2f} s (etl command "
        f"{etl_wall:.2f} + XGBoost's matrix alone {matrix:.2f} + its training alone "
        f"{training:.2f}): **{job_wall / parts:.2f}x** (goal: at most 1.15x)",
        f"- the job's ETL into XGBoost's matrix {job_matrix:.2f} s against the etl command's "
        f"ETL line and XGBoost's matrix alone {etl_line + matrix:.2f} s: "
        f"**{job_matrix / (etl_line + matrix):.2f}x** (goal: at most 1.2x)",
        f"- training {job_training:.2f} s against {training:.2f} s alone: "
        f"**{job_training / training:.2f}x** (goal: at most 1.2x)",
        f"- test AUC: job {med(r['figures']['auc'] for r in job):.4f}, alone "
        f"{med(r['figures']['auc'] for r in alone):.4f}",
    ]
    for r in job[:1]:
        placed = r["figures"].get("placement") or {}
        memory = r["figures"].get("training", {}).get("memory") or {}
        if placed.get("peak_bytes") and r.get("peak"):
            lines.append(
                f"- the job's GPU memory: predicted peak {_gib(placed['peak_bytes'])} GiB; "
                f"measured {_gib(r['peak'] - (r['before'] or 0))} GiB (NVML), the CUDA pool's "
                f"{_gib(memory.get('peak'))} GiB, XGBoost's matrices {_gib(memory.get('matrices'))}"
                " GiB")
    for r in results:
        if r["data"] == data and r["kind"].startswith("job, GPU of") and r["figures"]:
            lines.append(f"- {r['kind']}: {r['wall']:.2f} s, **{r['wall'] / job_wall:.2f}x** "
                         f"the uncapped job; {r['figures'].get('placement', {}).get('line')}")
    started = [r for r in _by(results, data, "etl, started cluster") if r["figures"]]
    local = [r for r in _by(results, data, "etl, local cluster") if r["figures"]]
    if started and local:
        s = med(r["figures"]["etl"]["seconds"] for r in started)
        lo = med(r["figures"]["etl"]["seconds"] for r in local)
        lines.append(f"- etl's ETL line: local cluster {lo:.2f} s, started cluster {s:.2f} s: "
                     f"**{lo / s:.2f}x** (goal: at most 1.05x); wall "
                     f"{med(r['wall'] for r in local):.2f} / {med(r['wall'] for r in started):.2f}"
                     " s (the started cluster's start not counted)")
    return lines


def markdown(payload: dict) -> str:
    text = "\n".join(header("The mortgage whole job against its parts on one GPU",
                            payload["command"], payload["machine"], payload["commit"],
                            payload["date"])) + "\n"
    results = payload.get("results", [])
    for data in dict.fromkeys(r["data"] for r in results):
        text += f"\n## {os.path.basename(data.rstrip('/'))}\n\n"
        text += "\n".join(comparison(results, data)) + "\n\n"
        text += "| command | wall s | stages (s) | AUC | GPU peak GiB (above before) |\n"
        text += "| --- | --- | --- | --- | --- |\n"
        for r in results:
            if r["data"] != data:
                continue
            f = r.get("figures") or {}
            if r["kind"] == "alone" and f:
                stages = f"matrix {f['matrix']:.2f}, training {f['training']:.2f}"
            else:
                error = " ".join((r["error"] or "").split())[-200:]  # one line of the table
                stages = _stages(f) if not r["error"] else f"failed: {error}"
            auc = f"{f['auc']:.4f}" if f.get("auc") else "-"
            above = (r["peak"] - (r["before"] or 0)) if r.get("peak") else None
            text += (f"| {r['kind']} | {r['wall']:.2f} | {stages} | {auc} | "
                     f"{_gib(r.get('peak'))} ({_gib(above)}) |\n")
    return text


SCRIPT = Script(file=__file__, doc=__doc__, options=options, check=check, measure=measure,
                markdown=markdown, name="job-parts",
                dry_run=lambda args: "\n".join(
                    f"{d}: {', '.join(args.sections)}" for d in args.data))
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

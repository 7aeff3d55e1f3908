"""More data than a GPU holds: the mortgage commands as a user types them, their wall clock,
their ETL and each GPU's peak memory, on datasets of growing size.

    python -m benchmarks.examples.etl_memory --data /tmp/mb/classic-9GB --data /tmp/mb/classic-36GB
        [--sections etl,job] [--gpus 1,2] [--pool-cap 16GB] [--managed] [--runs 1]
        [--job-data /tmp/mb/classic-36GB] [--job-gpus 1,2] [--job-runs 1]
        [--job-flags '--xgb-param grow_policy=depthwise'] [--interval 0.05] [--tag NAME]
        [--dry-run]

Every ``--data`` directory must hold a dataset made by the README's ``generate`` command
(``python -m examples.mortgage generate --out DIR --size 36GiB``). The ``etl`` section runs,
on each, ``python -m examples.mortgage etl --data DIR --out OUT --device gpu`` with one GPU
(``CUDA_VISIBLE_DEVICES``), with one GPU and the pool capped (``--maximum-pool-size``, as on a
card of that size), with ``--managed --pool-size 0.5`` when ``--managed`` is given (the pool
within the device's memory), and with each GPU count of ``--gpus`` beyond one. The ``job``
section runs the whole job, ``python -m examples.mortgage --data DIR --device gpu
[--job-flags]``, on ``--job-data`` with each count of ``--job-gpus``: its test AUC, its stages
and where its training data lived. For every command: the wall clock from start to prompt, the
figures it reports (the figures file its ``--json`` writes), and each used GPU's peak memory (NVML, sampled every ``--interval`` seconds in
a thread; the GPUs are numbered in PCI order for CUDA and NVML alike). A command that fails is
recorded with its output's tail, and the next one runs. The feature table the etl command
wrote is removed before and after each run (the script's own scratch, beside the first
dataset; a folder there that the command did not write is left alone, and the command refuses
it).

The harness (benchmarks/common.py) records the machine and the commit and writes
``--out``/etl-memory-MACHINE[-TAG].md (and .json) after every command.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import threading
import time

from dask.utils import format_bytes, parse_bytes

from ..common import Script, choices, header, say
from .mortgage import EXAMPLE, figures_of, job_figures

SECTIONS = ("etl", "job")
TIMEOUT = 1800.0  # seconds one command may take


# ---------------------------------------------------------------------------------------------
# Each GPU's memory over a command


class Sampler:
    """The highest memory in use on each GPU while it runs: ``read()`` gives ``{index: bytes
    in use}``, called every ``interval`` seconds in a thread, from ``start()`` to
    ``stop()``."""

    def __init__(self, read, interval: float = 0.05):
        self.read, self.interval = read, interval
        self.first: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-memory", daemon=True)

    def _take(self) -> None:
        for index, used in self.read().items():
            self.first.setdefault(index, used)
            self.peak[index] = max(self.peak.get(index, 0), used)
        self.samples += 1

    def _loop(self) -> None:
        while not self._done.wait(self.interval):
            self._take()

    def start(self) -> Sampler:
        self._take()
        self._thread.start()
        return self

    def stop(self) -> dict:
        """``{index: {"before": bytes, "peak": bytes}}`` over the samples."""
        self._done.set()
        self._thread.join()
        self._take()
        return {index: {"before": self.first[index], "peak": self.peak[index]}
                for index in sorted(self.peak)}


def nvml_reader():
    """``read()`` for :class:`Sampler`: every GPU's memory in use, by NVML's index (PCI
    order); None where NVML cannot be used."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as err:  # no NVML, no driver
        say(f"no GPU memory sampling: {type(err).__name__}: {err}")
        return None
    return lambda: {i: int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
                    for i, h in enumerate(handles)}


# ---------------------------------------------------------------------------------------------
# The commands


def visible(gpus: int) -> str:
    return ",".join(str(i) for i in range(gpus))


def etl_variants(args) -> list[tuple[str, dict, list[str]]]:
    """(name, environment, flags) of each etl run on a dataset."""
    out = [("1 GPU", {"CUDA_VISIBLE_DEVICES": "0"}, [])]
    if args.pool_cap:
        out.append((f"1 GPU, pool capped at {args.pool_cap}", {"CUDA_VISIBLE_DEVICES": "0"},
                    ["--maximum-pool-size", args.pool_cap]))
    if args.managed:
        out.append(("1 GPU, managed pool of half the device", {"CUDA_VISIBLE_DEVICES": "0"},
                    ["--managed", "--pool-size", "0.5"]))
    out += [(f"{n} GPUs", {"CUDA_VISIBLE_DEVICES": visible(n)}, []) for n in args.gpus if n > 1]
    return out


def scratch(args) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(args.data[0])),
                        "etl-memory-features.parquet")


def planned(args) -> list[dict]:
    """Every command the run makes, in order: section, dataset, variant, environment, argv."""
    runs = []
    if "etl" in args.sections:
        for _ in range(args.runs):
            for directory in args.data:
                for name, env, flags in etl_variants(args):
                    runs.append({"section": "etl", "data": directory, "variant": name,
                                 "env": env, "argv": [*EXAMPLE, "etl", "--data", directory,
                                                      "--out", scratch(args), "--device",
                                                      "gpu", *flags]})
    if "job" in args.sections:
        for _ in range(args.job_runs):
            for n in args.job_gpus:
                runs.append({"section": "job", "data": args.job_data,
                             "variant": f"{n} GPU{'s' if n > 1 else ''}",
                             "env": {"CUDA_VISIBLE_DEVICES": visible(n)},
                             "argv": [*EXAMPLE, "--data", args.job_data, "--device", "gpu",
                                      *shlex.split(args.job_flags)]})
    for entry in runs:
        entry["env"] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **entry["env"]}
    return runs


def shown(entry: dict) -> str:
    """The command as a user types it, its environment first."""
    words = [f"{k}={v}" for k, v in entry["env"].items()]
    words += ["python", *entry["argv"][1:]]
    return " ".join(shlex.quote(w) for w in words)


def remove_table(path: str) -> None:
    """The feature table an etl command wrote at ``path`` removed: nothing else (a folder
    there without the command's list of what it wrote is left as it is, and the command
    refuses it)."""
    from examples.mortgage.output import MARKER

    if os.path.isfile(os.path.join(path, MARKER)):
        shutil.rmtree(path, ignore_errors=True)


def one(entry: dict, read, interval: float) -> dict:
    """Run one command: its wall clock, what it printed, each used GPU's peak memory."""
    if entry["section"] == "etl":
        remove_table(scratch_of(entry))
    sampler = Sampler(read, interval).start() if read else None
    result = {key: entry[key] for key in ("section", "data", "variant", "env")}
    result["command"] = shown(entry)
    started = time.perf_counter()
    try:
        figures, text, wall = figures_of(entry["argv"], env=entry["env"], timeout=TIMEOUT)
        result.update(ok=True, wall=wall, tail=text[-3000:])
        result.update(found_in(entry["section"], figures))
    except Exception as err:  # a failed command (or one that wrote no figures) is a result
        result.update(ok=False, wall=result.get("wall", time.perf_counter() - started),
                      error=f"{type(err).__name__}: {str(err)[-3000:]}")
    used = [int(i) for i in entry["env"]["CUDA_VISIBLE_DEVICES"].split(",")]
    memory = sampler.stop() if sampler else {}
    result["gpu_memory"] = {i: memory[i] for i in used if i in memory}
    if sampler:
        result["samples"] = sampler.samples
    if entry["section"] == "etl":
        remove_table(scratch_of(entry))
    return result


def scratch_of(entry: dict) -> str:
    return entry["argv"][entry["argv"].index("--out") + 1]


def found_in(section: str, figures: dict) -> dict:
    """What the command's figures say: its ETL; for the job its stages, AUC and where its
    training data lived."""
    if section == "etl":
        return {"etl": figures["etl"]}
    return job_figures(figures)


# ---------------------------------------------------------------------------------------------
# The results


def _gib(value) -> str:
    return f"{value / 2**30:.1f}" if value is not None else "-"


def _peaks(result: dict) -> str:
    memory = result.get("gpu_memory") or {}
    return ", ".join(f"GPU{i} {_gib(m['peak'])} (+{_gib(m['peak'] - m['before'])})"
                     for i, m in sorted(memory.items(), key=lambda item: int(item[0]))) or "-"


def _size(directory: str, results: list[dict]) -> str:
    for r in results:
        if r["data"] == directory and r.get("etl"):
            return format_bytes(r["etl"]["bytes"])
    return os.path.basename(directory)


def markdown(payload: dict) -> str:
    results = payload["results"]
    lines = [*header(f"The mortgage commands on more data than a GPU holds "
                     f"({payload['machine_name']})", payload["command"], payload["machine"],
                     payload["commit"], payload.get("date"))]
    etl = [r for r in results if r["section"] == "etl"]
    if etl:
        lines += ["", "## `python -m examples.mortgage etl --data DIR --out OUT --device gpu`",
                  "", "wall: the whole command, start to prompt; ETL: its ETL stage (reading, "
                  "features and the Parquet write: one stage), and its input text over that "
                  "time; GPU memory: each used GPU's peak in use (NVML, GiB), and its rise "
                  "over the memory in use before the command. NVML counts what the memory "
                  "pool reserved, used or not: the plugin's pool starts at half the device's "
                  "free memory (or at the cap), and the peak rises above that only where the "
                  "pool had to grow.", "",
                  "| data | variant | wall | ETL | ETL GB/s | Parquet | GPU memory peak "
                  "(rise), GiB |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in etl:
            size = _size(r["data"], results)
            if not r["ok"]:
                lines.append(f"| {size} | {r['variant']} | failed after {r['wall']:.1f} s | "
                             f"| | | {_peaks(r)} |")
                continue
            e = r["etl"]
            parquet = format_bytes(e["written_bytes"]) if e.get("written_bytes") else "-"
            lines.append(f"| {size} | {r['variant']} | {r['wall']:.1f} s | {e['seconds']:.2f} s "
                         f"| {e['bytes'] / e['seconds'] / 1e9:.2f} | {parquet} | "
                         f"{_peaks(r)} |")
        lines += throughput_lines(etl, payload)
    jobs = [r for r in results if r["section"] == "job"]
    if jobs:
        lines += ["", "## The whole job: `python -m examples.mortgage --data DIR --device gpu"
                  + (f" {payload['job_flags']}" if payload.get("job_flags") else "") + "`", "",
                  "| data | GPUs | wall | ETL | DMatrix | training | test AUC | training data "
                  "| GPU memory peak (rise), GiB |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in jobs:
            size = _size(r["data"], results)
            if not r["ok"]:
                lines.append(f"| {size} | {r['variant']} | failed after {r['wall']:.1f} s | | | "
                             f"| | | {_peaks(r)} |")
                continue
            stages = r.get("stages", {})
            cells = [f"{stages[k]:.1f} s" if k in stages else "-"
                     for k in ("ETL", "DMatrix", "training")]
            where = r["placement"]["where"] if r.get("placement") else "-"
            auc = f"{r['auc']:.4f}" if r.get("auc") is not None else "-"
            lines.append(f"| {size} | {r['variant']} | {r['wall']:.1f} s | {' | '.join(cells)} "
                         f"| {auc} | {where} | {_peaks(r)} |")
        lines += ["", "Where each job's training data lived, as it said:", ""]
        lines += [f"- {r['variant']}: `{r['placement']['line']}`" for r in jobs
                  if r["ok"] and r.get("placement")]
        aucs = [r["auc"] for r in jobs if r["ok"] and r.get("auc") is not None]
        if len(aucs) > 1:
            lines.append(f"\nTest AUC spread over the jobs: {max(aucs) - min(aucs):.4f} (the "
                         "goal: within 0.002 of the job on more GPUs).")
    failed = [r for r in results if not r["ok"]]
    if failed:
        lines += ["", "## Failed commands", ""]
        lines += [f"- `{r['command']}`:\n\n```\n{r['error'][-1500:]}\n```" for r in failed]
    return "\n".join(lines) + "\n"


def throughput_lines(etl: list[dict], payload: dict) -> list[str]:
    """Each variant's ETL throughput on the largest dataset over the smallest (the goal: at
    least 85%)."""
    by_variant: dict[str, dict[str, list[float]]] = {}
    sizes = {}
    for r in etl:
        if r["ok"]:
            by_variant.setdefault(r["variant"], {}).setdefault(r["data"], []).append(
                r["etl"]["bytes"] / r["etl"]["seconds"])
            sizes[r["data"]] = r["etl"]["bytes"]
    if len(sizes) < 2:
        return []
    small, large = min(sizes, key=sizes.get), max(sizes, key=sizes.get)
    lines = ["", f"ETL throughput on {format_bytes(sizes[large])} over "
             f"{format_bytes(sizes[small])}, medians (the goal: at least 85%):", ""]
    for variant, rates in by_variant.items():
        if small in rates and large in rates:
            ratio = sorted(rates[large])[len(rates[large]) // 2] / sorted(
                rates[small])[len(rates[small]) // 2]
            lines.append(f"- {variant}: {ratio:.0%}")
    return lines


# ---------------------------------------------------------------------------------------------
# The command line


def _counts(parser, flag: str, text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        parser.error(f"{flag} {text!r}: GPU counts such as 1,2")
    return counts


def options(parser) -> None:
    parser.add_argument("--data", action="append", default=[], metavar="DIR",
                        help="A dataset made by the README's generate command (repeatable).")
    parser.add_argument("--sections", default="etl,job", help="etl, job, or both.")
    parser.add_argument("--gpus", default="1,2", help="GPU counts for the etl command.")
    parser.add_argument("--pool-cap", default="16GB",
                        help="The etl command on one GPU with --maximum-pool-size this ('': "
                             "skip).")
    parser.add_argument("--managed", action="store_true",
                        help="Also the etl command on one GPU with --managed --pool-size 0.5.")
    parser.add_argument("--runs", type=int, default=1, help="Rounds of the etl commands.")
    parser.add_argument("--job-data", default=None, metavar="DIR",
                        help="The whole job's dataset (default: the last --data).")
    parser.add_argument("--job-gpus", default="1,2", help="GPU counts for the whole job.")
    parser.add_argument("--job-runs", type=int, default=1)
    parser.add_argument("--job-flags", default="",
                        help="Flags added to the whole job's command, e.g. "
                             "'--xgb-param grow_policy=depthwise'.")
    parser.add_argument("--interval", type=float, default=0.05,
                        help="Seconds between GPU memory samples.")
    parser.add_argument("--tag", default="", help="Added to the results file's name.")
    parser.add_argument("--dry-run", action="store_true",
                        help="Print the commands it would run, and run nothing.")


def check_arguments(parser, args) -> None:
    args.sections = choices(parser, "--sections", args.sections, SECTIONS)
    if not args.sections:
        parser.error("--sections: give etl, job or both")
    if not args.data:
        parser.error("--data: give at least one dataset directory")
    args.gpus = _counts(parser, "--gpus", args.gpus)
    args.job_gpus = _counts(parser, "--job-gpus", args.job_gpus)
    if args.pool_cap:
        try:
            if parse_bytes(args.pool_cap) <= 0:
                raise ValueError
        except ValueError:
            parser.error(f"--pool-cap {args.pool_cap!r} is not a size such as 16GB")
    for flag, value in (("--runs", args.runs), ("--job-runs", args.job_runs)):
        if value < 1:
            parser.error(f"{flag} {value}: at least 1")
    if not args.interval > 0:
        parser.error(f"--interval {args.interval}: a positive number of seconds")
    try:
        shlex.split(args.job_flags)
    except ValueError as err:
        parser.error(f"--job-flags {args.job_flags!r}: {err}")
    args.job_data = args.job_data or args.data[-1]
    if args.tag and not re.fullmatch(r"[\w.-]+", args.tag):
        parser.error(f"--tag {args.tag!r}: letters, digits, '.', '_' or '-'")


def dry_run(args) -> str:
    return "\n".join(shown(entry) for entry in planned(args))


def measure(args, run) -> None:
    runs = planned(args)
    missing = sorted({r["data"] for r in runs if not os.path.isdir(r["data"])})
    if missing:
        sys.exit(f"no dataset at {', '.join(missing)}: make it first, e.g. python -m "
                 f"examples.mortgage generate --out {missing[0]} --size 36GiB")
    run.payload.update(job_flags=args.job_flags, results=[])
    run.tidy(remove_table, scratch(args))
    read = nvml_reader()
    for entry in runs:
        say(shown(entry))
        result = one(entry, read, args.interval)
        run.payload["results"].append(result)
        say(f"{'ok' if result['ok'] else 'FAILED'} in {result['wall']:.1f} s; GPU memory "
            f"{_peaks(result)}")
        run.save()


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="etl-memory", gpus=lambda args: None, dry_run=dry_run)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

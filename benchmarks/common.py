"""The benchmarks' harness: the one contract every script in benchmarks/ fills in, and what the
scripts share.

Run a script as a module from the checkout's root: ``python -m benchmarks.NAME [options]``
(the library's), ``python -m benchmarks.examples.NAME [options]`` (the applications').

- The contract: :class:`Script`. A script is its measurement: its options, their checks, the
  measurement itself (``measure(args, run)``), its table (``markdown(payload)``) and its results
  file's name. :meth:`Script.main` does the rest the same way for every script: it parses and
  checks the arguments before anything runs, measures once, removes what the run made
  (:meth:`Run.scratch`, :meth:`Run.tidy`), writes NAME.md and NAME.json (the payload, which
  starts with the command, the commit, the date and the machine) and prints the table.
  :meth:`Script.parse` checks a command's arguments without running anything (the tests parse
  every recorded command with it).
- A process of its own: :func:`in_child` (a call's JSON result from a fresh interpreter, so
  that its allocators, device memory and imports go with it).
- The command line: :func:`command_line` (how a run was started, for its results file),
  :func:`choices` (comma-separated items checked against the allowed ones).
- The machine: :func:`machine` (GPUs, CPU, memory, versions), :func:`machine_label` (the one
  spelling of a machine in every results file: "1x NVIDIA H100 80GB HBM3, 16 cores"),
  :func:`machine_name` (the same for file names: "1xH100"), :func:`commit`.
- Repeats and spread: :func:`summary`, :func:`spread`, :func:`median_range`, :func:`timed`.
- Alternation of variants: :func:`alternate` (round by round, each variant once a round,
  optionally in a rotated order) and :func:`interleave` (the same with a count per variant), so
  that drift in the machine hits every variant alike.
- The results file: :func:`header` (title, command, machine, commit, date, versions) and
  :func:`write_results` (NAME.md, and NAME.json with every figure).

Only the standard library and dask at import time: scripts import GPU libraries inside the
functions that run on GPUs, so that ``--help`` and ``parse`` work on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from dask.utils import format_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---------------------------------------------------------------------------------------------
# The command line


def module_of(script: str) -> str:
    """The dotted module of a script's file in the checkout: ``benchmarks.shuffle``,
    ``benchmarks.examples.mortgage``."""
    path = os.path.splitext(os.path.relpath(os.path.abspath(script), ROOT))[0]
    return ".".join(path.split(os.sep))


def command_line(script: str, argv=None) -> str:
    """How a benchmark was run (``argv``, or this process's own), for its results file:
    ``python -m benchmarks.<name> <arguments>`` (``benchmarks.examples.<name>`` for an
    application's), whatever the interpreter's path and the current directory (``script``:
    the script's file)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return "python " + " ".join(shlex.quote(a) for a in ["-m", module_of(script), *args])


def choices(parser, flag: str, text: str, allowed) -> list[str]:
    """The comma-separated items of ``flag``'s ``text``; a usage error for one not allowed."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item not in allowed:
            parser.error(f"{flag}: {item!r} is not one of {', '.join(allowed)}")
    return items


def output_options(parser, out: str | None = RESULTS) -> None:
    """``--out`` (the results folder; None: no results file unless given), ``--machine`` (the
    name in the results file's name; default: :func:`machine_name` of the GPUs the run uses)
    and ``--commit`` (the commit measured; default: git's)."""
    parser.add_argument("--out", default=out,
                        help="folder for the results files (default: %(default)s)")
    parser.add_argument("--machine", default=None,
                        help="the machine's name in the results file's name (default: from "
                             "the GPUs, e.g. 1xH100)")
    parser.add_argument("--commit", default=None, help="The commit measured (default: git's).")


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------------------------------------
# The machine


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """The checkout's commit, short ("" outside a git checkout)."""
    return _run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])


def machine() -> dict:
    """What runs the benchmark: its GPUs (nvidia-smi), CPU, cores, memory and versions."""
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
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "memory": format_bytes(psutil.virtual_memory().total),
        "gpus": [f"{g[0]} ({g[1]}, driver {g[2]})" if len(g) == 3 else ", ".join(g) for g in gpus],
        "gpu_names": [g[0] for g in gpus],
        "gpu_count": len(gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "python": platform.python_version(),
        "versions": versions,
        "bytecode": bytecode(),
    }


def machine_in_child() -> dict:
    """:func:`machine`, read in a process of its own (see :func:`in_child`)."""
    return in_child("m.machine()", setup="from benchmarks import common as m", timeout=300)


def bytecode() -> dict:
    """Which installed packages have no compiled bytecode, and whether Python may write it: a
    process compiles such packages from source as it imports them (pip compiles at install)."""
    from dask_gpu_interop.doctor import without_bytecode

    return {"missing": sorted(without_bytecode()), "written": not sys.dont_write_bytecode}


def _gpu_names(info: dict) -> list[str]:
    return list(info.get("gpu_names") or [g.split(" (")[0] for g in info.get("gpus", [])])


def machine_label(info: dict, used: int | None = None) -> str:
    """The machine as every results file spells it: "1x NVIDIA H100 80GB HBM3, 16 cores"
    ("2x NVIDIA H200, 32 cores (1 GPU used)" when ``used`` says fewer GPUs ran)."""
    names = _gpu_names(info)
    if names:
        kinds = list(dict.fromkeys(names))
        text = " + ".join(f"{names.count(k)}x {k}" for k in kinds)
    else:
        text = "no GPU"
    cores = info.get("cores")
    if cores:
        text += f", {cores} cores"
    if used is not None and names and used < len(names):
        text += f" ({used} GPU{'s' if used > 1 else ''} used)"
    return text


def machine_name(info: dict, used: int | None = None) -> str:
    """The machine in a results file's name: "1xH100" (GPUs used x model), "cpu16" without
    a GPU or with ``used=0`` (a run on the CPUs)."""
    names = _gpu_names(info)
    if not names or used == 0:
        return f"cpu{info.get('cores') or os.cpu_count()}"
    model = names[0].replace("NVIDIA", "").replace("Tesla", "").strip()
    short = re.findall(r"[A-Z]+\d+[A-Za-z]*", model)
    short = short[0] if short else re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-") or "gpu"
    return f"{used or len(names)}x{short}"


def machine_lines(info: dict, used: int | None = None) -> list[str]:
    """The results file's machine lines: the label, then what it is made of."""
    parts = [f"CPU: {info.get('cpu_model') or info.get('cpu', '?')}"]
    if info.get("memory"):
        parts.append(f"memory {info['memory']}")
    if info.get("gpus"):
        parts.append(f"GPUs: {'; '.join(info['gpus'])}")
    if info.get("cuda_visible_devices"):
        parts.append(f"CUDA_VISIBLE_DEVICES={info['cuda_visible_devices']}")
    lines = [f"- machine: {machine_label(info, used)} ({', '.join(parts)})"]
    code = info.get("bytecode")
    if code is not None:
        lines.append("- bytecode: " + (
            "compiled for every package of the stack" if not code["missing"] else
            f"none for {', '.join(code['missing'])}; "
            + ("Python writes it at their first import" if code["written"] else
               "Python may not write it (PYTHONDONTWRITEBYTECODE): every process compiles "
               "them from source")))
    return lines


# ---------------------------------------------------------------------------------------------
# Repeats and spread


def summary(values: Iterable[float]) -> dict:
    """Median, min, max and the runs themselves."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def spread(values, unit: str = "s", digits: int = 2) -> str:
    """"2.16 s (1.92-2.33, 3 runs)": the median, the range and the count (a summary or the
    values)."""
    s = values if isinstance(values, dict) else summary(values)
    if len(s["runs"]) == 1:
        return f"{s['median']:.{digits}f} {unit} (1 run)"
    return (f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}-{s['max']:.{digits}f}, "
            f"{len(s['runs'])} runs)")


def median_range(values: Iterable[float], fmt: str = "{:.2f}") -> str:
    """"7.00 (6.00-8.00)": the median and the range, in ``fmt``."""
    s = summary(values)
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def timed(function: Callable[[], object], repeats: int, warmup: int = 1,
          sync: Callable[[], object] | None = None) -> list[float]:
    """Seconds of ``repeats`` calls of ``function`` after ``warmup`` untimed ones; ``sync``
    (a device synchronization) runs before the clock starts and before it stops."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        started = time.perf_counter()
        function()
        if sync:
            sync()
        times.append(time.perf_counter() - started)
    return times


# ---------------------------------------------------------------------------------------------
# Alternation of variants


def alternate(variants: Iterable[str], rounds: int, rotate: bool = False
              ) -> Iterator[tuple[int, str]]:
    """(round, variant) pairs: every variant once a round, ``rounds`` rounds; with ``rotate``
    each round starts one variant later, so no variant always runs first."""
    names = list(variants)
    for round_ in range(rounds):
        shift = round_ % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            yield round_, name


def interleave(counts: dict[str, int]) -> Iterator[tuple[int, str]]:
    """(round, variant) pairs for variants with their own number of runs: round by round,
    each variant while it has runs left."""
    for round_ in range(max(counts.values(), default=0)):
        for name, count in counts.items():
            if round_ < count:
                yield round_, name


# ---------------------------------------------------------------------------------------------
# The results file


def header(title: str, command: str, info: dict, commit_: str | None = None,
           date: str | None = None, used: int | None = None,
           versions: bool = True) -> list[str]:
    """The first lines of every results file: the title, the command, the machine (one
    spelling), the commit and date, the versions."""
    lines = [f"# {title}", "", f"- command: `{command}`", *machine_lines(info, used),
             f"- commit: {commit_ if commit_ is not None else commit()}, "
             f"date: {date or now()}"]
    if versions and info.get("versions"):
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    return lines


def write_results(stem: str, text: str, payload: dict | None = None) -> str:
    """``stem``.md (the markdown ``text``) and, with a ``payload``, ``stem``.json; returns the
    markdown file's path."""
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".md", "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    if payload is not None:
        with open(stem + ".json", "w") as f:
            json.dump(payload, f, indent=1, default=str)
    return stem + ".md"


# ---------------------------------------------------------------------------------------------
# The contract: what a script fills in, and what the harness does with it


@dataclass(frozen=True)
class Script:
    """A benchmark script: its measurement, and the harness's one way of running it.

    What a script gives:

    - ``file``, ``doc``: its ``__file__`` (its command, ``python -m`` its module) and its
      docstring (the first paragraph describes it in ``--help``);
    - ``options(parser)``: its options (the harness adds ``--out``, ``--machine`` and
      ``--commit``, see :func:`output_options`);
    - ``check(parser, args)``: its arguments checked and converted before anything runs, one
      ``parser.error`` line for a bad one;
    - ``measure(args, run)``: the measurement, once: it puts its figures into ``run.payload``
      and may call ``run.save()`` after each step, so that a run cut short keeps what it
      measured;
    - ``markdown(payload)``: the results table;
    - ``name``: the results file's name: a prefix followed by the machine's name and the
      ``--tag`` where the script has one ("shuffle" gives shuffle-4xH100.md), or
      ``name(args, payload)``;
    - ``gpus(args)``: how many of the machine's GPUs the run uses, for the machine's name (None:
      all of them; 0: none, a run on the CPUs);
    - ``dry_run(args)``: what ``--dry-run`` (an option of the script's) prints instead of
      running anything;
    - ``rest``: the words after ``--`` go to ``args.rest`` (flags of a command the script runs).
    """

    file: str
    doc: str
    options: Callable[[argparse.ArgumentParser], None]
    measure: Callable[[argparse.Namespace, Run], None]
    markdown: Callable[[dict], str]
    name: str | Callable[[argparse.Namespace, dict], str]
    check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] | None = None
    gpus: Callable[[argparse.Namespace], int | None] = lambda args: 1
    dry_run: Callable[[argparse.Namespace], str] | None = None
    rest: bool = False
    out: str | None = RESULTS  # where results go by default (None: only with --out)

    @property
    def module(self) -> str:
        return module_of(self.file)

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python -m {self.module}",
            description=" ".join((self.doc or "").strip().split("\n\n")[0].split()))
        self.options(parser)
        output_options(parser, self.out)
        return parser

    def parse(self, argv=None) -> argparse.Namespace:
        """The arguments (``argv``, or this process's), checked; nothing runs.
        ``args.argv`` keeps the words as given."""
        argv = sys.argv[1:] if argv is None else list(argv)
        words, rest = argv, []
        if self.rest and "--" in argv:
            words, rest = argv[:argv.index("--")], argv[argv.index("--") + 1:]
        parser = self.parser()
        args = parser.parse_args(words)
        args.argv = argv
        if self.rest:
            args.rest = rest
        if self.check is not None:
            self.check(parser, args)
        return args

    def main(self, argv=None) -> dict | None:
        """Parse and check, measure once, tidy, write the results files, print the table; the
        payload (None for a dry run)."""
        args = self.parse(argv)
        if self.dry_run is not None and args.dry_run:
            print(self.dry_run(args))
            return None
        run = Run(self, args)
        with run:
            self.measure(args, run)
        written = run.save()
        print(self.markdown(run.payload))
        if written:
            print(f"written: {written}")
        return run.payload


class Run:
    """One run of a :class:`Script`: ``payload``, what is measured (first the command, the
    commit, the date and the machine, read in a process of its own, so that the GPU libraries
    it imports to name their versions stay out of the measuring process), :meth:`save`,
    :meth:`scratch` and :meth:`tidy`. Used as a context manager, it tidies when it ends."""

    def __init__(self, script: Script, args: argparse.Namespace):
        self.script, self.args = script, args
        info = machine_in_child()
        self.payload: dict = {
            "command": command_line(script.file, args.argv), "commit": args.commit or commit(),
            "date": now(), "machine": info,
            "machine_name": args.machine or machine_name(info, script.gpus(args))}
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> bool:
        self._exit.close()
        return False

    def stem(self) -> str | None:
        """The results files' path without the extension (None without ``--out``)."""
        if not self.args.out:
            return None
        payload = self.payload
        name = self.script.name
        if callable(name):
            name = name(self.args, payload)
        else:
            tag = getattr(self.args, "tag", "")
            name = f"{name}-{payload['machine_name']}" + (f"-{tag}" if tag else "")
        return os.path.join(self.args.out, name)

    def save(self) -> str | None:
        """NAME.md and NAME.json of what is measured so far; the markdown file's path (None
        without ``--out``)."""
        stem = self.stem()
        if stem is None:
            return None
        return write_results(stem, self.script.markdown(self.payload), self.payload)

    def scratch(self, near: str | None = None) -> str:
        """A new empty folder for what the run writes and throws away, in ``near`` (made if
        missing; default: the system's temporary folder), removed when the run ends."""
        if near:
            os.makedirs(near, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="benchmark-scratch-", dir=near or None)
        self._exit.callback(shutil.rmtree, folder, True)
        return folder

    def tidy(self, function: Callable, *args) -> None:
        """``function(*args)`` when the run ends, however it ends."""
        self._exit.callback(function, *args)


# ---------------------------------------------------------------------------------------------
# A process of its own


def require_dataset(directory: str) -> None:
    """Stop with one line when ``directory`` is no folder: at a measurement's start rather
    than in ``check``, so that a recorded command parses on any machine."""
    if not os.path.isdir(directory):
        raise SystemExit(f"--data {directory}: no such folder; make one with the README's "
                         "generate")


def as_gpu_worker(pool: bool = True) -> None:
    """This process given what the library's GPU workers have, for a benchmark that runs
    their work without dask: their environment (call it before cuDF and CuPy load; a variable
    already set is kept, to compare settings) and, with ``pool``, a plain RMM pool of half the
    GPU's free memory that cuDF and CuPy allocate from. The workers' own resource is the
    plugin's (a pool with its statistics and task accounting on top); a benchmark that
    measures that resource installs it with ``dask_gpu_interop.memory.state.install``, as
    benchmarks/memory.py does."""
    from dask_gpu_interop.worker import gpu_workers

    os.environ.update({k: v for k, v in gpu_workers.settings().items() if k not in os.environ})
    if not pool:
        return
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    free = cupy.cuda.runtime.memGetInfo()[0]
    rmm.mr.set_current_device_resource(rmm.mr.PoolMemoryResource(
        rmm.mr.CudaMemoryResource(), initial_pool_size=free // 2 // 256 * 256))
    cupy.cuda.set_allocator(rmm_cupy_allocator)


def in_child(call: str, setup: str = "", env: dict | None = None,
             timeout: float | None = None):
    """The value of the Python expression ``call`` (something JSON holds), evaluated after
    ``setup`` in a fresh interpreter in the checkout's root (``from benchmarks import NAME`` or
    ``from benchmarks.examples import NAME`` there imports a script), with ``env`` added to
    this process's environment: its allocators, device memory and imports go with it. A
    RuntimeError whose first line is the child's last line of error output where it fails."""
    code = f"import json\n{setup}\nprint('RESULT ' + json.dumps({call}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not found:
        errors = done.stderr.strip().splitlines()
        last = errors[-1] if errors else f"exit {done.returncode}, no result"
        raise RuntimeError(f"{last}\n{call} failed (exit {done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(found[-1][len("RESULT "):])

"""What the benchmarks share: logging, the command line, results files, the machine."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time

from dask.utils import format_bytes


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


def commit() -> str:
    """The checkout's commit, short ("" outside a git checkout)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return _run(["git", "-C", root, "rev-parse", "--short", "HEAD"])


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

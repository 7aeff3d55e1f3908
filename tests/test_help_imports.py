"""``--help`` of every command answers at once: it imports no GPU library, no dask.dataframe,
pandas, pyarrow, XGBoost, PyTorch or JAX (seconds of imports, or libraries that may not be
there), only what the options need. Each command's ``--help`` runs in a fresh interpreter, which
then lists the heavy modules it holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEAVY = ["dask.dataframe", "pandas", "pyarrow", "xgboost", "torch", "jax", "cudf", "cupy", "rmm",
         "numba", "dask_cuda", "pylibcudf"]

# `python -m MODULE [SUBCOMMAND] --help`, then the heavy modules loaded, as the last line.
PROBE = """
import json, os, runpy, sys
def _exit(code):  # examples.command ends a command's process at once: here, report first
    raise SystemExit(code)
os._exit = _exit
heavy = json.loads(sys.argv[1])
module, *args = sys.argv[2:]
sys.argv = [module, *args, "--help"]
code = 0
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code or 0
print()
print(json.dumps({"code": code, "heavy": [m for m in heavy if m in sys.modules]}))
"""

COMMANDS = [
    "examples.mortgage",
    "examples.mortgage etl",
    "examples.mortgage generate",
    "examples.ecg",
    "examples.demo",
    "dask_gpu_interop.cli",
    "dask_gpu_interop.cli doctor",
    "dask_gpu_interop",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_imports_no_heavy_library(command):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), *command.split()],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    *shown, last = out.stdout.rstrip("\n").splitlines()
    result = json.loads(last)
    assert result["code"] == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Usage:" in "\n".join(shown), out.stdout[-3000:]  # the help itself was shown
    assert result["heavy"] == [], f"python -m {command} --help imported {result['heavy']}"

"""``python -m examples.demo`` on CPUs: bad options refused first, the job end to end."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from examples.demo.__main__ import demo as main

from .extras import requirements_of


def test_bad_memory_option_fails_before_anything_starts():
    result = CliRunner().invoke(main, ["--device", "cpu", "--pool-size", "-1GB"])
    assert result.exit_code == 2  # click's usage error, before any cluster starts
    assert "--pool-size '-1GB': a size must be more than zero" in result.output


def test_gpu_asked_on_a_machine_without_one():
    from dask_gpu_interop import device

    if device.gpu_count():
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(main, ["--device", "gpu"])
    assert result.exit_code == 2
    assert "no CUDA GPU is visible" in result.output


@pytest.mark.slow
def test_demo_runs_end_to_end_on_cpus():
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--device", "cpu", "--rows", "20000",
         "--workers", "2"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "train AUC" in out.stdout
    auc = float(out.stdout.split("train AUC")[1].split()[0])
    assert auc > 0.85
    assert out.stdout.count("no GPU: the plugin does nothing here") == 2
    assert "Warning" not in out.stderr, out.stderr[-2000:]  # PyTorch warned of read-only arrays
    assert "got rank" not in out.stdout + out.stderr  # XGBoost's lines for each worker


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="needs an environment without PyTorch (the [test] extra has none)")
def test_without_pytorch_the_demo_names_an_install_that_brings_it():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--device", "cpu", "--rows", "2000",
         "--workers", "1"],
        cwd=root, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    steps = next(line for line in out.stdout.splitlines() if line.startswith("steps:"))
    assert "DataFrame -> XGBoost (" in steps
    extras = re.findall(r"pip install 'dask-gpu-interop\[([^\]]+)\]'", steps)
    assert extras, steps
    for extra in extras:
        assert "torch" in requirements_of(extra), f"[{extra}] brings no PyTorch: {steps}"
    # A plain `torch` requirement pulls the CUDA build: without a GPU, the CPU build first.
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in steps


def test_the_requirements_reader_follows_the_extras():
    assert "torch" in requirements_of("ecg")
    assert "torch" not in requirements_of("examples")
    assert "xgboost" in requirements_of("ecg")  # through [examples]

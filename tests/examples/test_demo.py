"""``python -m examples.demo`` on CPUs: bad options refused first, the job end to end."""

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from examples.demo.__main__ import demo as main


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

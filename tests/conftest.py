"""Shared test setup: GPU tests are skipped where there is no GPU (CI has none); a process
that holds the mortgage reader's host read lock."""

from __future__ import annotations

import importlib.util

import pytest

from dask_gpu_interop import device


def _gpu_ready() -> tuple[bool, str]:
    if device.gpu_count() == 0:
        return False, "no CUDA GPU visible"
    if importlib.util.find_spec("rmm") is None:
        return False, "RMM is not installed"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ready, why = _gpu_ready()
    count = device.gpu_count() if ready else 0
    for item in items:
        if "gpu" in item.keywords and not ready:
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {why}"))
        elif "multi_gpu" in item.keywords and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs, {count} visible"))


def needs(module: str):
    """Skip unless ``module`` can be imported (for optional frameworks)."""
    return pytest.mark.skipif(
        importlib.util.find_spec(module.split(".")[0]) is None, reason=f"{module} not installed"
    )


HOLD_THE_LOCK = """
import os, sys, tempfile, time
tempfile.tempdir = sys.argv[1]
from dask_gpu_interop.pipelines.mortgage import chunk_bytes
with chunk_bytes.host_read_lock():
    open(os.path.join(sys.argv[1], "held"), "w").close()
    while not os.path.exists(os.path.join(sys.argv[1], "release")):
        time.sleep(0.01)
"""


@pytest.fixture()
def another_process_holds_the_lock(tmp_path, monkeypatch):
    """Another process (as another GPU worker of the host would) holding the read lock until
    ``release()``; this process's temporary directory is the same."""
    import subprocess
    import sys
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)])
    deadline = time.monotonic() + 60
    while not (tmp_path / "held").exists():
        assert child.poll() is None and time.monotonic() < deadline, "the holder did not start"
        time.sleep(0.01)

    def release():
        (tmp_path / "release").touch()
        child.wait(timeout=60)

    yield release
    release()

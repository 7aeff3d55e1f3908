"""gpu_count: NVML's list read as CUDA reads CUDA_VISIBLE_DEVICES, CUDA's runtime where NVML
cannot say (a fake NVML and a fake runtime: no GPU needed)."""

from __future__ import annotations

import sys
import types

import pytest

from dask_gpu_interop import device

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-cccc3333-0000", "GPU-aaaa4444-0000"]


class NVMLError(Exception):
    pass


def fake_nvml(uuids=UUIDS, mig=(), fails=False):
    """A pynvml with ``uuids`` as its devices, MIG mode on for the indices in ``mig``."""
    calls = []

    def init():
        calls.append("init")
        if fails:
            raise NVMLError("driver not loaded")

    def mig_mode(handle):
        if handle in mig:
            return (1, 1)
        raise NVMLError("not supported")

    module = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=init,
        nvmlDeviceGetCount=lambda: len(uuids),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetUUID=lambda i: uuids[i].encode(),
    )
    return module, calls


@pytest.fixture
def runtime(monkeypatch):
    """A fake CUDA runtime that lists 7 devices and records that it was asked."""
    asked = []

    class Error:
        cudaSuccess = 0

    def count():
        asked.append(True)
        return 0, 7

    module = types.SimpleNamespace(cudaGetDeviceCount=count, cudaError_t=Error)
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = module
    cuda = types.ModuleType("cuda")
    cuda.bindings = bindings
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", module)
    return asked


@pytest.mark.parametrize("visible, expected", [
    (None, 4),                      # unset: every device
    ("1,3", 2),
    ("3", 1),
    ("0,7,1", 1),                   # CUDA stops at the first entry that names no device
    ("-1", 0),
    ("2,2", 1),                     # a device named twice ends the list there
    ("GPU-bbbb2222-0000,0", 2),     # a whole UUID
    ("GPU-cccc", 1),                # a UUID's start that names one device
    ("GPU-aaaa", 0),                # ... and one that names two: none
])
def test_counts_as_cuda_reads_visible_devices(monkeypatch, runtime, visible, expected):
    nvml, _ = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert device.gpu_count() == expected
    assert not runtime  # CUDA's runtime (which initializes its driver) was not asked


@pytest.mark.parametrize("case", ["mig mode", "mig entry", "other entry", "nvml fails",
                                  "no nvml"])
def test_asks_cuda_where_nvml_cannot_say(monkeypatch, runtime, case):
    nvml, _ = fake_nvml(mig=(1,) if case == "mig mode" else (), fails=case == "nvml fails")
    monkeypatch.setitem(sys.modules, "pynvml", None if case == "no nvml" else nvml)
    visible = {"mig entry": "0,MIG-1234", "other entry": "bbbb2222"}.get(case, "0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert device.gpu_count() == 7
    assert runtime == [True]


def test_hidden_gpus_ask_nothing(monkeypatch, runtime):
    nvml, calls = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device.gpu_count() == 0
    assert not calls and not runtime

"""``dask-gpu-interop doctor`` on CPUs: the machine and every worker, a verdict per line, the
rules for combinations known to break, and a failing check failing the command."""

import json

import dask
import pytest
from click.testing import CliRunner
from distributed import LocalCluster

from dask_gpu_interop import doctor
from dask_gpu_interop.cli import main


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as c:
        yield c


def test_this_machine_one_line_per_item():
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "this machine"
    items = {line.split()[1] for line in lines[1:-1]}
    assert {"host", "packages", "UCX"} <= items
    assert all(line.split()[0] in ("ok", "warn", "fail", "info") for line in lines[1:-1])
    assert lines[-1].endswith("to check")
    assert "dask " in result.output and "distributed " in result.output  # versions listed


def test_every_worker_of_a_cluster_is_checked(cluster):
    result = CliRunner().invoke(main, ["doctor", "--scheduler", cluster.scheduler_address,
                                       "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert set(found) == {"this machine", *cluster.scheduler_info["workers"]}
    for items in found.values():
        assert any(item["item"] == "memory" and "no GPU" in item["detail"] for item in items)


def test_known_bad_combinations():
    bad = doctor.known_bad({"numba-cuda": "0.30.4", "numpy": "2.5.2"})
    assert [c.item for c in bad] == ["numba-cuda + NumPy"]
    assert bad[0].verdict == doctor.FAIL and "numpy<2.5" in bad[0].fix
    assert doctor.known_bad({"numba-cuda": "0.30.4", "numpy": "2.4.6"}) == []
    assert doctor.known_bad({"numba-cuda": "0.31.0", "numpy": "2.5.2"}) == []
    pins = doctor.known_bad({"dask-cuda": "26.10.0", "distributed": "2026.8.0"})
    assert pins and pins[0].verdict == doctor.WARN and "2026.7.1" in pins[0].fix


def test_a_failing_check_fails_the_command():
    with dask.config.set({"distributed-ucxx.rmm.pool-size": "10GB"}):
        result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1
    assert "fail  RMM owners" in result.output and "GPUMemoryPlugin(pool_size=...)" in result.output
    assert "1 to fix" in result.output


class FakeNVML:
    """Two H200s, the first with 18 NVLink links up, as NVML would describe them."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        from types import SimpleNamespace

        return SimpleNamespace(total=141 * 2**30, free=139 * 2**30)

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H200"

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if handle == 1:
            raise self.NVMLError("not supported")
        return 1


def test_gpus_driver_and_the_missing_gpu_stack_from_nvml(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", FakeNVML())
    found = {c["item"]: c for c in doctor.checks()}
    assert found["driver"]["detail"] == "580.159.04, CUDA 13.0"
    assert found["GPU 0"]["detail"] == ("NVIDIA H200, 141 GiB, 139 GiB free, 18 NVLink links up")
    assert found["GPU 1"]["detail"].endswith("0 NVLink links up")
    if doctor.version("rmm") is None:  # this machine: no GPU stack installed
        assert found["GPU stack"]["verdict"] == doctor.FAIL
        assert "dask-gpu-interop[cuda13]" in found["GPU stack"]["fix"]
    assert found["memory: xgboost"]["verdict"] == doctor.INFO  # shares in async mode only


def test_the_nvml_calls_exist_in_the_installed_nvidia_ml_py():
    pynvml = pytest.importorskip("pynvml")
    assert [name for name in doctor.NVML_CALLS if not hasattr(pynvml, name)] == []

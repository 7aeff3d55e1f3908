"""``dask-gpu-interop doctor`` on CPUs: the machine and every worker, a verdict per line, the
rules for combinations known to break, GPU libraries that are installed but do not load, each
worker's memory plugin, and a failing check failing the command."""

import json
import sys
from types import SimpleNamespace

import dask
import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu_interop import GPUMemoryPlugin, doctor
from dask_gpu_interop.cli import main
from dask_gpu_interop.memory import state


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


def test_every_worker_of_a_cluster_is_checked(cpu_cluster):
    result = CliRunner().invoke(main, ["doctor", "--scheduler", cpu_cluster.scheduler_address,
                                       "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert set(found) == {"this machine", *cpu_cluster.scheduler_info["workers"]}
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
    """Two GPUs, the first with 18 NVLink links up, as NVML would describe them."""

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
        return SimpleNamespace(total=141 * 2**30, free=139 * 2**30)

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA Test GPU"

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if handle == 1:
            raise self.NVMLError("not supported")
        return 1


def test_gpus_driver_and_the_missing_gpu_stack_from_nvml(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", FakeNVML())
    found = {c["item"]: c for c in doctor.checks()}
    assert found["driver"]["detail"] == "580.159.04, CUDA 13.0"
    assert found["GPU 0"]["detail"] == "NVIDIA Test GPU, 141 GiB, 139 GiB free, 18 NVLink links up"
    assert found["GPU 1"]["detail"].endswith("0 NVLink links up")
    if doctor.version("rmm") is None:  # this machine: no GPU stack installed
        assert found["GPU stack"]["verdict"] == doctor.FAIL
        assert "dask-gpu-interop[cuda13]" in found["GPU stack"]["fix"]
    assert found["memory: xgboost"]["verdict"] == doctor.INFO  # shares in async mode only


def test_the_nvml_calls_exist_in_the_installed_nvidia_ml_py():
    pynvml = pytest.importorskip("pynvml")
    assert [name for name in doctor.NVML_CALLS if not hasattr(pynvml, name)] == []


BROKEN_CUDF = ('raise ImportError("libcudf.so: cannot open shared object file: '
               'No such file or directory")\n')


def install_fake(root, dist, module, body=""):
    """A package ``module`` that metadata says ``dist`` installed, importing as ``body`` does."""
    (root / module).mkdir()
    (root / module / "__init__.py").write_text(body)
    info = root / f"{dist.replace('-', '_')}-25.10.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 25.10.0\n")


def test_an_installed_gpu_library_that_does_not_load_fails_with_its_error_and_the_fix(
        tmp_path, monkeypatch):
    install_fake(tmp_path, "cudf-cu13", "cudf", BROKEN_CUDF)
    install_fake(tmp_path, "cupy-cuda13x", "cupy")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 1, result.output
    failed = [line for line in result.output.splitlines() if line.startswith("  fail")]
    assert len(failed) == 1, result.output
    assert "import cudf" in failed[0]
    assert "ImportError: libcudf.so: cannot open shared object file" in failed[0]
    assert "pip install --force-reinstall 'dask-gpu-interop[cuda13]' or '[cuda12]'" in failed[0]
    assert "cupy" in next(line for line in result.output.splitlines() if "ok    imports" in line)
    assert "1 to fix" in result.output


def test_installed_gpu_libraries_that_load_give_no_fail_and_stay_out_of_this_process(
        tmp_path, monkeypatch):
    install_fake(tmp_path, "cupy-cuda13x", "cupy")
    install_fake(tmp_path, "rmm-cu13", "rmm")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "fail" not in result.output and "0 to fix" in result.output
    assert "ok    imports                rmm, cupy" in result.output
    assert "rmm" not in sys.modules and "cupy" not in sys.modules  # imported by a child only


def test_the_fix_names_the_wheels_for_the_drivers_cuda(tmp_path, monkeypatch):
    install_fake(tmp_path, "cudf-cu13", "cudf", BROKEN_CUDF)
    install_fake(tmp_path, "torch", "torch", 'raise OSError("libcudnn.so.9: cannot open")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML())  # a driver for CUDA 13.0
    found = {c["item"]: c for c in doctor.checks()}
    assert found["import cudf"]["fix"] == (
        "pip install --force-reinstall 'dask-gpu-interop[cuda13]' (the driver's CUDA)")
    assert found["import torch"]["detail"] == "OSError: libcudnn.so.9: cannot open"
    assert found["import torch"]["fix"] == "reinstall torch built for CUDA 13"


def test_an_import_that_crashes_or_hangs_is_reported_and_the_rest_still_checked(
        tmp_path, monkeypatch):
    (tmp_path / "crashes.py").write_text("import os, signal\n"
                                         "os.kill(os.getpid(), signal.SIGSEGV)\n")
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(60)\n")
    (tmp_path / "loads.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = doctor.import_errors(["crashes", "hangs", "loads"], timeout=3)
    assert found == {"crashes": "Python ended while importing it (SIGSEGV)",
                     "hangs": "the import did not finish within 3 s", "loads": None}


def plugin_lines(cluster) -> list[str]:
    result = CliRunner().invoke(main, ["doctor", "--scheduler", cluster.scheduler_address])
    return [line for line in result.output.splitlines() if "memory plugin" in line]


def test_each_worker_says_whether_the_memory_plugin_is_registered_and_its_mode(cpu_cluster):
    assert plugin_lines(cpu_cluster) == [
        "  info  memory plugin          not registered; no GPU here: "
        "the plugin would leave this worker alone"] * 2
    plugin = GPUMemoryPlugin(async_alloc=True, release_threshold="1GB")
    with Client(cpu_cluster) as client:
        client.register_plugin(plugin)
        try:
            lines = plugin_lines(cpu_cluster)
        finally:
            client.unregister_worker_plugin(plugin.name)
    assert lines == ["  info  memory plugin          registered, async mode (CUDA async pool); "
                     "no GPU here: it leaves this worker alone"] * 2


def test_a_gpu_worker_says_how_its_memory_is_set_up_or_how_to_set_it_up(monkeypatch):
    monkeypatch.setattr("dask_gpu_interop.device.gpu_count", lambda: 1)
    worker = SimpleNamespace(plugins={})
    missing = doctor.plugin_check(worker)
    assert missing.verdict == doctor.WARN and "--preload dask_gpu_interop.preload" in missing.fix
    plan = SimpleNamespace(release_threshold=10 * 2**30, initial=None, maximum=None)
    active = SimpleNamespace(mode="async", owner="gpu-interop-memory-1", plan=plan)
    monkeypatch.setattr(state, "active", lambda: active)
    assert doctor.plugin_check(worker).line() == (
        "  ok    memory plugin          set up, async mode (CUDA async pool), release threshold "
        "10.00 GiB")
    active.mode, plan.initial, plan.maximum = "pool", 2**30, None
    assert doctor.plugin_check(worker).detail == (
        "set up, pool mode (RMM pool), pool 1.00 GiB up to the device")


def _package(root, name: str):
    """A package of two modules under ``root``, importable, never imported."""
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("VALUE = 1\n")
    (folder / "part.py").write_text("PART = 2\n")
    return folder


def test_packages_without_bytecode_are_found_without_importing_them(tmp_path, monkeypatch):
    import compileall
    import importlib

    monkeypatch.syspath_prepend(str(tmp_path))
    folder = _package(tmp_path, "bytecode_probe_pkg")
    importlib.invalidate_caches()
    assert doctor.without_bytecode(("bytecode_probe_pkg", "no_such_package_here")) == {
        "bytecode_probe_pkg": str(folder)}
    assert "bytecode_probe_pkg" not in sys.modules
    assert compileall.compile_dir(str(folder), quiet=1)
    assert doctor.without_bytecode(("bytecode_probe_pkg",)) == {}


def test_no_bytecode_where_python_may_not_write_it_warns_with_the_fix_that_works(
        tmp_path, monkeypatch):
    import importlib
    import subprocess

    monkeypatch.syspath_prepend(str(tmp_path))
    _package(tmp_path, "bytecode_probe_pkg2")
    importlib.invalidate_caches()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    [written] = doctor._bytecode_check(("bytecode_probe_pkg2",))
    assert written.verdict == doctor.INFO and "first process" in written.detail
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    [check] = doctor._bytecode_check(("bytecode_probe_pkg2",))
    assert check.verdict == doctor.WARN and "bytecode_probe_pkg2" in check.detail
    assert "PYTHONDONTWRITEBYTECODE" in check.detail
    command = check.fix.split(" (")[0].split()
    assert command[:3] == ["python", "-m", "compileall"] and command[-1] == str(tmp_path)
    subprocess.run([sys.executable, *command[1:]], check=True)
    assert doctor._bytecode_check(("bytecode_probe_pkg2",)) == []

"""The library's command line on CPUs: the memory report of a running cluster, the options, and
help that loads no GPU or dataframe library."""

import json
import subprocess
import sys

from click.testing import CliRunner

from dask_gpu_interop import cluster_workers
from dask_gpu_interop.cli import main


def test_report_of_a_running_cluster(cpu_cluster):
    result = CliRunner().invoke(main, ["report", "--scheduler", cpu_cluster.scheduler_address])
    assert result.exit_code == 0, result.output
    assert result.output.count("no GPU: the plugin does nothing here") == 2


def test_report_json(cpu_cluster, cpu_client):
    result = CliRunner().invoke(
        main, ["report", "--scheduler", cpu_cluster.scheduler_address, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == set(cluster_workers(cpu_client))
    assert {snap["status"] for snap in data.values()} == {"no-gpu"}


def test_report_needs_a_scheduler():
    result = CliRunner().invoke(main, ["report"])
    assert result.exit_code != 0 and "--scheduler" in result.output


def test_config_prints_every_memory_option_with_its_default():
    import yaml

    from dask_gpu_interop.memory.config import OPTIONS

    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)["gpu-interop"]["memory"]
    assert printed == {spec.key: spec.plain_default for spec in OPTIONS}


def test_the_library_command_has_no_example_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("mortgage", "ecg", "demo"):
        assert f"  {name} " not in result.output


# What no command's --help may load: GPU libraries, and the slow dataframe and ML stacks.
NOT_FOR_HELP = ("dask.dataframe", "pandas", "pyarrow", "xgboost", "torch", "jax", "cudf", "cupy",
                "rmm", "numba", "dask_cuda", "cuda")


def test_help_of_every_command_imports_no_gpu_or_dataframe_library():
    commands = [[], *([name] for name in main.commands),
                *(["tls", name] for name in main.commands["tls"].commands)]
    code = f"""
import json, runpy, sys
for args in {commands!r}:
    sys.argv = ["dask-gpu-interop", *args, "--help"]
    try:
        runpy.run_module("dask_gpu_interop.cli", run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (0, None), (args, stop.code)
print(json.dumps(sorted(m for m in sys.modules
                        if any(m == n or m.startswith(n + ".") for n in {NOT_FOR_HELP!r}))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Usage: python -m dask_gpu_interop.cli doctor [OPTIONS]" in out.stdout
    assert json.loads(out.stdout.splitlines()[-1]) == []

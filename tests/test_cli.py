"""The library's command line on CPUs: the memory report of a running cluster, the options."""

import json

import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster

from dask_gpu_interop.cli import main


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as c:
        yield c


def test_report_of_a_running_cluster(cluster):
    result = CliRunner().invoke(main, ["report", "--scheduler", cluster.scheduler_address])
    assert result.exit_code == 0, result.output
    assert result.output.count("no GPU: the plugin does nothing here") == 2


def test_report_json(cluster):
    result = CliRunner().invoke(main, ["report", "--scheduler", cluster.scheduler_address, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    with Client(cluster) as client:
        assert set(data) == set(client.scheduler_info()["workers"])
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

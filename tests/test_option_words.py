"""A bad option is named as the user set it: the keyword, the command's flag, the preload's
flag, the dask config key or the environment variable; options that cannot go together are
each named where they were set."""

from __future__ import annotations

import click
import dask
import pytest
from click.testing import CliRunner

from dask_gpu_interop import GPUMemoryPlugin, MemoryConfig
from dask_gpu_interop.cluster import checks
from dask_gpu_interop.cluster.options import cluster_options
from dask_gpu_interop.memory.errors import (
    CONFIG,
    DEFAULT,
    ENVIRONMENT,
    GIVEN,
    OptionError,
    OptionTypeError,
)

POOL_SIZE_VARIABLE = "DASK_GPU_INTEROP__MEMORY__POOL_SIZE"


@pytest.fixture
def environment(monkeypatch):
    """Set ``DASK_*`` variables as a process sees them when it starts: dask reads them when
    it loads its config, so it loads it again here (and once more at the end, without them)."""

    def set_variables(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        dask.config.refresh()

    yield set_variables
    monkeypatch.undo()
    dask.config.refresh()


@click.command()
@cluster_options
def command(cluster):
    click.echo(f"memory={cluster['memory']}")


def run(*args) -> click.testing.Result:
    return CliRunner().invoke(command, ["--device", "cpu", *args])


def error_of(**options) -> OptionError:
    with pytest.raises(OptionError) as info:
        MemoryConfig.from_options(**options)
    return info.value


# --- where the value came from -------------------------------------------------------------


def test_a_keyword_is_named_as_the_keyword():
    err = error_of(pool_size="banana")
    assert (err.option, err.value, err.source) == ("pool_size", "banana", GIVEN)
    assert str(err).startswith("pool_size='banana': not a size; use bytes")
    with pytest.raises(OptionError, match=r"^pool_size='banana': not a size"):
        GPUMemoryPlugin(pool_size="banana")


def test_a_wrong_type_is_a_type_error_too():
    with pytest.raises(OptionTypeError) as info:
        MemoryConfig.from_options(managed="yes")
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert str(info.value) == "managed='yes': expected True or False"


def test_a_dask_config_key_is_named_as_the_key():
    with dask.config.set({"gpu-interop.memory.pool-size": "banana"}):
        err = error_of()
    assert (err.option, err.value, err.source) == ("pool_size", "banana", CONFIG)
    for flags in (None, "", "gpu-"):
        message = err.message(flags=flags)
        assert message.startswith("dask config gpu-interop.memory.pool-size='banana': not a size")
        assert "pool_size" not in message and "--" not in message


def test_an_environment_variable_is_named_as_the_variable(environment):
    environment(**{POOL_SIZE_VARIABLE: "banana"})
    err = error_of()
    assert (err.source, err.settings[0].variable) == (ENVIRONMENT, POOL_SIZE_VARIABLE)
    for flags in (None, "", "gpu-"):
        message = err.message(flags=flags)
        assert message.startswith(f"{POOL_SIZE_VARIABLE}=banana: not a size")
        assert "pool_size" not in message and "--" not in message


def test_an_environment_variable_overridden_in_dask_config_is_not_blamed(environment):
    environment(**{POOL_SIZE_VARIABLE: "0.8"})
    with dask.config.set({"gpu-interop.memory.pool-size": "banana"}):
        message = str(error_of())
    assert message.startswith("dask config gpu-interop.memory.pool-size='banana'")
    assert POOL_SIZE_VARIABLE not in message


def test_options_nobody_set_are_named_in_the_callers_words():
    err = error_of(release_threshold="1GB")
    assert [s.source for s in err.settings] == [GIVEN, DEFAULT]
    assert str(err) == ("release_threshold applies only to the CUDA async pool: pass "
                        "async_alloc=True with it, or drop release_threshold.")
    assert err.message(flags="") == ("--release-threshold applies only to the CUDA async pool: "
                                      "pass --async-alloc with it, or drop --release-threshold.")


def test_options_from_two_places_are_each_named_where_they_were_set(environment):
    environment(DASK_GPU_INTEROP__MEMORY__MANAGED="True")
    err = error_of(async_alloc=True)
    assert err.message().startswith(
        "DASK_GPU_INTEROP__MEMORY__MANAGED=True and async_alloc=True cannot be combined")
    assert err.message(flags="").startswith(
        "DASK_GPU_INTEROP__MEMORY__MANAGED=True and --async-alloc cannot be combined")


# --- the command line: cluster_options ------------------------------------------------------


def test_a_flag_is_named_as_the_flag():
    result = run("--pool-size", "banana")
    assert result.exit_code == 2
    assert "Error: --pool-size 'banana': not a size; use bytes" in result.output
    assert "pool_size" not in result.output


def test_an_environment_variable_is_not_reported_as_a_flag(environment):
    environment(**{POOL_SIZE_VARIABLE: "banana"})
    result = run()
    assert result.exit_code == 2
    assert f"Error: {POOL_SIZE_VARIABLE}=banana: not a size" in result.output
    assert "--pool-size" not in result.output.split("Error:")[1]


def test_a_dask_config_key_is_not_reported_as_a_flag():
    with dask.config.set({"gpu-interop.memory.pool-size": "banana"}):
        result = run()
    assert result.exit_code == 2
    assert "Error: dask config gpu-interop.memory.pool-size='banana': not a size" in result.output


def test_a_flag_and_an_environment_variable_that_cannot_go_together(environment):
    environment(DASK_GPU_INTEROP__MEMORY__MANAGED="True")
    result = run("--async-alloc")
    assert result.exit_code == 2
    assert ("Error: DASK_GPU_INTEROP__MEMORY__MANAGED=True and --async-alloc cannot be combined"
            in result.output)


def test_two_flags_that_cannot_go_together():
    result = run("--no-pool", "--pool-size", "8GB")
    assert result.exit_code == 2
    assert ("Error: --no-pool (cudaMalloc for every buffer) cannot be combined with "
            "--pool-size: drop --no-pool, or drop --pool-size." in result.output)


def test_good_flags_reach_the_command(environment):
    environment(**{POOL_SIZE_VARIABLE: "0.8"})
    result = run("--managed")
    assert result.exit_code == 0, result.output
    assert "memory={'managed': True}" in result.output


# --- the cluster's own options ----------------------------------------------------------------


def test_the_clusters_options_are_named_as_flags_on_the_command_line():
    result = run("--protocol", "ucx")
    assert result.exit_code == 2
    assert ("Error: --protocol 'ucx' is for GPU clusters (distributed-ucxx): use --protocol "
            "'tcp' on CPUs" in result.output)


def test_the_clusters_options_are_named_as_keywords_in_python(monkeypatch):
    monkeypatch.setattr(checks.device_mod, "gpu_count", lambda: 0)
    with pytest.raises(checks.ClusterError) as info:
        checks.check_local("gpu")
    assert str(info.value) == ("device='gpu' but no CUDA GPU is visible here (check nvidia-smi "
                               "and CUDA_VISIBLE_DEVICES), or use device='cpu'")
    assert info.value.message(flags="").startswith("--device 'gpu' but no CUDA GPU")
    assert info.value.message(flags="").endswith("or use --device 'cpu'")

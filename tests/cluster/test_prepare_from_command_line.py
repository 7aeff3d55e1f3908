"""dask_gpu_interop.cluster.options.prepare_from_command_line: the local cluster that a command
line of cluster_options asks for is prepared from the line itself, before the command parses
it."""

from __future__ import annotations

import pytest

from dask_gpu_interop.cluster import local, options


@pytest.fixture
def prepared(monkeypatch):
    asked = []
    monkeypatch.setattr(local, "prepare_local_cluster",
                        lambda **given: asked.append(given) or True)
    return asked


@pytest.mark.parametrize("args, given", [
    ([], {}),
    (["--device", "gpu", "--protocol", "ucx"], {"device": "gpu", "protocol": "ucx"}),
    (["etl", "--protocol=ucx", "--workers", "2", "--data", "d"],
     {"protocol": "ucx", "n_workers": 2}),  # a sub-command's options, and --flag=value
    (["--no-processes", "--scheduler", "tcp://h:8786"],
     {"processes": False, "scheduler": "tcp://h:8786"}),
    (["--processes", "--", "--protocol", "ucx"], {"processes": True}),  # nothing after --
])
def test_the_cluster_flags_are_read_from_the_line(prepared, args, given):
    assert options.prepare_from_command_line(args) is True
    assert prepared == [given]


@pytest.mark.parametrize("args", [
    ["--protocol", "ucx", "--help"],
    ["-h"],
    ["--protocol", "carrier-pigeon"],  # the command's parsing says what is wrong
    ["--device", "tpu"],
    ["--workers", "0"],
    ["--workers", "two"],
    ["--protocol"],  # no value
])
def test_nothing_is_prepared_for_help_or_a_line_the_command_would_refuse(prepared, args):
    assert options.prepare_from_command_line(args) is False
    assert prepared == []


def test_the_processs_own_arguments_are_read_by_default(prepared, monkeypatch):
    monkeypatch.setattr("sys.argv", ["prog", "--protocol", "ucx"])
    options.prepare_from_command_line()
    assert prepared == [{"protocol": "ucx"}]

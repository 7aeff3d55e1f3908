"""Fixtures the examples' tests share."""

import pytest


@pytest.fixture(scope="module")
def running(cpu_cluster):
    """The flags that point a command at the running CPU cluster (tests/conftest.py)."""
    return ["--device", "cpu", "--scheduler", cpu_cluster.scheduler_address]

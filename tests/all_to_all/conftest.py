"""The running CPU cluster the shuffle's tests share: tests/conftest.py's, one per test module,
by the name these tests use."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client(cpu_client):
    return cpu_client

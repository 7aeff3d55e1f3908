"""The cluster the shuffle's tests on CPU workers share: two worker processes of one thread, a
cluster per test module."""

from __future__ import annotations

import pytest

from .helpers import cpu_client


@pytest.fixture(scope="module")
def client():
    with cpu_client(2) as client:
        yield client

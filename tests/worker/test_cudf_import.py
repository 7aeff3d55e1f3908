"""A dask-cuda worker's cuDF import beside its start: dask-cuda's CUDFSetup plugin (a stand-in
shaped as dask-cuda's) is taken out of a starting worker's plugins, its options (or the memory
plugin's spilling, where it sets one) go to the environment variables cuDF reads at import,
and cuDF's import starts in the background; where cuDF is imported already, not installed, or
the plugin is not there, nothing changes."""

from __future__ import annotations

import asyncio
import os
import sys
import types

import pytest

from dask_gpu_interop.worker import cudf_import


class CUDFSetup:
    """``dask_cuda.plugins.CUDFSetup``: its constructor, and a setup that says it ran (the real
    one imports cuDF)."""

    ran: list = []

    def __init__(self, spill, spill_stats):
        self.spill = spill
        self.spill_stats = spill_stats

    def setup(self, worker=None):
        CUDFSetup.ran.append((self.spill, self.spill_stats))


CUDFSetup.__module__ = "dask_cuda.plugins"


class Other:
    """Another plugin given at the worker's creation (dask-cuda's RMM setup, say)."""


VARIABLES = ("CUDF_SPILL", "CUDF_SPILL_STATS")


@pytest.fixture
def imports(monkeypatch):
    """cuDF installed and not imported; the background imports asked for, recorded; cuDF's
    variables unset, and as they were again afterwards (whatever the code under test set)."""
    asked = []
    monkeypatch.setattr(cudf_import, "is_installed", lambda name: True)
    monkeypatch.setattr(cudf_import, "import_in_background", lambda *m: asked.append(m))
    monkeypatch.delitem(sys.modules, "cudf", raising=False)
    before = {name: os.environ.pop(name, None) for name in VARIABLES}
    yield asked
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.mark.parametrize("spill, stats, ours, words", [
    (False, 0, None, ("off", "0")),
    (True, 2, None, ("on", "2")),
    (False, 1, True, ("on", "1")),  # the memory plugin's spilling wins, as it did after dask-cuda
    (True, 0, False, ("off", "0")),
])
def test_the_plugins_options_go_to_cudfs_variables_and_the_import_starts(imports, spill, stats,
                                                                          ours, words):
    other = Other()
    worker = types.SimpleNamespace(_pending_plugins={other, CUDFSetup(spill, stats)})
    assert cudf_import.import_beside_start(worker, spill=ours) is True
    assert (cudf_import.os.environ["CUDF_SPILL"],
            cudf_import.os.environ["CUDF_SPILL_STATS"]) == words
    assert worker._pending_plugins == (other,)
    assert imports == [("cudf",)]


@pytest.mark.parametrize("case", ["cudf imported", "cudf not installed", "no plugin",
                                  "another plugin of that name"])
def test_nothing_changes_where_the_plugin_would_not_import_cudf(imports, monkeypatch, case):
    plugins = (Other(), CUDFSetup(True, 1))
    if case == "cudf imported":
        monkeypatch.setitem(sys.modules, "cudf", types.ModuleType("cudf"))
    elif case == "cudf not installed":
        monkeypatch.setattr(cudf_import, "is_installed", lambda name: False)
    elif case == "no plugin":
        plugins = plugins[:1]
    else:  # dask-cuda's class changed: its options are not where this module reads them
        del plugins[1].spill_stats
    worker = types.SimpleNamespace(_pending_plugins=plugins)
    assert cudf_import.import_beside_start(worker) is False
    assert worker._pending_plugins == plugins
    assert "CUDF_SPILL" not in cudf_import.os.environ
    assert imports == []


def test_a_worker_started_with_the_preload_does_not_set_the_plugin_up(imports):
    """A real worker, given the plugin at its creation as dask-cuda gives it, and the library's
    preload: it starts, and the plugin's setup (which would import cuDF) never runs."""
    from distributed import Scheduler, Worker

    CUDFSetup.ran.clear()

    async def start():
        async with Scheduler(dashboard_address=":0") as scheduler:
            async with Worker(scheduler.address, dashboard_address=":0",
                              preload=["dask_gpu_interop.preload"],
                              plugins={CUDFSetup(False, 0)}) as worker:
                return sorted(worker.plugins)

    names = asyncio.run(start())
    assert CUDFSetup.ran == []
    assert not any(name.startswith("CUDFSetup") for name in names)
    assert imports == [("cudf",)]
    assert cudf_import.os.environ["CUDF_SPILL"] == "off"

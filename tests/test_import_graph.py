"""The library's modules import each other without a circle: read from the source, imports
inside functions included (one there still closes a circle when the function runs)."""

from __future__ import annotations

import pathlib

from .import_graph import circles, import_graph

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "dask_gpu_interop"


def test_the_import_graph_is_read():
    graph = import_graph(PACKAGE)
    assert "dask_gpu_interop.memory.config" in graph["dask_gpu_interop.cluster.options"]
    assert "dask_gpu_interop.compat" in graph["dask_gpu_interop.memory.plugin"]  # from .. import
    # an import in a function
    assert "dask_gpu_interop.memory.timeline" in graph["dask_gpu_interop.cluster.session"]
    assert "dask_gpu_interop" not in graph["dask_gpu_interop.memory.plugin"]


def test_no_module_imports_itself_through_others():
    graph = import_graph(PACKAGE)
    assert circles(graph) == []


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]


def test_the_frameworks_import_nothing_of_memory():
    """``frameworks/`` binds each framework with what ``memory/`` passes in (the worker's
    state, its stack), so that the memory package builds on it and not the other way."""
    graph = import_graph(PACKAGE)
    back = {name: sorted(t for t in targets if t.startswith("dask_gpu_interop.memory"))
            for name, targets in graph.items() if name.startswith("dask_gpu_interop.frameworks")}
    assert len(back) == 7  # the package and its six frameworks
    assert not {name: found for name, found in back.items() if found}


def test_the_memory_package_imports_no_start_up_code():
    """``memory/`` holds the plugin, its configuration and the RMM stack: the worker start-up
    (``worker/``) and the client side (``cluster/``) build on it, never the other way."""
    graph = import_graph(PACKAGE)
    up = ("dask_gpu_interop.worker", "dask_gpu_interop.cluster", "dask_gpu_interop.preload")
    back = {name: sorted(t for t in targets if t.startswith(up))
            for name, targets in graph.items() if name.startswith("dask_gpu_interop.memory")}
    assert "dask_gpu_interop.memory.plugin" in back
    assert not {name: found for name, found in back.items() if found}

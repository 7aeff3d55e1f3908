"""The library's modules import each other without a circle: read from the source, imports
inside functions included (one there still closes a circle when the function runs)."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "dask_gpu_interop"


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The library's modules that ``module`` imports, leaving out its own packages (Python
    imports those first anyway)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
    ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    return {t for t in targets if t in known and t != module and t not in ancestors}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle once, from its alphabetically first module."""
    found = []

    def walk(start, node, path):
        for nxt in sorted(graph[node]):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def test_the_import_graph_is_read():
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    assert "dask_gpu_interop.memory.config" in graph["dask_gpu_interop.cluster.options"]
    assert "dask_gpu_interop.compat" in graph["dask_gpu_interop.memory.plugin"]  # from .. import
    # an import in a function
    assert "dask_gpu_interop.memory.timeline" in graph["dask_gpu_interop.cluster.session"]
    assert "dask_gpu_interop" not in graph["dask_gpu_interop.memory.plugin"]


def test_no_module_imports_itself_through_others():
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    assert circles(graph) == []


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]


def test_the_frameworks_import_nothing_of_memory():
    """``frameworks/`` binds each framework with what ``memory/`` passes in (the worker's
    state, its stack), so that the memory package builds on it and not the other way."""
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    back = {name: sorted(t for t in targets if t.startswith("dask_gpu_interop.memory"))
            for name, targets in graph.items() if name.startswith("dask_gpu_interop.frameworks")}
    assert len(back) == 7  # the package and its six frameworks
    assert not {name: found for name, found in back.items() if found}


def test_the_memory_package_imports_no_start_up_code():
    """``memory/`` holds the plugin, its configuration and the RMM stack: the worker start-up
    (``worker/``) and the client side (``cluster/``) build on it, never the other way."""
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    up = ("dask_gpu_interop.worker", "dask_gpu_interop.cluster", "dask_gpu_interop.preload")
    back = {name: sorted(t for t in targets if t.startswith(up))
            for name, targets in graph.items() if name.startswith("dask_gpu_interop.memory")}
    assert "dask_gpu_interop.memory.plugin" in back
    assert not {name: found for name, found in back.items() if found}

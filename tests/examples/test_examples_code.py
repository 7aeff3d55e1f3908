"""The example applications' code, read from the source: no import circle (imports inside
functions included: one there still closes a circle when the function runs), and no function
or class that nothing uses."""

from __future__ import annotations

import ast
import pathlib
import re
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in EXAMPLES.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The examples' modules that ``module`` imports (anywhere in it), but its own packages,
    which Python imports first anyway."""
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


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
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


def test_the_examples_import_graph_is_read():
    known = _modules()
    graph = {name: _imports(name, path, set(known)) for name, path in known.items()}
    assert "examples.mortgage.files" in graph["examples.mortgage.read"]
    assert "examples.mortgage.schema" in graph["examples.mortgage.files"]  # from . import
    assert "examples.mortgage.etl" in graph["examples.mortgage.cli"]  # inside a function
    assert _circles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_example_module_imports_itself_through_others():
    known = _modules()
    graph = {name: _imports(name, path, set(known)) for name, path in known.items()}
    assert _circles(graph) == []


def test_every_function_and_class_of_the_applications_is_used():
    """Each top-level function and class of ``examples/mortgage`` and ``examples/ecg`` is
    named somewhere besides its definition: in the examples, the tests or the benchmarks."""
    sources = {path: path.read_text()
               for folder in ("examples", "tests", "benchmarks", "dask_gpu_interop")
               for path in (ROOT / folder).rglob("*.py")}
    words = Counter(word for text in sources.values() for word in re.findall(r"\w+", text))
    unused = []
    for package in ("mortgage", "ecg"):
        for path in sorted((EXAMPLES / package).rglob("*.py")):
            for node in ast.parse(sources[path]).body:
                if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    continue
                if words[node.name] <= 1:  # its definition only
                    unused.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert unused == []

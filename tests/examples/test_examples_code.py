"""The example applications' code, read from the source: no import circle (imports inside
functions included: one there still closes a circle when the function runs), and no function
or class that nothing uses."""

from __future__ import annotations

import ast
import pathlib
import re
from collections import Counter

from ..import_graph import circles, import_graph

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_the_examples_import_graph_is_read():
    graph = import_graph(EXAMPLES)
    assert "examples.mortgage.files" in graph["examples.mortgage.read"]
    assert "examples.mortgage.schema" in graph["examples.mortgage.files"]  # from . import
    assert "examples.mortgage.etl" in graph["examples.mortgage.cli"]  # inside a function
    assert circles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_no_example_module_imports_itself_through_others():
    graph = import_graph(EXAMPLES)
    assert circles(graph) == []


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

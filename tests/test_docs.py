"""The API page (docs/api.rst) lists every public name, and their docstrings are numpydoc.

Sphinx is not needed here: CI builds the page with warnings as errors (``.ci/run``). These
checks read the page's directives and the docstrings themselves, so they run in the ordinary
test suite, and they run the docstrings' examples that need no GPU.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest

import dask_gpu_interop
from dask_gpu_interop import convert
from dask_gpu_interop.memory.config import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.rst"
DIRECTIVE = re.compile(r"^\.\. auto(module|class|exception|function|data):: (\S+)$", re.M)

PUBLIC = [name for name in dask_gpu_interop.__all__ if name != "__version__"]
# The module's public functions, documented on the page beside __all__.
CONVERT = ["convert", "to_cupy", "to_torch", "to_numba", "to_jax", "to_cudf", "library_of",
           "ZeroCopyError"]


def documented() -> dict[str, str]:
    """``{dotted name: directive}`` for every autodoc directive of the API page."""
    return {target: kind for kind, target in DIRECTIVE.findall(API.read_text())}


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


def sections(obj) -> set[str]:
    """The numpydoc section headings of ``obj``'s docstring (a title underlined with dashes)."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    return {
        title.strip()
        for title, rule in zip(lines, lines[1:], strict=False)
        if title.strip() and re.fullmatch(r"-{3,}", rule.strip())
        and len(rule.strip()) == len(title.strip())
    }


def test_every_public_name_is_on_the_api_page():
    page = documented()
    missing = [name for name in PUBLIC if f"dask_gpu_interop.{name}" not in page]
    assert not missing, f"docs/api.rst does not document {missing}"
    missing = [name for name in CONVERT if f"dask_gpu_interop.convert.{name}" not in page]
    assert not missing, f"docs/api.rst does not document convert's {missing}"


def test_every_documented_module_is_on_the_api_page():
    # the package's docstring names the documented modules beside __all__
    modules = re.findall(r":mod:`\.([\w.]+)`", dask_gpu_interop.__doc__)
    assert {"convert", "preload", "cluster.options", "tls", "serialize"} <= set(modules)
    page = documented()
    missing = [m for m in modules if page.get(f"dask_gpu_interop.{m}") != "module"]
    assert not missing, f"docs/api.rst has no automodule for {missing}"


def test_everything_the_api_page_names_exists():
    for target, kind in documented().items():
        obj = resolve(target)
        if kind == "exception":
            assert isinstance(obj, type) and issubclass(obj, BaseException), target
        elif kind == "class":
            assert isinstance(obj, type), target
        elif kind == "function":
            assert callable(obj), target


def _numpydoc_cases() -> list:
    cases = [pytest.param(getattr(dask_gpu_interop, name), id=name) for name in PUBLIC]
    return cases + [pytest.param(getattr(convert, name), id=f"convert.{name}") for name in CONVERT]


@pytest.mark.parametrize("obj", _numpydoc_cases())
def test_public_docstrings_are_numpydoc(obj):
    found = sections(obj)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        # raised, not called: when it is raised and what it says, and how to catch it
        wanted = {"Examples"}
        assert len((inspect.getdoc(obj) or "").splitlines()) > 3, "say when it is raised"
    elif isinstance(obj, type):
        wanted = {"Parameters", "Examples"}
    else:  # a function without parameters has no Parameters section to give
        wanted = {"Parameters", "Examples"} if inspect.signature(obj).parameters else {"Examples"}
        assert found & {"Returns", "Yields"}, f"no Returns or Yields section in {sorted(found)}"
    assert wanted <= found, f"missing {sorted(wanted - found)} (found {sorted(found)})"


def _parameters(obj) -> set[str]:
    doc = inspect.getdoc(obj) or ""
    block = doc.split("Parameters\n----------\n", 1)[1].split("\n\n", 1)[0]
    names = set()
    for line in block.splitlines():
        match = re.match(r"(\w+) : ", line)
        if match:
            names.add(match.group(1))
    return names


@pytest.mark.parametrize("cls", [dask_gpu_interop.GPUMemoryPlugin, dask_gpu_interop.MemoryConfig])
def test_every_memory_option_is_a_documented_parameter(cls):
    # the options are declared once (MemoryConfig's fields); their docs must keep up
    options = {spec.name for spec in OPTIONS}
    assert options <= _parameters(cls), f"undocumented: {sorted(options - _parameters(cls))}"


RUNNABLE = [
    dask_gpu_interop.OptionError,
    dask_gpu_interop.OptionError.message,
    dask_gpu_interop.MemoryConfig,
    dask_gpu_interop.MemoryConfig.from_options,
    convert.library_of,
    dask_gpu_interop.resolve_device,
    dask_gpu_interop.MemoryReport,
    dask_gpu_interop.ShuffleStats,
    dask_gpu_interop.shuffle_config,
    dask_gpu_interop.ClusterError,
]


@pytest.mark.parametrize("obj", RUNNABLE, ids=lambda obj: obj.__qualname__)
def test_examples_that_need_no_gpu_run(obj):
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, obj.__qualname__, globs={})
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0

"""A module that moved into a subpackage is still found at its old dotted path: the same module
object, so that imports, patches and command lines written for the old path keep working."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import dask_gpu_interop
from dask_gpu_interop import _imports


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``movedpkg`` whose module ``inner.new`` was once ``old``."""
    root = tmp_path / "movedpkg"
    (root / "inner").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "inner" / "__init__.py").write_text("")
    (root / "inner" / "new.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _imports.alias_modules({"movedpkg.old": "movedpkg.inner.new"})
    yield root
    for name in [name for name in sys.modules if name.startswith("movedpkg")]:
        del sys.modules[name]
    _imports._aliases.aliases.pop("movedpkg.old")


def test_the_old_path_imports_the_moved_module_itself(package):
    import movedpkg.inner.new
    import movedpkg.old

    assert movedpkg.old is movedpkg.inner.new
    from movedpkg.old import VALUE

    assert VALUE == 41
    assert movedpkg.old.__spec__.name == "movedpkg.inner.new"  # it keeps its own spec
    assert not (package / "old.py").exists()


def test_the_old_path_alone_imports_the_new_module_once(package):
    old = importlib.import_module("movedpkg.old")
    assert sys.modules["movedpkg.inner.new"] is old
    old.VALUE = 42  # what is set through one name is seen through the other
    assert importlib.import_module("movedpkg.inner.new").VALUE == 42


@pytest.mark.parametrize("old, new", sorted(dask_gpu_interop._MOVED.items()))
def test_each_moved_module_of_the_library_has_its_old_path(old, new):
    assert not (Path(dask_gpu_interop.__file__).parent / f"{old}.py").exists()
    moved = importlib.import_module(f"dask_gpu_interop.{new}")
    assert importlib.import_module(f"dask_gpu_interop.{old}") is moved


def test_an_old_path_works_in_a_fresh_interpreter():
    old = next(iter(sorted(dask_gpu_interop._MOVED)), None)
    if old is None:
        pytest.skip("no module has moved")
    code = (f"import dask_gpu_interop.{old} as m; "
            f"print(m.__name__ == 'dask_gpu_interop.{dask_gpu_interop._MOVED[old]}')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]

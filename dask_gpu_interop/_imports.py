"""Run a callback when a module finishes importing, or at once if it already has; give a
module that moved its old dotted path too.

This lets the plugin bind a framework to the worker's memory resource exactly when user code
first imports it (before it can allocate anything), without importing every framework during
setup: importing PyTorch alone takes longer than the rest of the setup together.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Callback = Callable[[ModuleType], None]

_lock = threading.RLock()
_pending: dict[str, list[Callback]] = {}


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported: now, if it is already. A module that
    another thread is importing (a background import) is waited for in a thread of its own,
    and the callback called there as soon as the import ends; an import that fails calls
    nothing."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, []).append(callback)
            _install_finder()
            return
        if _is_initializing(module):  # its loader was found already: it cannot be watched
            threading.Thread(target=_after_import, args=(name, callback), daemon=True,
                             name=f"after-import-{name}").start()
            return
    callback(module)


def _after_import(name: str, callback: Callback) -> None:
    try:
        module = importlib.import_module(name)  # waits for the import under way
    except Exception:  # the code that imports it raises it with its own context
        return
    callback(module)


def loaded(name: str, wait: bool = True) -> ModuleType | None:
    """The module ``name`` where something has imported it, else None (it is not imported
    here). A module that another thread is still importing (a background import, for one)
    is waited for, so that its attributes are there (``sys.modules`` alone would give it half
    made); with ``wait=False`` it counts as not imported yet."""
    module = sys.modules.get(name)
    if module is None or not _is_initializing(module):
        return module
    if not wait:
        return None
    return importlib.import_module(name)  # waits on the import under way in another thread


def cancel(name: str, callback: Callback) -> None:
    """Forget a callback that has not run yet."""
    with _lock:
        callbacks = _pending.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _pending.pop(name, None)


def pending(name: str) -> bool:
    with _lock:
        return bool(_pending.get(name))


def _is_initializing(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _pending.pop(name, [])
    for callback in callbacks:
        callback(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of a watched module to fire callbacks."""

    def find_spec(self, fullname, path, target=None):
        with _lock:
            if fullname not in _pending:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _FiringLoader(spec.loader, fullname)
        return spec


class _FiringLoader(importlib.abc.Loader):
    def __init__(self, loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # Put the real loader back first, so the module looks as if we were never there.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _fire(self._name, module)

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


_finder = _PostImportFinder()


def _install_finder() -> None:
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds each old dotted path of a moved module as that module itself."""

    def __init__(self):
        self.aliases: dict[str, str] = {}

    def find_spec(self, fullname, path, target=None):
        moved_to = self.aliases.get(fullname)
        if moved_to is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(moved_to))


class _AliasLoader(importlib.abc.Loader):
    """Loads an old dotted path as the module at its new one: the same object, so that
    whatever is set or patched through either name is seen through the other."""

    def __init__(self, name: str):
        self._name = name
        self._spec = None

    def create_module(self, spec):
        module = importlib.import_module(self._name)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # the import system gave the module the old path's spec: it keeps its own
        module.__spec__ = self._spec


_aliases = _AliasFinder()


def alias_modules(aliases: dict[str, str]) -> None:
    """Make each old dotted path in ``aliases`` import the module at its new one
    (``{"pkg.old": "pkg.sub.new"}``): code and command lines written for a module before it
    moved keep working, and the old path adds no module to its package. The old path is
    answered before any other finder's search, which could find a stale copy elsewhere."""
    _aliases.aliases.update(aliases)
    if _aliases not in sys.meta_path:
        sys.meta_path.insert(0, _aliases)


def import_in_background(*modules: str, client=None) -> None:
    """Start importing ``modules`` (one after the other) in a daemon thread and return at once:
    in this process, or with ``client`` in every worker of its cluster.

    A command often waits seconds for its cluster, then seconds more for imports its first
    tasks need (cuDF, PyTorch): started while the cluster starts, or as soon as the workers are
    up, the imports overlap that wait instead of following it. Python's import lock makes a
    later ``import`` of a module wait for the one in flight, so nothing is imported twice. An
    import that fails is left to fail again where the module is used, with that code's
    context. The imports hold the GIL while they run: overlap them with work that waits (a
    cluster's start, the GPU, files), not with other Python.

    Parameters
    ----------
    *modules : str
        Module names, imported in this order.
    client : distributed.Client, optional
        Import on each of its workers (``client.run``) instead of in this process.

    Returns
    -------
    None
        The imports run on after the call returns.

    Examples
    --------
    >>> import_in_background("cudf")                             # doctest: +SKIP
    >>> import_in_background("torch", client=client)             # doctest: +SKIP
    """
    wrong = [name for name in modules if not isinstance(name, str)]
    if wrong:
        raise TypeError("import_in_background() takes the names of modules, then client= "
                        "for a cluster's workers: import_in_background('cudf', client=client), "
                        f"not a {type(wrong[0]).__name__}")
    if client is not None:
        client.run(_start_importing, modules)
        return
    _start_importing(modules)


def _start_importing(modules) -> None:
    def run():
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # the code that needs it raises it with its own context
                pass

    threading.Thread(target=run, name="import-" + ",".join(modules), daemon=True).start()

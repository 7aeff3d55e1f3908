"""Whether a cluster's workers can import the code its tasks call, asked before any work.

A task that calls a function of a program's own sends it by reference (its module and name):
each worker imports that module to run it, and a worker started elsewhere (another directory,
another environment) fails every such task, once per task, with a traceback.
"""

from __future__ import annotations

import importlib.util
import os

from .._client import require_client
from .checks import ClusterError


def check_workers_import(client, *modules: str) -> None:
    """Raise ``ClusterError`` unless every worker of ``client``'s cluster can import
    ``modules``: before any work, where a task would fail on each worker instead.

    A task that calls a function of your own sends it by reference (its module and name): each
    worker imports that module to run it. Workers started elsewhere than your program (another
    directory, another environment) may not find it, nor a library it needs.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster.
    *modules : str
        Module names, e.g. ``"mypackage.tasks"``.

    Returns
    -------
    None
        When every worker can import them.

    Raises
    ------
    ClusterError
        A worker cannot import one of them: the message names the worker, the module it
        misses, and where to start the workers or what to install there.
    TypeError
        A module is not named by a string (a list of names, say).

    Examples
    --------
    >>> check_workers_import(client, "examples.mortgage.etl")        # doctest: +SKIP
    """
    require_client(client, "check_workers_import")
    wrong = [name for name in modules if not isinstance(name, str)]
    if wrong:
        raise TypeError("check_workers_import() takes the names of modules as arguments of their "
                        "own, check_workers_import(client, 'pkg.tasks', 'pkg.io'), not a "
                        f"{type(wrong[0]).__name__}")
    found = client.run(_importer(), list(modules), on_error="return")
    failed = {worker: err for worker, err in found.items() if isinstance(err, BaseException)}
    if not failed:
        return
    worker, err = sorted(failed.items())[0]
    missing = getattr(err, "name", None) or ""
    mine = [name for name in modules if missing and name.split(".")[0] == missing.split(".")[0]]
    if mine:
        fix = _where(missing)
    elif missing:
        fix = f"install {missing.split('.')[0]} where they run"
    else:
        fix = "make it importable where they run"
    text = (f"{len(failed)} of {len(found)} worker(s) of the cluster cannot import "
            f"{', '.join(modules)} ({worker}: {type(err).__name__}: {err}): the workers run "
            f"this program's tasks, which need it; {fix}")
    raise ClusterError(text.replace("{", "{{").replace("}", "}}"))


def _importer():
    """A function that imports the modules it is given on a worker, and returns the error of
    the first that fails (None when all import): returned, not raised, so that the workers log
    no failed run of their own. Made here, it travels by value: a worker that lacks this
    package can still say what it misses."""

    def import_each(names):
        import importlib

        for name in names:
            try:
                importlib.import_module(name)
            except Exception as err:  # noqa: BLE001 - whatever stops the import is the answer
                return err
        return None

    return import_each


def _where(module: str) -> str:
    """Where ``module`` is imported from here, said as how a worker could find it."""
    try:
        found = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        found = None
    locations = list(getattr(found, "submodule_search_locations", None) or [])
    origin = locations[0] if locations else getattr(found, "origin", None)
    if not origin:
        return f"install or copy {module} where the workers run"
    root = os.path.dirname(os.path.abspath(origin))
    if "site-packages" in root or "dist-packages" in root:
        return f"install {module.split('.')[0]} where the workers run"
    return f"start them from {root}, or with PYTHONPATH={root}"

"""What the fork server (:mod:`dask_gpu_interop.worker.fork_server`) imports as it starts: the
modules named in its environment, one at a time, so that one that fails to import, whatever the
error, leaves the server up and the rest imported (a worker forked from it imports that module
itself and says what is wrong). The variable is removed, so that the workers do not inherit
it."""

from __future__ import annotations

import importlib
import os

from .fork_server import IMPORTS_VARIABLE


def import_each(names: list[str]) -> list[str]:
    """Import ``names`` in order; the ones that failed, each with its error."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any error: the server must stay up
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


FAILED = import_each([name for name in os.environ.pop(IMPORTS_VARIABLE, "").split(",") if name])

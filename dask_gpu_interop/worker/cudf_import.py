"""A dask-cuda worker imports cuDF beside its start, not in it.

dask-cuda gives each of its workers a plugin (``CUDFSetup``) that imports cuDF to set cuDF's
spilling options as the worker starts: the worker registers with the scheduler only once
cuDF is imported, after dask-cuda has made its CUDA context, and the two are the longest steps
of a GPU worker process's start. The library's preload (:mod:`dask_gpu_interop.preload`) takes
that plugin's place: it gives the options to cuDF as the environment variables cuDF reads as
it is imported (``CUDF_SPILL``, ``CUDF_SPILL_STATS``; the memory plugin's spilling where it sets
one, as it would have set it after dask-cuda), and starts cuDF's import in a background thread
before dask-cuda's preload starts CUDA. The import then runs while CUDA starts (its calls
release the GIL) and while the worker sets its memory up and joins; a task that imports cuDF
waits for the import under way (Python's import lock) and finds the options set.

Only where dask-cuda's plugin would have imported cuDF: a worker without it (``dask worker``)
imports cuDF when its tasks do, and a worker whose process has cuDF imported already (forked
from the library's fork server) keeps dask-cuda's plugin, which then takes no time.
"""

from __future__ import annotations

import os
import sys

from .. import compat
from .._imports import import_in_background
from ..frameworks import is_installed

#: dask-cuda's plugin that imports cuDF to set its options: (module, class).
CUDF_SETUP = ("dask_cuda.plugins", "CUDFSetup")


def import_beside_start(worker, spill: bool | None = None) -> bool:
    """On a starting worker (from a preload's ``dask_setup``): where dask-cuda's ``CUDFSetup``
    would import cuDF as the worker starts, take it out, set its options in this process's
    environment (``spill``: the memory plugin's spilling, which wins where given) and start
    importing cuDF in the background. Returns whether it did."""
    setups = [plugin for plugin in compat.pending_worker_plugins(worker) if _is_cudf_setup(plugin)]
    if not setups or "cudf" in sys.modules or not is_installed("cudf"):
        return False
    options = setups[-1]  # the last one's options are the ones that would hold
    spilling = options.spill if spill is None else spill
    os.environ["CUDF_SPILL"] = "on" if spilling else "off"
    os.environ["CUDF_SPILL_STATS"] = str(int(options.spill_stats or 0))
    compat.remove_pending_worker_plugins(worker, setups)
    import_in_background("cudf")
    return True


def _is_cudf_setup(plugin) -> bool:
    """Whether ``plugin`` is dask-cuda's ``CUDFSetup`` as this module knows it (its options as
    the attributes ``spill`` and ``spill_stats``)."""
    kind = type(plugin)
    return ((kind.__module__, kind.__name__) == CUDF_SETUP
            and hasattr(plugin, "spill") and hasattr(plugin, "spill_stats"))


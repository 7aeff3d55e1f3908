"""A dask-cuda worker imports cuDF beside its start, not in it.

dask-cuda gives each of its workers a plugin (``CUDFSetup``) that imports cuDF to set cuDF's
spilling options as the worker starts: the worker registers with the scheduler only once
cuDF is imported, and the import is the longest step of a GPU worker process's start. The
library's preload (:mod:`dask_gpu_interop.preload`) takes that plugin's place: it gives its
options to cuDF as the environment variables cuDF reads as it is imported (``CUDF_SPILL``,
``CUDF_SPILL_STATS``), and starts cuDF's import in a background thread where dask-cuda's
plugin would have imported it (after every preload, so after dask-cuda's own has made the
worker's CUDA context), so that the worker registers meanwhile and the import goes on beside
its memory's setup, its joining the cluster and the client's first tasks. A task that imports
cuDF waits for the import under way (Python's import lock) and finds the options as dask-cuda
would have set them.

Only where dask-cuda's plugin would have imported cuDF: a worker without it (``dask worker``)
imports cuDF when its tasks do, and a worker whose process has cuDF imported already (forked
from the library's fork server) keeps dask-cuda's plugin, which then takes no time.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from distributed.diagnostics.plugin import WorkerPlugin

from . import compat
from ._imports import import_in_background

#: dask-cuda's plugin that imports cuDF to set its options: (module, class).
CUDF_SETUP = ("dask_cuda.plugins", "CUDFSetup")


def import_beside_start(worker) -> bool:
    """On a starting worker (from a preload's ``dask_setup``): where dask-cuda's ``CUDFSetup``
    would import cuDF as the worker starts, set its options in this process's environment
    instead and put a plugin in its place that starts importing cuDF in the background. Returns
    whether it did."""
    setups = [plugin for plugin in compat.pending_worker_plugins(worker) if _is_cudf_setup(plugin)]
    if not setups or "cudf" in sys.modules or not _installed("cudf"):
        return False
    options = setups[-1]  # the last one's options are the ones that would hold
    os.environ["CUDF_SPILL"] = "on" if options.spill else "off"
    os.environ["CUDF_SPILL_STATS"] = str(int(options.spill_stats or 0))
    compat.remove_pending_worker_plugins(worker, setups)
    compat.add_pending_worker_plugin(worker, ImportInBackground())
    return True


class ImportInBackground(WorkerPlugin):
    """A worker plugin that starts importing cuDF in a background thread as it is set up."""

    name = "gpu-interop-cudf-import"

    def setup(self, worker=None) -> None:
        import_in_background("cudf")


def _is_cudf_setup(plugin) -> bool:
    """Whether ``plugin`` is dask-cuda's ``CUDFSetup`` as this module knows it (its options as
    the attributes ``spill`` and ``spill_stats``)."""
    kind = type(plugin)
    return ((kind.__module__, kind.__name__) == CUDF_SETUP
            and hasattr(plugin, "spill") and hasattr(plugin, "spill_stats"))


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

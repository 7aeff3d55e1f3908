"""What a GPU worker of the library does as it starts, before any GPU work: the preload of the
library's local GPU clusters, and the steps :mod:`dask_gpu_interop.preload` takes too.

As the worker starts (:func:`start`), its memory plugin, a :class:`GPUMemoryPlugin` configured
once where the options were given, is set up after every preload (dask-cuda's creates the
CUDA context on the worker's device) and before the worker takes a task; a dask-cuda worker
imports cuDF in the background instead of before it joins (:mod:`.cudf_import`); as the worker
closes, its process ends right after (:mod:`.quick_exit`).

A local cluster gives each GPU worker its plugin itself (the configured object travels with
the worker's other arguments, as dask-cuda's own plugins do), and the GPU workers' settings
(:mod:`.gpu_workers`) through its nanny: this module, as a preload, finds the plugin there and
takes the other steps. ``dask cuda worker --preload dask_gpu_interop.preload`` parses its
flags once into the plugin, and sets the settings as it is imported.
"""

from __future__ import annotations

import logging

from .. import compat
from ..memory.plugin import GPUMemoryPlugin
from . import cudf_import, quick_exit
from . import start as worker_start

logger = logging.getLogger("distributed.worker.gpu_interop")

#: The module's name, for a local cluster's ``preload`` list.
PRELOAD = __name__
#: dask-cuda's own worker preload and the only flags it takes (see :mod:`..compat`).
DASK_CUDA_PRELOAD = compat.DASK_CUDA_PRELOAD


def start(worker, plugin: GPUMemoryPlugin | None) -> None:
    """On a starting worker (from a preload's ``dask_setup``): mark its preloads' step, keep
    dask-cuda's preload to its own flags, have ``plugin`` set up after every preload (None: the
    worker was given it already), and start cuDF's import beside the start."""
    worker_start.mark(worker, "preloads")
    # dask-cuda hands every preload the same arguments; its own preload rejects ours.
    compat.keep_preload_arguments(worker, DASK_CUDA_PRELOAD, compat.DASK_CUDA_PRELOAD_FLAGS)
    if plugin is not None:
        # After every preload, before the worker takes any task; a refusal stops the worker.
        compat.add_pending_worker_plugin(worker, plugin)
    else:
        plugin = given_plugin(worker)
    # dask-cuda's cuDF options without holding the worker's start for cuDF's import, which
    # runs from now on, beside dask-cuda's CUDA start
    cudf_import.import_beside_start(worker, spill=plugin.config.spill if plugin else None)


def given_plugin(worker) -> GPUMemoryPlugin | None:
    """The memory plugin a starting worker was given with its arguments, if any."""
    given = [p for p in compat.pending_worker_plugins(worker) if isinstance(p, GPUMemoryPlugin)]
    return given[-1] if given else None


def dask_setup(worker) -> None:
    """The local GPU clusters' preload: the worker's start, with the plugin it was given."""
    from distributed import Worker

    if not isinstance(worker, Worker):
        logger.warning("%s is a worker preload; ignored on %r", PRELOAD, worker)
        return
    start(worker, None)


def dask_teardown(worker) -> None:
    """As the worker closes: its process ends right after (:mod:`.quick_exit`)."""
    quick_exit.end_process_at_exit(worker)

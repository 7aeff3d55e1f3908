"""dask-gpu-interop: a Dask cluster of GPUs that behaves like one coherent GPU machine.

One RMM memory pool per GPU that cuDF, CuPy, Numba, PyTorch and XGBoost share
(``GPUMemoryPlugin``, ``memory_report``); GPU data kept on the GPUs between workers and between
frameworks; an all-to-all shuffle and join of its own that send each worker's rows straight to
the GPUs they belong on (``shuffle``, ``shuffle_merge``); and XGBoost trained on data larger
than the GPUs (``train_streamed``).

The public names are those in ``__all__``; the documented modules beside them are
:mod:`.convert` (zero-copy conversions), :mod:`.preload` (the worker preload),
:mod:`.worker.gpu_workers` (how GPU workers run tasks), :mod:`.worker.fork_server` (local
worker processes forked from a server with the libraries imported), :mod:`.cluster.ucx_setup`
(the UCX setup of a process that starts a local cluster over UCX, begun early),
:mod:`.cluster.options` (click options for your own commands), :mod:`.tls` (certificates for
``tls://`` clusters) and :mod:`.serialize` (serializers for CUDA PyTorch tensors and JAX
arrays). The API page, docs/api.rst, documents them from their docstrings; their former paths
(``dask_gpu_interop.options``, ``dask_gpu_interop.gpu_workers``, ...) still import them.
Importing this package imports no CUDA library; GPU libraries are touched only where used.
"""

from importlib.metadata import PackageNotFoundError, version

from ._imports import alias_modules as _alias_modules

# The modules that moved, by their old dotted paths: those keep working
# (``import dask_gpu_interop.gpu_workers`` gives ``dask_gpu_interop.worker.gpu_workers``).
_MOVED: dict[str, str] = {
    "all_to_all_inbox": "all_to_all.inbox",
    "all_to_all_tasks": "all_to_all.tasks",
    "fork_server": "worker.fork_server",
    "gpu_workers": "worker.gpu_workers",
    "options": "cluster.options",
    "scheduler_workers": "_client",
    "shuffle_method": "all_to_all.dask_method",
    "ucx_setup": "cluster.ucx_setup",
    "work_stealing": "cluster.work_stealing",
    "worker_cudf_import": "worker.cudf_import",
    "workers_import": "cluster.workers_import",
    "worker_exit": "worker.quick_exit",
    "worker_start": "worker.start",
}
_alias_modules({f"{__name__}.{old}": f"{__name__}.{new}" for old, new in _MOVED.items()})

from ._defaults import load_defaults  # noqa: E402

load_defaults()

from .serialize import register as _register_serializers  # noqa: E402

_register_serializers()  # lazily: no torch/JAX import until one of their objects is sent

from ._client import cluster_workers  # noqa: E402
from ._imports import import_in_background  # noqa: E402
from .all_to_all import (  # noqa: E402
    ShuffleError,
    ShuffleStats,
    shuffle,
    shuffle_config,
    shuffle_merge,
)
from .cluster import (  # noqa: E402
    ClusterError,
    cluster_client,
    local_cluster,
    prepare_local_cluster,
    resolve_device,
)
from .cluster.work_stealing import without_work_stealing  # noqa: E402
from .cluster.workers_import import check_workers_import  # noqa: E402
from .device import gpu_count  # noqa: E402
from .frameworks.xgboost import without_xgboost_rank_lines  # noqa: E402
from .memory import (  # noqa: E402
    GPUMemoryPlugin,
    GPUMemorySetupError,
    GPUOutOfMemoryError,
    MemoryConfig,
    MemoryReport,
    OptionError,
    memory_report,
)
from .memory.timeline import MemoryTimeline, record_memory  # noqa: E402
from .memory.xgboost_pool import xgboost_config  # noqa: E402
from .streaming import NotLazyError, StreamedTraining, train_streamed  # noqa: E402
from .worker.start import WorkerStart, worker_starts  # noqa: E402

try:
    __version__ = version("dask-gpu-interop")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0+unknown"

__all__ = [
    "ClusterError",
    "GPUMemoryPlugin",
    "GPUMemorySetupError",
    "GPUOutOfMemoryError",
    "MemoryConfig",
    "MemoryReport",
    "MemoryTimeline",
    "NotLazyError",
    "OptionError",
    "ShuffleError",
    "ShuffleStats",
    "StreamedTraining",
    "WorkerStart",
    "check_workers_import",
    "cluster_client",
    "cluster_workers",
    "gpu_count",
    "import_in_background",
    "local_cluster",
    "memory_report",
    "prepare_local_cluster",
    "record_memory",
    "resolve_device",
    "shuffle",
    "shuffle_config",
    "shuffle_merge",
    "train_streamed",
    "without_work_stealing",
    "without_xgboost_rank_lines",
    "worker_starts",
    "xgboost_config",
    "__version__",
]

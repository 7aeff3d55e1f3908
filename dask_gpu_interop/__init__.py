"""dask-gpu-interop: a Dask cluster of GPUs that behaves like one coherent GPU machine.

Importing this package imports no CUDA library; GPU libraries are touched only where used.
"""

from importlib.metadata import PackageNotFoundError, version

from ._config import load_defaults

load_defaults()

from .serialize import register as _register_serializers  # noqa: E402

_register_serializers()  # lazily: no torch/JAX import until one of their objects is sent

from .frameworks.xgboost import xgboost_config  # noqa: E402
from .memory import (  # noqa: E402
    GPUMemoryPlugin,
    GPUMemorySetupError,
    MemoryConfig,
    MemoryReport,
    memory_report,
)

try:
    __version__ = version("dask-gpu-interop")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0+unknown"

__all__ = [
    "GPUMemoryPlugin",
    "GPUMemorySetupError",
    "MemoryConfig",
    "MemoryReport",
    "memory_report",
    "xgboost_config",
    "__version__",
]

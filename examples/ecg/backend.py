"""cuDF/CuPy on GPU workers, pandas/NumPy on CPU workers: the modules of one device.

The example's steps ask for a ``Backend`` once and use its modules, instead of ``if gpu:``
everywhere. Which device runs is chosen once, by the cluster (``dask_gpu_interop.cluster_client``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    device: str  # "gpu" or "cpu"

    @property
    def is_gpu(self) -> bool:
        return self.device == "gpu"

    @property
    def xp(self):
        """CuPy on the GPU, NumPy on the CPU."""
        return importlib.import_module("cupy" if self.is_gpu else "numpy")

    @property
    def df(self):
        """cuDF on the GPU, pandas on the CPU."""
        return importlib.import_module("cudf" if self.is_gpu else "pandas")

    @property
    def dataframe_backend(self) -> str:
        """The name dask's ``dataframe.backend`` config takes."""
        return "cudf" if self.is_gpu else "pandas"

    def to_host(self, obj):
        """A NumPy array or pandas object holding the same values (no copy on the CPU)."""
        if not self.is_gpu:
            return obj
        if hasattr(obj, "to_pandas"):
            return obj.to_pandas()
        return self.xp.asnumpy(obj)

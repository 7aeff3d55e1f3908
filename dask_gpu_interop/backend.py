"""The one switch between the GPU stack (cuDF, CuPy) and the CPU stack (pandas, NumPy).

Pipelines ask for a ``Backend`` once and use its modules, instead of ``if gpu:`` everywhere.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from . import device as device_mod

DEVICES = ("auto", "gpu", "cpu")


def array_module(values):
    """NumPy or CuPy, whichever holds ``values``."""
    return importlib.import_module(type(values).__module__.split(".")[0])


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


def _gpu_stack_missing() -> list[str]:
    return [name for name in ("cudf", "cupy", "dask_cuda") if importlib.util.find_spec(name) is None]


def resolve_device(device: str = "auto") -> str:
    """``"gpu"`` or ``"cpu"`` for a requested ``device``; raises when a GPU is asked but absent."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    have_gpu = device_mod.gpu_count() > 0
    missing = _gpu_stack_missing() if have_gpu else []
    if device == "auto":
        return "gpu" if have_gpu and not missing else "cpu"
    if not have_gpu:
        raise RuntimeError(
            "device='gpu' but no CUDA GPU is visible here (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES), or use device='cpu'"
        )
    if missing:
        raise RuntimeError(
            f"device='gpu' needs {', '.join(missing)}: pip install 'dask-gpu-interop[cuda13]' "
            "(or [cuda12]), or use device='cpu'"
        )
    return "gpu"


def get_backend(device: str = "auto") -> Backend:
    return Backend(resolve_device(device))

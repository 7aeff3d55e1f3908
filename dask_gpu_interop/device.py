"""What GPU a process sees, asked without creating a CUDA context where that can be avoided.

Used by the plugin on workers and by the CPU/GPU switch; imports CUDA bindings only when
called, so the package imports on machines with no GPU stack at all.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    total: int
    free: int
    uuid: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def gpus_hidden() -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` hides every GPU from this process (asked of nothing
    else, so without starting CUDA)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and visible.strip() in ("", "-1")


def gpu_count() -> int:
    """How many CUDA GPUs this process may use, asked without creating a CUDA context.

    Returns
    -------
    int
        The devices CUDA (or NVML) lists, as ``CUDA_VISIBLE_DEVICES`` leaves them; 0 where
        none is visible or no CUDA stack is installed.

    Examples
    --------
    >>> from dask_gpu_interop import gpu_count
    >>> gpu_count() >= 0
    True
    """
    if gpus_hidden():
        return 0
    try:
        from cuda.bindings import runtime
    except ImportError:
        runtime = None
    if runtime is not None:
        err, count = runtime.cudaGetDeviceCount()
        return int(count) if err == runtime.cudaError_t.cudaSuccess else 0
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0


def current_device() -> DeviceInfo:
    """The current device of this process (creates the CUDA context if there is none)."""
    from cuda.bindings import runtime

    index = _check(runtime.cudaGetDevice(), "cudaGetDevice")
    _check(runtime.cudaFree(0), "cudaFree(0) (creating the CUDA context)")
    free, total = _check(runtime.cudaMemGetInfo(), "cudaMemGetInfo")
    props = _check(runtime.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    try:
        uuid = bytes(props.uuid.bytes).hex()
    except (AttributeError, TypeError):
        uuid = ""
    return DeviceInfo(index=int(index), name=name.rstrip("\x00"), total=int(total), free=int(free), uuid=uuid)


def memory_info() -> tuple[int, int]:
    """(free, total) bytes on the current device."""
    from cuda.bindings import runtime

    free, total = _check(runtime.cudaMemGetInfo(), "cudaMemGetInfo")
    return int(free), int(total)


def _check(result, what: str):
    from cuda.bindings import runtime

    err, *values = result
    if err != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"{what} failed: {runtime.cudaGetErrorString(err)[1].decode()}")
    return values[0] if len(values) == 1 else tuple(values)

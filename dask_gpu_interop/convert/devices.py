"""Streams and devices for the converters: waiting on a CUDA stream, the current device, and
the source's GPU made current while a conversion runs.

CUDA is reached through ``cuda.bindings`` where it is installed, else through CuPy (the GPU
stack brings one of the two). Nothing is imported until a function here runs.
"""

from __future__ import annotations

import contextlib
import importlib

from .._imports import loaded
from ..serialize import dlpack

#: ``cudaStreamLegacy``: the default stream, which cuDF works on.
DEFAULT_STREAM = 1


def device_context(src):
    """Make the source's GPU current: PyTorch exports DLPack only from the current device."""
    stack = contextlib.ExitStack()
    if src.device[0] != dlpack.CUDA:
        return stack
    index = src.device[1]
    torch = loaded("torch")
    if torch is not None and torch.cuda.is_available():
        stack.enter_context(torch.cuda.device(index))
    cupy = loaded("cupy")
    if cupy is not None:
        stack.enter_context(cupy.cuda.Device(index))
    return stack


def sync_default_stream() -> None:
    sync_stream(DEFAULT_STREAM)


def sync_stream(handle: int) -> None:
    try:
        from cuda.bindings import runtime
    except ImportError:
        runtime = None
    if runtime is not None:
        (err,) = runtime.cudaStreamSynchronize(handle)
        if err != runtime.cudaError_t.cudaSuccess:
            raise RuntimeError(f"cudaStreamSynchronize({handle:#x}) failed: {err}")
        return
    importlib.import_module("cupy").cuda.ExternalStream(handle).synchronize()


def current_cuda_device() -> int:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return importlib.import_module("cupy").cuda.runtime.getDevice()
    err, device = runtime.cudaGetDevice()
    return int(device)

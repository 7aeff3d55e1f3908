"""Received frames, seen the same way by every framework's deserializer.

A frame is device memory (anything with ``__cuda_array_interface__``: the ``rmm.DeviceBuffer``
distributed-ucxx allocates, or the sender's own tensor in-process) or host memory (a buffer).
Its size is read here without touching the data, so a header can be checked before anything
is built on it. Also here: what to do when CUDA data reaches a process with no GPU.
"""

from __future__ import annotations

import re
import warnings

import dask.config

from .. import layout
from .header import HeaderError

#: dask config key: what a process with no usable GPU does with received CUDA data:
#: "error" (default) or "cpu" (keep it in host memory, with a warning).
NO_GPU_KEY = "gpu-interop.serialize.no-gpu"

_TYPESTR = re.compile(r"^[<>|=]([a-zA-Z])(\d{1,2})$")


def cuda_interface(frame) -> dict | None:
    """The frame's ``__cuda_array_interface__``, or None for host memory."""
    try:
        cai = frame.__cuda_array_interface__
    except AttributeError:
        return None
    if not isinstance(cai, dict):
        raise HeaderError(f"{type(frame).__name__}.__cuda_array_interface__ is not a dict")
    return cai


def frame_nbytes(frame) -> int:
    """Bytes in ``frame``; raises HeaderError for a frame that is not one contiguous block."""
    cai = cuda_interface(frame)
    if cai is None:
        return host_bytes(frame).nbytes
    match = _TYPESTR.match(str(cai.get("typestr", "")))
    shape = cai.get("shape")
    if match is None or not isinstance(shape, (tuple, list)):
        raise HeaderError(f"device frame of type {type(frame).__name__} has a malformed interface")
    itemsize = int(match.group(2))
    n = 1
    for d in shape:
        n *= int(d)
    strides = cai.get("strides")
    if strides is not None and n > 0 and tuple(strides) != layout.c_strides(shape, itemsize):
        raise HeaderError("device frame is not contiguous")
    return n * itemsize


def host_bytes(frame) -> memoryview:
    """``frame`` as a flat, contiguous byte view (no copy)."""
    try:
        view = memoryview(frame)
    except TypeError:
        raise HeaderError(
            f"frame of type {type(frame).__name__} is neither device memory nor a buffer"
        ) from None
    if not view.c_contiguous:
        raise HeaderError("host frame is not contiguous")
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B") if view.nbytes else memoryview(b"")
    return view


def device_pointer(frame) -> int:
    cai = cuda_interface(frame)
    if cai is None:
        raise HeaderError(f"frame of type {type(frame).__name__} is not device memory")
    return int(cai["data"][0])


def no_gpu(what: str) -> None:
    """Called when ``what`` (CUDA data) arrives where no GPU is usable: raise, or warn."""
    policy = dask.config.get(NO_GPU_KEY, default="error")
    if policy == "cpu":
        warnings.warn(
            f"received {what} in a process with no usable GPU: keeping it in host memory "
            f"({NO_GPU_KEY}: cpu)",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    if policy != "error":
        raise ValueError(f"{NO_GPU_KEY}={policy!r}: choose 'error' or 'cpu'")
    raise RuntimeError(
        f"received {what}, but this process has no usable CUDA GPU. Move it to host memory "
        "in a task before gathering it here (for example x.cpu()), receive it on a process "
        f"with a GPU, or set the dask config {NO_GPU_KEY}: cpu to receive it on the CPU"
    )

"""JAX arrays: read as single-device, row-major buffers, built through DLPack (a typed view of
our own for producers that only have ``__cuda_array_interface__``).

JAX is imported only when one of these functions runs.
"""

from __future__ import annotations

import warnings

from ..layout import Layout, c_strides, is_c_contiguous
from ..serialize import dlpack
from ..serialize.dtypes import JAX
from .common import (
    Adapter,
    Source,
    ZeroCopyError,
    check_view,
    contiguous_copy,
    finish,
    sync_producer,
)

_X64 = {"int64", "uint64", "float64", "complex128"}


def build(src: Source, copy, order):
    import jax

    if src.dtype.name not in JAX:
        raise TypeError(f"JAX has no {src.dtype.name} arrays")
    if src.dtype.name in _X64 and not jax.config.jax_enable_x64:
        message = (
            f"JAX runs with 64-bit types disabled, so {src.dtype.name} would become a 32-bit "
            "copy: enable them (jax.config.update('jax_enable_x64', True)) first"
        )
        if copy is False:
            raise ZeroCopyError(message)
        warnings.warn(message, stacklevel=3)
    if src.library == "jax":
        out = src.obj
    else:
        if not is_c_contiguous(src.shape, src.strides, src.dtype.itemsize):
            if copy is False:
                raise ZeroCopyError(
                    f"JAX arrays are always row-major; strides {src.strides} (bytes) for shape "
                    f"{src.shape} need a copy (make it contiguous first, or pass copy=None)"
                )
            src = contiguous_copy(src)
        if hasattr(src.obj, "__dlpack__"):
            producer = src.obj  # jax passes its stream to the producer
        else:
            sync_producer(src)
            producer = dlpack.DLPackView(src.ptr, src.dtype, src.shape, None, src.device, src.obj)
        try:
            out = jax.dlpack.from_dlpack(producer, copy=False if copy is False else None)
        except ValueError as err:
            if copy is False:
                raise ZeroCopyError(f"JAX would copy on import: {err}") from err
            raise
    out = check_view(src, layout_of(out), out, copy, "JAX")
    return finish(src, out, copy, "C", layout_of, lambda x: jax.numpy.array(x, copy=True))


def layout_of(x) -> Layout:
    import numpy as np

    itemsize = np.dtype(x.dtype).itemsize
    shape = tuple(x.shape)
    return Layout(x.unsafe_buffer_pointer() if x.size else 0, shape,
                  c_strides(shape, itemsize), itemsize)  # fmt: skip


def source(x) -> Source:
    import numpy as np

    devices = x.devices()
    if len(devices) != 1:
        raise ZeroCopyError("a sharded JAX array has no single buffer: gather it first")
    (device,) = devices
    name = np.dtype(x.dtype).name
    if name not in JAX:
        raise TypeError(f"JAX dtype {name} is not converted")
    x.block_until_ready()  # consumers given no stream (CAI) read it right away
    dtype = JAX[name]
    platform = device.platform
    dev = (dlpack.CPU, 0) if platform == "cpu" else (dlpack.CUDA, device.local_hardware_id)
    return Source(
        x,
        "jax",
        dtype,
        tuple(x.shape),
        c_strides(tuple(x.shape), dtype.itemsize),
        x.unsafe_buffer_pointer() if x.size else 0,
        dev,
    )


def wait(src: Source) -> None:
    src.obj.block_until_ready()


ADAPTER = Adapter(build=build, read=lambda x, copy, order: source(x), wait=wait)

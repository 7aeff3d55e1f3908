"""CuPy arrays: read by ``__cuda_array_interface__``, built through DLPack from PyTorch and JAX
(CuPy passes its stream to the producer) and through the interface from the others.

CuPy is imported only when one of these functions runs.
"""

from __future__ import annotations

import sys

from ..layout import interface_layout
from .common import Adapter, Source, check_view, cuda_library, finish, sync_producer


def build(src: Source, copy, order):
    cupy = cuda_library("cupy", src)
    try:
        if src.library == "cupy":
            out = src.obj
        elif src.library in ("torch", "jax"):
            out = cupy.from_dlpack(src.obj)  # cupy passes its current stream to the producer
        else:
            sync_producer(src)
            out = cupy.asarray(src.obj)
    except (TypeError, ValueError, BufferError) as err:
        raise TypeError(f"CuPy cannot take this {src.dtype.name} data: {err}") from err
    out = check_view(src, interface_layout(out), out, copy, "CuPy")
    return finish(src, out, copy, order, interface_layout, lambda a: a.copy(order=order))


def wait(src: Source) -> None:
    sys.modules["cupy"].cuda.get_current_stream().synchronize()


ADAPTER = Adapter(build=build, wait=wait)

"""Numba device arrays: read by ``__cuda_array_interface__`` (waiting on the stream it names),
built through it.

Numba is imported only when one of these functions runs.
"""

from __future__ import annotations

import importlib

from ..layout import interface_layout
from .common import Adapter, Source, check_view, cuda_library, finish, sync_producer


def build(src: Source, copy, order):
    cuda = cuda_library("numba.cuda", src)
    if src.dtype.typestr is None:
        raise TypeError(f"Numba has no {src.dtype.name} arrays")
    if src.library == "numba":
        out = src.obj
    else:
        sync_producer(src)  # torch's interface has no stream for Numba to wait on
        with cuda.gpus[src.device[1]]:
            out = cuda.as_cuda_array(src.obj)
    out = check_view(src, interface_layout(out), out, copy, "Numba")
    return finish(src, out, copy, order, interface_layout, lambda a: copy_in_order(a, order))


def copy_in_order(a, order):
    """A copy of device array ``a`` in ``order`` ("C" or "F"; else its own layout)."""
    from numba import cuda

    if order in ("C", "F") and not a.flags[f"{order}_CONTIGUOUS"]:
        cupy = importlib.import_module("cupy")  # Numba copies bytes only, it cannot reorder
        return cuda.as_cuda_array(cupy.array(a, order=order, copy=True))
    out = cuda.device_array(a.shape, dtype=a.dtype, strides=a.strides)
    out.copy_to_device(a)
    return out


ADAPTER = Adapter(build=build)

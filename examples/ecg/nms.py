"""1-D non-maximum suppression: a beat is where the response is the maximum of its window.

Two variants of one rule, side by side: a Numba CUDA kernel (one thread per sample) for CuPy
arrays and a Numba CPU function for NumPy arrays. Sample ``i`` is kept when its response is
positive and no sample within ``half_window`` is larger, nor equal and earlier; so a plateau
yields one beat and two kept samples are always more than ``half_window`` apart. Both
variants read the same float32 response, so they keep the same samples.

The kernels are compiled on first use, never at import.
"""

from __future__ import annotations

import functools

from .backend import Backend
from .handoff import as_numba_device_array, launch

THREADS = 256


def local_maxima(response, lo: int, hi: int, half_window: int, backend: Backend):
    """Positions ``lo <= i < hi`` (indices into ``response``) of local maxima, as ``xp`` int64.

    Neighbours are looked up in all of ``response``: give it ``half_window`` samples beyond
    ``[lo, hi)`` on each side (where there are any) and the answer is exact.
    """
    xp = backend.xp
    if response.ndim != 1:
        raise ValueError(f"local_maxima: expected a 1-D response, got shape {response.shape}")
    lo, hi = max(0, int(lo)), min(len(response), int(hi))
    if hi <= lo:
        return xp.empty(0, dtype=xp.int64)
    mask = xp.zeros(hi - lo, dtype=xp.uint8)
    if backend.is_gpu:
        blocks = (hi - lo + THREADS - 1) // THREADS
        launch(_cuda_kernel(), blocks, THREADS, as_numba_device_array(response), lo, hi,
               int(half_window), as_numba_device_array(mask))
    else:
        _cpu_function()(response, lo, hi, int(half_window), mask)
    return xp.flatnonzero(mask).astype(xp.int64) + lo


@functools.cache
def _cpu_function():
    import numba

    @numba.njit(nogil=True, cache=True)
    def nms(r, lo, hi, w, out):
        n = r.shape[0]
        for i in range(lo, hi):
            v = r[i]
            keep = v > 0
            # The nearest neighbours first: most samples fail there.
            if keep and i > 0 and r[i - 1] >= v:
                keep = False
            if keep and i + 1 < n and r[i + 1] > v:
                keep = False
            if keep:
                for j in range(max(0, i - w), min(n, i + w + 1)):
                    rj = r[j]
                    if rj > v or (rj == v and j < i):
                        keep = False
                        break
            out[i - lo] = 1 if keep else 0

    return nms


@functools.cache
def _cuda_kernel():
    from numba import cuda

    @cuda.jit(cache=True)  # compiled once per machine, then loaded from disk
    def nms(r, lo, hi, w, out):
        i = cuda.grid(1) + lo
        if i >= hi:
            return
        n = r.shape[0]
        v = r[i]
        keep = v > 0
        if keep and i > 0 and r[i - 1] >= v:
            keep = False
        if keep and i + 1 < n and r[i + 1] > v:
            keep = False
        if keep:
            for j in range(max(0, i - w), min(n, i + w + 1)):
                rj = r[j]
                if rj > v or (rj == v and j < i):
                    keep = False
                    break
        out[i - lo] = 1 if keep else 0

    return nms

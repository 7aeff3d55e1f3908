"""Each beat as a fixed 256-sample vector: resampled, with its baseline taken out.

A beat is the stretch ``[start, end)`` of the stream (fractional sample positions, see
``detect.beat_table``), resampled to 256 points by linear interpolation so that beats of any
length line up for the VAE. The line through the means of its first and last 8 points is
subtracted, which removes baseline wander while keeping the beat's shape and amplitude.

Two variants of one computation, side by side: a Numba CUDA kernel (a block per beat, a
thread per output point, the baseline from shared memory) for CuPy arrays, and a Numba CPU
function for NumPy arrays. Compiled on first use, never at import.
"""

from __future__ import annotations

import functools

from .backend import Backend
from .handoff import as_numba_device_array, launch
from .params import EMBED_SIZE

EDGE = 8  # points averaged at each end for the baseline


def embed_beats(signal, starts, ends, backend: Backend):
    """``(len(starts), 256)`` float32 ``xp`` array: beat ``b`` is ``signal[starts[b]:ends[b]]``.

    ``starts``/``ends`` are float64 positions into ``signal`` (on any device: they are moved
    to ``signal``'s); every beat must lie inside ``signal``.
    """
    xp = backend.xp
    starts = xp.asarray(starts, dtype=xp.float64)
    ends = xp.asarray(ends, dtype=xp.float64)
    out = xp.empty((len(starts), EMBED_SIZE), dtype=xp.float32)
    if len(starts) == 0:
        return out
    if float(starts.min()) < 0 or float(ends.max()) > len(signal) - 1:
        raise ValueError("embed_beats: a beat reaches outside the signal it was given")
    if backend.is_gpu:
        launch(_cuda_kernel(), len(starts), EMBED_SIZE, as_numba_device_array(signal),
               as_numba_device_array(starts), as_numba_device_array(ends),
               as_numba_device_array(out))
    else:
        _cpu_function()(signal, starts, ends, out)
    return out


@functools.cache
def _cpu_function():
    import math

    import numba

    @numba.njit(nogil=True, cache=True)
    def embed(x, starts, ends, out):
        m, size = out.shape
        last = x.shape[0] - 2
        for b in range(m):
            s = starts[b]
            step = (ends[b] - s) / (size - 1)
            for j in range(size):
                t = s + j * step
                i0 = min(max(int(math.floor(t)), 0), last)
                f = t - i0
                out[b, j] = x[i0] * (1.0 - f) + x[i0 + 1] * f
            head = 0.0
            tail = 0.0
            for j in range(EDGE):
                head += out[b, j]
                tail += out[b, size - 1 - j]
            head /= EDGE
            tail /= EDGE
            slope = (tail - head) / (size - EDGE)
            for j in range(size):
                out[b, j] -= head + slope * (j - (EDGE - 1) / 2)

    return embed


@functools.cache
def _cuda_kernel():
    import math

    from numba import cuda, float32

    @cuda.jit(cache=True)  # compiled once per machine, then loaded from disk
    def embed(x, starts, ends, out):
        b = cuda.blockIdx.x
        j = cuda.threadIdx.x
        size = out.shape[1]
        points = cuda.shared.array(EMBED_SIZE, float32)
        last = x.shape[0] - 2
        s = starts[b]
        t = s + j * (ends[b] - s) / (size - 1)
        i0 = min(max(int(math.floor(t)), 0), last)
        f = t - i0
        value = x[i0] * (1.0 - f) + x[i0 + 1] * f
        points[j] = value
        cuda.syncthreads()
        head = 0.0
        tail = 0.0
        for k in range(EDGE):
            head += points[k]
            tail += points[size - 1 - k]
        head /= EDGE
        tail /= EDGE
        slope = (tail - head) / (size - EDGE)
        out[b, j] = value - (head + slope * (j - (EDGE - 1) / 2))

    return embed

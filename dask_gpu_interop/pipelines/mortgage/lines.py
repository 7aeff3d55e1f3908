"""The line layout of a chunk of pipe-delimited text, for the reader's checks.

Where each line starts and ends, how many separators it has, and which of its fields are
filled: enough to prove every line has the right number of fields, and (for cuDF, which reads
an unparsable number as null instead of failing) that every filled field parsed.

On the GPU, one CUDA thread walks one line (a line is about a hundred bytes), so the layout
costs the chunk's bytes and a few numbers per line of device memory, not a per-byte
running sum. On the CPU, NumPy counts separators per line by searching their positions; the filled fields are not needed
there (pandas raises on an unparsable number) and are computed only on request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEPARATOR = ord("|")
NEWLINE = ord("\n")
RETURN = ord("\r")
MAX_FIELDS = 32  # filled fields are a 32-bit mask per line

_KERNEL = r"""
extern "C" __global__ void line_shape(const unsigned char* raw, const long long* starts,
                                      const long long* ends, const long long lines,
                                      int* separators, unsigned int* filled) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= lines) return;
    const long long end = ends[i];
    long long field_start = starts[i];
    int count = 0;
    unsigned int mask = 0u;
    for (long long k = field_start; k < end; ++k) {
        if (raw[k] == (unsigned char)'|') {
            if (k > field_start && count < 32) mask |= 1u << count;
            ++count;
            field_start = k + 1;
        }
    }
    if (end > field_start && count < 32) mask |= 1u << count;
    separators[i] = count;
    filled[i] = mask;
}
"""
_compiled = None


def _kernel():
    global _compiled
    if _compiled is None:
        import cupy

        _compiled = cupy.RawKernel(_KERNEL, "line_shape")
    return _compiled


@dataclass
class Lines:
    """Per line of a chunk: byte offsets and field counts (CuPy or NumPy arrays)."""

    xp: object
    starts: object  # offset of each line's first byte
    ends: object  # offset just past its last byte, without "\n" or "\r\n"
    separators: object  # int32: separators in the line
    filled: object | None  # uint32: bit j set when field j is not empty (None: not computed)

    @property
    def blank(self):
        return self.ends == self.starts

    def wrong(self, n_fields: int):
        """Non-blank lines with other than ``n_fields`` fields."""
        return ~self.blank & (self.separators != n_fields - 1)

    @property
    def rows(self) -> int:
        """Non-blank lines (the rows a CSV reader that skips blank lines returns)."""
        return int((~self.blank).sum())

    def filled_counts(self, columns: list[int]) -> list[int]:
        """How many non-blank lines have field ``j`` filled, for each ``j`` in ``columns``."""
        if self.filled is None:
            raise ValueError("Lines.of(..., filled=True) computes the filled fields")
        xp = self.xp
        mask = self.filled[~self.blank]
        return [int(((mask >> xp.uint32(j)) & xp.uint32(1)).sum()) for j in columns]


def _bounds(raw, xp):
    size = raw.size
    newlines = xp.flatnonzero(raw == NEWLINE)
    starts = xp.concatenate([xp.zeros(1, dtype=newlines.dtype), newlines + 1])
    ends = xp.concatenate([newlines, xp.full(1, size, dtype=newlines.dtype)])
    if size == 0 or int(starts[-1]) == size:  # the text ends with a newline
        starts, ends = starts[:-1], ends[:-1]
    if starts.size:
        carriage = (ends > starts) & (raw[xp.maximum(ends - 1, 0)] == RETURN)
        ends = ends - carriage
    return starts.astype(xp.int64), ends.astype(xp.int64)


def of(raw, xp, *, filled: bool = False) -> Lines:
    """The layout of ``raw``, a uint8 array of the chunk's bytes (on the device for CuPy)."""
    starts, ends = _bounds(raw, xp)
    if xp is np:
        separators = _separators_numpy(raw, starts)
        mask = _filled_numpy(raw, starts, ends) if filled else None
        return Lines(xp, starts, ends, separators, mask)
    lines = int(starts.size)
    separators = xp.zeros(lines, dtype=xp.int32)
    mask = xp.zeros(lines, dtype=xp.uint32)
    if lines:
        threads = 256
        blocks = (lines + threads - 1) // threads
        _kernel()((blocks,), (threads,), (raw, starts, ends, np.int64(lines), separators, mask))
    return Lines(xp, starts, ends, separators, mask)


def _separators_numpy(raw, starts):
    """Separators from each line start to the next (the last: to the end of the bytes)."""
    positions = np.flatnonzero(raw == SEPARATOR)
    edges = np.searchsorted(positions, np.append(starts, raw.size))
    return np.diff(edges).astype(np.int32)


def _filled_numpy(raw, starts, ends):
    """The kernel's filled mask, line by line (for tests and small inputs)."""
    data = raw.tobytes()
    out = np.zeros(starts.size, dtype=np.uint32)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        mask = 0
        for j, text in enumerate(data[s:e].split(b"|")[:MAX_FIELDS]):
            if text:
                mask |= 1 << j
        out[i] = mask
    return out

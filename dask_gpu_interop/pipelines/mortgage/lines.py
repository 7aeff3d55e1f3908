"""The line layout of a chunk of pipe-delimited text, for the reader's checks.

Where each line starts and ends, how many separators it has, and which of its fields are
filled: enough to prove every line has the right number of fields, and (for cuDF, which reads
an unparsable number as null instead of failing) that every filled field parsed.

On the GPU, one CUDA thread walks one line (a line is about a hundred bytes), so the layout
costs the chunk's bytes and a few numbers per line of device memory, not a per-byte
running sum. A second kernel hashes one field of every line, which is how the GPU reader
codes text columns without building strings. On the CPU, NumPy counts separators per line by searching their positions; the filled fields are not needed
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

# FNV-1a over a field's bytes, mixed with its length; 0 for a blank field, odd otherwise.
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_LENGTH_MIX = 0x9E3779B97F4A7C15
_HASH_KERNEL = r"""
extern "C" __global__ void field_hash(const unsigned char* raw, const long long* starts,
                                      const long long* ends, const long long lines,
                                      const int field, unsigned long long* out) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= lines) return;
    long long k = starts[i];
    const long long end = ends[i];
    for (int f = 0; f < field && k < end; ++k) {
        if (raw[k] == (unsigned char)'|') ++f;
    }
    unsigned long long h = 0xcbf29ce484222325ULL;
    unsigned long long n = 0;
    for (; k < end && raw[k] != (unsigned char)'|'; ++k, ++n) {
        h ^= raw[k];
        h *= 0x100000001b3ULL;
    }
    out[i] = n == 0 ? 0ULL : ((h ^ (n * 0x9e3779b97f4a7c15ULL)) | 1ULL);
}
"""
_compiled: dict = {}


def _kernel(name: str = "line_shape"):
    if name not in _compiled:
        import cupy

        source = _KERNEL if name == "line_shape" else _HASH_KERNEL
        _compiled[name] = cupy.RawKernel(source, name)
    return _compiled[name]


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


def field_hashes(raw, starts, ends, field: int, xp):
    """A 64-bit hash of field ``field`` of each line (0 when the field is blank).

    The GPU reader codes text columns (dates, statuses, names) with it instead of building
    string columns: equal texts get equal hashes, and each distinct hash is turned back into
    its text from one line that has it. Different texts of one column sharing a hash would
    need a 64-bit collision between a few hundred values (odds about 1e-15).
    """
    lines = int(starts.size)
    if xp is np:
        return _field_hashes_numpy(raw, starts, ends, field)
    out = xp.empty(lines, dtype=xp.uint64)
    if lines:
        threads = 256
        blocks = (lines + threads - 1) // threads
        _kernel("field_hash")((blocks,), (threads,),
                              (raw, starts, ends, np.int64(lines), np.int32(field), out))
    return out


def _field_hashes_numpy(raw, starts, ends, field: int):
    """The kernel's hash, line by line (the reference for tests)."""
    data = raw.tobytes()
    mask = (1 << 64) - 1
    out = np.zeros(starts.size, dtype=np.uint64)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        fields = data[s:e].split(b"|")
        text = fields[field] if field < len(fields) else b""
        if not text:
            continue
        h = _FNV_OFFSET
        for byte in text:
            h = ((h ^ byte) * _FNV_PRIME) & mask
        out[i] = (h ^ ((len(text) * _LENGTH_MIX) & mask)) | 1
    return out

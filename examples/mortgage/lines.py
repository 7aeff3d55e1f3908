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

import functools
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
# Every text field of a line in one walk: each field's hash goes into a small open-addressing
# table of that field (its distinct texts are few: dates, statuses, flags, names), and the line
# gets the slot (``slots`` for a blank field). A slot's first line is kept (to read its text
# back). Reads come before atomics, so a text seen on most lines costs no atomic operation.
_SLOTS_KERNEL = r"""
extern "C" __global__ void field_slots(const unsigned char* raw, const long long* starts,
                                       const long long* ends, const long long lines,
                                       const int* fields, const int nfields, const int slots,
                                       unsigned long long* keys, unsigned long long* first,
                                       unsigned long long* blank, short* codes, int* full) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i >= lines) return;
    long long k = starts[i];
    const long long end = ends[i];
    int f = 0;
    for (int j = 0; j < nfields; ++j) {
        for (; f < fields[j] && k < end; ++k) {
            if (raw[k] == (unsigned char)'|') ++f;
        }
        unsigned long long h = 0xcbf29ce484222325ULL;
        unsigned long long n = 0;
        if (f == fields[j]) {
            for (; k < end && raw[k] != (unsigned char)'|'; ++k, ++n) {
                h ^= raw[k];
                h *= 0x100000001b3ULL;
            }
        }
        if (n == 0) {
            codes[(long long)j * lines + i] = (short)slots;
            if (((volatile unsigned long long*)blank)[j] == 0ULL) atomicExch(&blank[j], 1ULL);
            continue;
        }
        h = (h ^ (n * 0x9e3779b97f4a7c15ULL)) | 1ULL;
        unsigned int s = (unsigned int)(h >> 32) & (unsigned int)(slots - 1);
        int code = -1;
        for (int probe = 0; probe < slots; ++probe) {
            unsigned long long* cell = keys + (long long)j * slots + s;
            unsigned long long seen = *(volatile unsigned long long*)cell;
            if (seen == 0ULL) seen = atomicCAS(cell, 0ULL, h);
            if (seen == 0ULL || seen == h) {
                code = (int)s;
                unsigned long long* at = first + (long long)j * slots + s;
                if ((unsigned long long)i < *(volatile unsigned long long*)at)
                    atomicMin(at, (unsigned long long)i);
                break;
            }
            s = (s + 1u) & (unsigned int)(slots - 1);
        }
        if (code < 0) atomicExch(full, 1);
        codes[(long long)j * lines + i] = (short)code;
    }
}
"""
# Where the newlines are, in two passes over the bytes: each block counts the newlines of its
# segment, the counts are summed into each block's first output slot, and each block writes its
# newlines' offsets in order (a thread takes 64 bytes; a scan over the block's threads places
# them). CuPy's flatnonzero builds a mask and a running count the size of the chunk instead:
# 11.7 ms against 2.3 ms for a 0.9 GiB chunk on an H200
# (benchmarks/results/mortgage-stages-gpu-dense-variants-1xH200.md).
_NEWLINES_KERNEL = r"""
#define PIECE 64
__device__ int piece_newlines(const unsigned char* raw, long long size, long long from,
                              unsigned long long* words) {
    int count = 0;
    if (from + PIECE <= size) {
        const uint4* v = (const uint4*)(raw + from);
        for (int q = 0; q < PIECE / 16; ++q) {
            uint4 w = v[q];
            words[2 * q] = ((unsigned long long)w.y << 32) | w.x;
            words[2 * q + 1] = ((unsigned long long)w.w << 32) | w.z;
        }
    } else {
        for (int q = 0; q < PIECE / 8; ++q) words[q] = 0ULL;
        for (long long k = from; k < size; ++k)
            words[(k - from) >> 3] |= (unsigned long long)raw[k] << (8 * ((k - from) & 7));
    }
    for (int q = 0; q < PIECE / 8; ++q) {  // bytes past the end are 0, not newlines
        const unsigned long long x = words[q] ^ 0x0a0a0a0a0a0a0a0aULL;  // a newline byte -> 0
        const unsigned long long low = 0x7f7f7f7f7f7f7f7fULL;
        const unsigned long long zero = ~(((x & low) + low) | x | low);  // its top bit: byte 0
        count += __popcll(zero);
    }
    return count;
}

__device__ int block_scan(int value, int* shared) {  // exclusive prefix sum over the block
    const int t = threadIdx.x;
    shared[t] = value;
    __syncthreads();
    for (int step = 1; step < blockDim.x; step <<= 1) {
        const int add = t >= step ? shared[t - step] : 0;
        __syncthreads();
        shared[t] += add;
        __syncthreads();
    }
    const int inclusive = shared[t];
    __syncthreads();
    return inclusive - value;
}

extern "C" __global__ void count_newlines(const unsigned char* raw, const long long size,
                                          long long* counts) {
    __shared__ int shared[256];
    unsigned long long words[PIECE / 8];
    const long long from = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * PIECE;
    const int mine = from < size ? piece_newlines(raw, size, from, words) : 0;
    const int before = block_scan(mine, shared);
    if (threadIdx.x == blockDim.x - 1) counts[blockIdx.x] = before + mine;
}

extern "C" __global__ void write_newlines(const unsigned char* raw, const long long size,
                                          const long long* offsets, long long* out) {
    __shared__ int shared[256];
    unsigned long long words[PIECE / 8];
    const long long from = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * PIECE;
    const int mine = from < size ? piece_newlines(raw, size, from, words) : 0;
    long long at = offsets[blockIdx.x] + block_scan(mine, shared);
    if (mine == 0) return;
    const long long stop = from + PIECE < size ? from + PIECE : size;
    for (long long k = from; k < stop; ++k) {
        if (raw[k] == (unsigned char)'\n') out[at++] = k;
    }
}
"""
_SOURCES = {"line_shape": _KERNEL, "field_hash": _HASH_KERNEL, "field_slots": _SLOTS_KERNEL,
            "count_newlines": _NEWLINES_KERNEL, "write_newlines": _NEWLINES_KERNEL}


@functools.cache
def _kernel(name: str = "line_shape"):
    import cupy

    return cupy.RawKernel(_SOURCES[name], name)


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
        counts = [((mask >> xp.uint32(j)) & xp.uint32(1)).sum() for j in columns]
        return [int(c) for c in xp.stack(counts).tolist()] if counts else []  # one transfer


NEWLINE_THREADS = 256  # threads per block of the newline kernels (their scan's shared size)
NEWLINE_PIECE = 64  # bytes per thread


def newlines(raw, xp):
    """Offsets of the newline bytes of ``raw`` (a uint8 array), ascending, as int64."""
    if xp is np:
        return np.flatnonzero(raw == NEWLINE).astype(np.int64)
    size = int(raw.size)
    if raw.data.ptr % 16:  # the kernel reads 16 bytes at a time, from aligned addresses
        return xp.flatnonzero(raw == NEWLINE).astype(xp.int64)
    per_block = NEWLINE_THREADS * NEWLINE_PIECE
    blocks = -(-size // per_block)
    if blocks == 0:
        return xp.zeros(0, dtype=xp.int64)
    counts = xp.empty(blocks, dtype=xp.int64)
    _kernel("count_newlines")((blocks,), (NEWLINE_THREADS,), (raw, np.int64(size), counts))
    offsets = xp.cumsum(counts) - counts
    total = int(offsets[-1] + counts[-1])
    out = xp.empty(total, dtype=xp.int64)
    if total:
        _kernel("write_newlines")((blocks,), (NEWLINE_THREADS,),
                                  (raw, np.int64(size), offsets, out))
    return out


def _bounds(raw, xp):
    size = raw.size
    breaks = newlines(raw, xp)
    starts = xp.concatenate([xp.zeros(1, dtype=breaks.dtype), breaks + 1])
    ends = xp.concatenate([breaks, xp.full(1, size, dtype=breaks.dtype)])
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


SLOTS = 4096  # distinct texts a field may have in a chunk before the sort-based way is used
MAX_SLOTS = 1 << 14  # a line's slot, or ``slots`` for a blank field, is an int16


@dataclass
class FieldSlots:
    """The distinct texts of some fields of a chunk, found in one pass over the lines.

    ``codes[j, i]``: line i's slot in field j's table (``slots``: the field is blank), int16. Host
    arrays per field and slot: ``hashes`` (0: an empty slot), and the ``starts``/``ends`` of
    the first line whose field has that text. ``blank[j]``: some line leaves field j blank.
    ``full``: a table ran out of slots, and the codes are not to be used.
    """

    codes: object
    hashes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    blank: np.ndarray
    full: bool
    slots: int


def field_slots(raw, starts, ends, fields: list[int], xp, slots: int = SLOTS) -> FieldSlots:
    """Code ``fields`` (ascending field numbers) of every line by their distinct texts.

    On the GPU one thread walks one line once, for all the fields (``_SLOTS_KERNEL``); the
    result comes to the host in one copy. With NumPy the same result comes from sorting each
    field's hashes (the reference for tests).
    """
    if slots & (slots - 1) or not 0 < slots <= MAX_SLOTS:
        raise ValueError(f"slots={slots}: must be a power of two, at most {MAX_SLOTS}")
    if list(fields) != sorted(set(fields)):
        raise ValueError(f"fields={fields}: must be ascending, without repeats")
    lines = int(starts.size)
    if xp is np:
        return _field_slots_numpy(raw, starts, ends, fields, slots)
    nfields = len(fields)
    keys = xp.zeros((nfields, slots), dtype=xp.uint64)
    first = xp.full((nfields, slots), np.iinfo(np.uint64).max, dtype=xp.uint64)
    blank = xp.zeros(nfields, dtype=xp.uint64)
    codes = xp.empty((nfields, lines), dtype=xp.int16)
    full = xp.zeros(1, dtype=xp.int32)
    if lines and nfields:
        threads = 256
        blocks = (lines + threads - 1) // threads
        _kernel("field_slots")(
            (blocks,), (threads,),
            (raw, starts, ends, np.int64(lines), xp.asarray(fields, dtype=xp.int32),
             np.int32(nfields), np.int32(slots), keys, first, blank, codes, full))
    at = xp.minimum(first, max(lines - 1, 0)).astype(xp.int64)
    if lines == 0:
        at = xp.zeros_like(at)
        starts = ends = xp.zeros(1, dtype=xp.int64)
    found = xp.concatenate([keys.view(xp.int64).ravel(), starts[at].ravel(), ends[at].ravel(),
                            blank.view(xp.int64), full.astype(xp.int64)]).get()  # one copy
    size = nfields * slots
    shape = (nfields, slots)
    return FieldSlots(codes, found[:size].view(np.uint64).reshape(shape),
                      found[size:2 * size].reshape(shape), found[2 * size:3 * size].reshape(shape),
                      found[3 * size:3 * size + nfields] != 0, bool(found[-1]), slots)


def _field_slots_numpy(raw, starts, ends, fields, slots) -> FieldSlots:
    nfields, lines = len(fields), int(starts.size)
    codes = np.empty((nfields, lines), dtype=np.int16)
    hashes = np.zeros((nfields, slots), dtype=np.uint64)
    first_starts = np.zeros((nfields, slots), dtype=np.int64)
    first_ends = np.zeros((nfields, slots), dtype=np.int64)
    blank = np.zeros(nfields, dtype=bool)
    full = False
    for j, field in enumerate(fields):
        values = _field_hashes_numpy(raw, starts, ends, field)
        distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        filled = distinct != 0
        blank[j] = not filled.all()
        if int(filled.sum()) > slots:
            full = True
            continue
        slot = np.cumsum(filled) - 1  # the slot of each distinct non-blank hash
        codes[j] = np.where(filled, slot, slots)[inverse.ravel()]
        hashes[j, slot[filled]] = distinct[filled]
        first_starts[j, slot[filled]] = starts[first[filled]]
        first_ends[j, slot[filled]] = ends[first[filled]]
    return FieldSlots(codes, hashes, first_starts, first_ends, blank, full, slots)

"""The number fields of a chunk's lines, parsed on the GPU by one CUDA thread per line.

libcudf's CSV reader parses a chunk's numbers at about 15 GB/s of text on an H200, a third of
the GPU ETL's time. The reader has already found every line (``lines.of``), so one walk along
each line can parse all its number fields in place, writing each column's values and its
null mask (one bit per line, from a warp vote) at once.

Only the plain decimal forms are parsed here: an optional sign, digits, an optional point and
digits (``-12``, ``6.125``, ``.5``, ``7.``). Each value is exact: at most 2**53 units over
10**k with k <= 22 is one correctly rounded division, the value pyarrow and pandas give on the
CPU. Any other form (exponents, spaces, ``inf``, more digits) makes :func:`parse` return None,
and the reader hands the chunk to libcudf, which parses those too.
"""

from __future__ import annotations

import functools

from .schema import ID, NUMBER, Table

MAX_FIELDS = 32  # one shared counter per field in a block of the kernel

_KERNEL = r"""
__constant__ double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21,
                                 1e22};

extern "C" __global__ void parse_numbers(
        const unsigned char* raw, const long long* starts, const long long* ends,
        const long long lines, const int* fields, const int* integers, const int nfields,
        unsigned long long* const* values, unsigned int* const* masks,
        unsigned long long* blanks, unsigned long long* unparsed) {
    __shared__ unsigned long long block_blanks[32];
    if (threadIdx.x < 32) block_blanks[threadIdx.x] = 0ULL;
    __syncthreads();
    const long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    const bool live = i < lines;  // dead threads stay for the warp votes
    const unsigned int alive = __ballot_sync(0xffffffffu, live);
    long long k = live ? starts[i] : 0;
    const long long end = live ? ends[i] : 0;
    int f = 0;
    bool bad = false;
    for (int j = 0; j < nfields; ++j) {
        for (; f < fields[j] && k < end; ++k) {
            if (raw[k] == (unsigned char)'|') ++f;
        }
        const bool here = f == fields[j];
        const long long from = k;
        bool negative = false, point = false, digit = false, ok = true;
        unsigned long long units = 0ULL;
        int digits = 0, decimals = 0;
        if (here && k < end && (raw[k] == (unsigned char)'-' || raw[k] == (unsigned char)'+')) {
            negative = raw[k] == (unsigned char)'-';
            ++k;
        }
        for (; here && k < end; ++k) {
            const unsigned char c = raw[k];
            if (c == (unsigned char)'|') break;
            if (c >= (unsigned char)'0' && c <= (unsigned char)'9') {
                digit = true;
                if (point) ++decimals;
                if (units != 0ULL || c != (unsigned char)'0') {  // leading zeros do not count
                    if (digits == 19) {
                        ok = false;
                    } else {
                        units = units * 10ULL + (unsigned long long)(c - (unsigned char)'0');
                        ++digits;
                    }
                }
            } else if (c == (unsigned char)'.' && !point) {
                point = true;
            } else {
                ok = false;
            }
        }
        const bool filled = live && k > from;
        if (filled) {
            if (integers[j]) ok = ok && digit && !point && digits <= 18;
            else ok = ok && digit && units <= (1ULL << 53) && decimals <= 22;
            bad = bad || !ok;
        }
        if (live) {
            unsigned long long bits;
            if (integers[j]) {
                const long long v = (long long)units;
                bits = filled ? (unsigned long long)(negative ? -v : v) : 0ULL;
            } else {
                double v = (double)units / POW10[decimals <= 22 ? decimals : 0];
                bits = filled ? (unsigned long long)__double_as_longlong(negative ? -v : v)
                              : 0x7ff8000000000000ULL;
            }
            values[j][i] = bits;
        }
        const unsigned int word = __ballot_sync(0xffffffffu, filled);
        if ((threadIdx.x & 31u) == 0u && alive != 0u) {
            masks[j][i >> 5] = word;
            atomicAdd(&block_blanks[j], (unsigned long long)__popc(alive & ~word));
        }
    }
    if (bad) atomicExch(unparsed, 1ULL);
    __syncthreads();
    if (threadIdx.x < nfields && block_blanks[threadIdx.x] != 0ULL)
        atomicAdd(&blanks[threadIdx.x], block_blanks[threadIdx.x]);
}
"""


@functools.cache
def _kernel():
    import cupy

    return cupy.RawKernel(_KERNEL, "parse_numbers")


def mask_bytes(rows: int) -> int:
    """Bytes of a libcudf null mask for ``rows``: a bit per row, padded to 64 bytes."""
    return -(-rows // 512) * 64


def fields_of(table: Table, columns: list[str]) -> tuple[list[int], list[int]]:
    """(field numbers, 1 for an integer field else 0) of ``columns``, which must be ID or
    NUMBER columns of ``table``, in its order."""
    fields = [table.names.index(name) for name in columns]
    if fields != sorted(set(fields)):
        raise ValueError(f"columns={columns}: must be in the table's order, without repeats")
    if len(fields) > MAX_FIELDS:
        raise ValueError(f"{len(fields)} columns: the kernel parses at most {MAX_FIELDS}")
    kinds = [table.columns[f].kind for f in fields]
    wrong = [name for name, kind in zip(columns, kinds, strict=True) if kind not in (ID, NUMBER)]
    if wrong:
        raise ValueError(f"{wrong}: not number columns of the {table.name} table")
    return fields, [int(kind == ID) for kind in kinds]


def parse(raw, starts, ends, table: Table, columns: list[str]):
    """``columns`` (ID columns as int64, NUMBER columns as float64, blank fields null) of the
    lines ``[starts, ends)`` of ``raw``, a CuPy uint8 array of the chunk, as a cuDF frame;
    None when a filled field is not a plain decimal (the caller lets libcudf parse then)."""
    import cudf
    import cupy
    import numpy as np
    import pylibcudf as plc

    fields, integers = fields_of(table, columns)
    lines = int(starts.size)
    values = [cupy.empty(lines, dtype=cupy.int64 if integer else cupy.float64)
              for integer in integers]
    masks = [cupy.zeros(mask_bytes(lines) // 4, dtype=cupy.uint32) for _ in fields]
    counts = cupy.zeros(len(fields) + 1, dtype=cupy.uint64)  # blanks per field, then "unparsed"
    if lines and fields:
        threads = 256
        blocks = (lines + threads - 1) // threads
        _kernel()(
            (blocks,), (threads,),
            (raw, starts, ends, np.int64(lines), cupy.asarray(fields, dtype=cupy.int32),
             cupy.asarray(integers, dtype=cupy.int32), np.int32(len(fields)),
             cupy.asarray([v.data.ptr for v in values], dtype=cupy.uint64),
             cupy.asarray([m.data.ptr for m in masks], dtype=cupy.uint64), counts,
             counts[len(fields):]))
    found = counts.get()  # one copy
    if found[-1]:
        return None
    kinds = {0: plc.TypeId.FLOAT64, 1: plc.TypeId.INT64}
    whole = []
    for value, mask, integer, blank in zip(values, masks, integers, found[:-1].tolist(),
                                           strict=True):
        whole.append(plc.Column(
            plc.DataType(kinds[integer]), lines, plc.gpumemoryview(value),
            plc.gpumemoryview(mask) if blank else None, int(blank), 0, []))
    return cudf.DataFrame.from_pylibcudf(plc.Table(whole), {"columns": list(columns)})

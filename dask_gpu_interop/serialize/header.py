"""Check a received array header against its frames before any byte is touched.

A header comes off the network: its shape, strides and dtype decide where a framework will
read and write. Everything is checked here, in plain Python, so that a tampered or truncated
header raises :class:`HeaderError` and never turns into a view outside the received frame.

What we accept is what our serializers send: one dense (non-overlapping, gap-free) block of
``numel * itemsize`` bytes, in any dimension order (so transposed and channels-last tensors
travel without a copy), exactly as long as its frame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..layout import c_strides, is_dense
from .dtypes import DType, lookup

#: The array header layout this version writes and reads.
VERSION = 1
#: More dimensions than any framework supports (PyTorch and NumPy stop at 64).
MAX_NDIM = 64
#: Larger than any device's memory, small enough that no arithmetic on it overflows int64.
MAX_EXTENT = 2**62


class HeaderError(ValueError):
    """A serialized header does not describe its frames (tampered, truncated, or a mismatch of
    versions between sender and receiver)."""


@dataclass(frozen=True)
class ArraySpec:
    """What an array header says, once checked."""

    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements, as PyTorch counts them

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def c_contiguous(self) -> bool:
        return self.strides == c_strides(self.shape)


def array_header(dtype: DType, shape: Sequence[int], strides: Sequence[int]) -> dict:
    """The header that :func:`parse_array` checks: what the receiver needs to rebuild the view."""
    shape = tuple(int(d) for d in shape)
    strides = tuple(int(s) for s in strides)
    spec = ArraySpec(dtype, shape, strides)
    if not is_dense(shape, strides):
        raise ValueError(f"strides {strides} for shape {shape} are not dense: make it contiguous")
    return {
        "version": VERSION,
        "dtype": dtype.name,
        "shape": shape,
        "strides": strides,
        "nbytes": spec.nbytes,
    }


def parse_array(header: object, frame_nbytes: int, table: Mapping[str, DType]) -> ArraySpec:
    """Check ``header`` against a frame of ``frame_nbytes`` bytes; raise :class:`HeaderError`."""
    if not isinstance(header, Mapping):
        raise HeaderError(f"array header must be a mapping, got {type(header).__name__}")
    version = field(header, "version", int)
    if version != VERSION:
        raise HeaderError(
            f"array header version {version}, this dask_gpu_interop reads version {VERSION}: "
            "install the same dask_gpu_interop version on the client and every worker"
        )
    try:
        dtype = lookup(header.get("dtype"), table)
    except KeyError as err:
        raise HeaderError(f"array header: {err.args[0]}") from None
    shape = _extents(header, "shape")
    strides = _extents(header, "strides")
    if len(strides) != len(shape):
        raise HeaderError(f"array header: {len(strides)} strides for {len(shape)} dimensions")
    nbytes = field(header, "nbytes", int)
    spec = ArraySpec(dtype, shape, strides)
    if nbytes != spec.nbytes:
        raise HeaderError(
            f"array header: shape {shape} of {dtype.name} is {spec.nbytes} bytes, "
            f"the header says {nbytes}"
        )
    if frame_nbytes != nbytes:
        raise HeaderError(
            f"frame holds {frame_nbytes} bytes, the header describes {nbytes} "
            "(truncated or mismatched frames)"
        )
    if not is_dense(shape, strides):
        raise HeaderError(
            f"array header: strides {strides} for shape {shape} overlap or leave gaps"
        )
    return spec


def field(header: Mapping, key: str, kind: type, *, optional: bool = False):
    """``header[key]``, checked to be a ``kind`` (bool is not taken for int)."""
    if key not in header:
        if optional:
            return None
        raise HeaderError(f"header has no {key!r}")
    value = header[key]
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise HeaderError(f"header {key!r} must be {names}, got {type(value).__name__}")
    return value


def frame_count(frames: Sequence, expected: int, what: str) -> None:
    if len(frames) != expected:
        raise HeaderError(f"{what}: {len(frames)} frames, the header describes {expected}")


def _extents(header: Mapping, key: str) -> tuple[int, ...]:
    value = field(header, key, (list, tuple))  # type: ignore[arg-type]
    if len(value) > MAX_NDIM:
        raise HeaderError(f"array header {key!r} has {len(value)} dimensions (at most {MAX_NDIM})")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < MAX_EXTENT:
            raise HeaderError(
                f"array header {key!r} entries must be ints in [0, 2**62), got {v!r:.64}"
            )
    return tuple(value)

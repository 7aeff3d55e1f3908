"""Cutting one long stream into pieces that workers handle apart, without losing beats.

Each chunk of the stream *owns* the samples ``[start, stop)``: a beat is reported only by the
chunk that owns its position, so it cannot be found twice. Each chunk *reads* a window that
reaches ``overlap`` samples further on both sides (clipped at the ends of the stream); with an
overlap of at least the non-maximum-suppression half-window, every owned sample sees its whole
neighbourhood, so a beat at a chunk edge is not lost either. A window may span several
chunks when chunks are shorter than the overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Window:
    start: int  # first owned sample
    stop: int  # one past the last owned sample
    read_start: int  # first sample read (start - overlap, clipped)
    read_stop: int  # one past the last sample read

    @property
    def lo(self) -> int:
        """Where the owned samples begin in the samples read."""
        return self.start - self.read_start

    @property
    def hi(self) -> int:
        return self.stop - self.read_start


def bounds(chunks) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of consecutive chunk lengths (a dask array's ``chunks[0]``)."""
    lengths = [int(c) for c in chunks]
    if any(c < 0 for c in lengths):
        raise ValueError(f"chunk lengths must be >= 0, got {lengths}")
    edges = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def windows(chunks, overlap: int) -> list[Window]:
    """One window per non-empty chunk, reading ``overlap`` samples beyond it on each side."""
    if overlap < 0:
        raise ValueError(f"overlap={overlap!r} must be >= 0")
    spans = bounds(chunks)
    total = spans[-1][1] if spans else 0
    return [Window(a, b, max(0, a - overlap), min(total, b + overlap)) for a, b in spans]


def owner(positions, spans: list[tuple[int, int]]) -> np.ndarray:
    """Index of the chunk owning each position (positions must lie inside the stream)."""
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    return np.searchsorted(starts, np.asarray(positions, dtype=np.int64), side="right") - 1


def even_chunks(total: int, parts: int) -> tuple[int, ...]:
    """``parts`` chunk lengths as equal as can be, adding up to ``total``."""
    parts = max(1, min(int(parts), max(1, total)))
    base, extra = divmod(int(total), parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))

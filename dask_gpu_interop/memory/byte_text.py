"""Byte counts as the library's messages and reports print them."""

from __future__ import annotations

from dask.utils import format_bytes


def byte_text(count: int | None) -> str:
    """``count`` bytes in dask's words (``"1.50 GiB"``), signed when negative (``"-1.00
    GiB"``, as for memory a task freed), and ``"-"`` when the count is not known (None)."""
    if count is None:
        return "-"
    if count < 0:
        return "-" + format_bytes(-count)
    return format_bytes(count)

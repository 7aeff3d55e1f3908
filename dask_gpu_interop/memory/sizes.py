"""Memory sizes: as users write them (bytes, strings with units, or fractions of the device),
and as the library's messages and reports print them (:func:`byte_text`).

Parsed on the client (so a typo fails before any worker is touched) and resolved to bytes on
the worker, where the device's memory is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dask.utils import format_bytes, parse_bytes

ALIGNMENT = 256  # RMM aligns allocations to 256 bytes; pool sizes must be multiples of it.


@dataclass(frozen=True)
class Size:
    """A size in bytes, or a fraction of the device's total memory."""

    value: int | float
    is_fraction: bool

    def resolve(self, device_total: int) -> int:
        """Bytes on a device with ``device_total`` bytes, rounded down to RMM's alignment."""
        raw = int(self.value * device_total) if self.is_fraction else int(self.value)
        return raw - raw % ALIGNMENT

    def __str__(self) -> str:
        if self.is_fraction:
            return f"{self.value:g} of the device"
        return format_bytes(int(self.value))


def byte_text(count: int | None) -> str:
    """``count`` bytes in dask's words (``"1.50 GiB"``), signed when negative (``"-1.00
    GiB"``, as for memory a task freed), and ``"-"`` when the count is not known (None)."""
    if count is None:
        return "-"
    if count < 0:
        return "-" + format_bytes(-count)
    return format_bytes(count)


def parse_size(value, *, allow_zero: bool = False) -> Size | None:
    """Parse a user's size; raise ``ValueError``/``TypeError`` saying why it is not one (the
    caller names the option, in the words the user set it with).

    Accepted: ``None``; an int (bytes); a float in (0, 1] (fraction of the device);
    a string with a unit ("8GB", "512 MiB"); a string holding a number: a fraction when it is
    in (0, 1] ("0.8"), else a whole number of bytes ("1073741824").
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(
            "expected a size (bytes as an int, a string such as '8GB', or a fraction of the "
            "device such as 0.8), not a bool"
        )
    if isinstance(value, int):
        return _checked_bytes(value, allow_zero)
    if isinstance(value, float):
        if value < 0 or (value == 0 and not allow_zero):
            return _checked_bytes(-1 if value < 0 else 0, allow_zero)
        return _checked_fraction(value, allow_zero)
    if not isinstance(value, str):
        raise TypeError(
            f"expected an int, a float fraction or a string such as '8GB', "
            f"not {type(value).__name__}"
        )
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        if number < 0 or (number == 0 and not allow_zero):
            return _checked_bytes(-1 if number < 0 else 0, allow_zero)
        if math.isfinite(number) and number > 1:
            if number != int(number):
                raise ValueError(
                    "a number above 1 is read as bytes and must be whole; for a fraction of "
                    "the device use a value in (0, 1], e.g. '0.8'"
                )
            return _checked_bytes(int(number), allow_zero)
        return _checked_fraction(number, allow_zero)
    try:
        parsed = parse_bytes(text)
    except (ValueError, TypeError):
        raise ValueError(
            "not a size; use bytes (1073741824), a unit ('8GB', '512MiB') or a fraction of "
            "the device ('0.8')"
        ) from None
    return _checked_bytes(parsed, allow_zero)


def _checked_bytes(n: int, allow_zero: bool) -> Size:
    if n < 0 or (n == 0 and not allow_zero):
        need = "zero or more" if allow_zero else "more than zero"
        raise ValueError(f"a size must be {need}")
    return Size(int(n), is_fraction=False)


def _checked_fraction(x: float, allow_zero: bool) -> Size:
    low_ok = x >= 0 if allow_zero else x > 0
    if not (math.isfinite(x) and low_ok and x <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(
            f"a fraction of the device's memory must be in {interval}; for an absolute size "
            "give bytes or a unit, e.g. '8GB'"
        )
    return Size(float(x), is_fraction=True)

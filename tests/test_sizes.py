import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dask_gpu_interop.memory.report import MemoryReport
from dask_gpu_interop.memory.sizes import ALIGNMENT, Size, byte_text, parse_size

GiB = 2**30


@pytest.mark.parametrize(
    "value, expected",
    [
        (1 << 30, Size(1 << 30, False)),
        ("8GB", Size(8_000_000_000, False)),
        ("512MiB", Size(512 << 20, False)),
        ("512 MiB", Size(512 << 20, False)),
        (" 2 GiB ", Size(2 << 30, False)),
        ("1073741824", Size(1 << 30, False)),
        ("0.8", Size(0.8, True)),
        (0.8, Size(0.8, True)),
        ("1", Size(1.0, True)),
        (1.0, Size(1.0, True)),
        (None, None),
    ],
)
def test_accepted_forms(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize(
    "value, words",
    [
        ("lots", "not a size"),
        ("8 potatoes", "not a size"),
        (-5, "more than zero"),
        ("-5GB", "more than zero"),
        ("-0.5", "more than zero"),
        (-0.5, "more than zero"),
        (0, "more than zero"),
        ("0", "more than zero"),
        (0.0, "more than zero"),
        (1.5, "(0, 1]"),
        ("1.5", "must be whole"),
        ("nan", "(0, 1]"),
        (float("inf"), "(0, 1]"),
    ],
)
def test_rejected_values_say_why_and_the_fix(value, words):
    """The reason only: the caller names the option, in the words it was set with."""
    with pytest.raises(ValueError) as info:
        parse_size(value)
    assert words in str(info.value)
    assert "=" not in str(info.value)  # no option named


@pytest.mark.parametrize("value", [True, [1], {"a": 1}, b"8GB", object()])
def test_wrong_types(value):
    with pytest.raises(TypeError, match="^expected"):
        parse_size(value)


def test_zero_allowed_where_it_means_something():
    assert parse_size(0, allow_zero=True) == Size(0, False)
    assert parse_size("0", allow_zero=True) == Size(0.0, True)


@given(st.integers(min_value=1, max_value=1 << 50))
def test_any_positive_int_is_bytes(n):
    size = parse_size(n)
    assert not size.is_fraction
    resolved = size.resolve(device_total=1 << 40)
    assert resolved % ALIGNMENT == 0 and n - ALIGNMENT < resolved <= n


@given(
    st.floats(min_value=1e-6, max_value=1.0, allow_nan=False),
    st.integers(min_value=1 << 20, max_value=1 << 38),
)
def test_fractions_resolve_to_aligned_share_of_the_device(fraction, total):
    size = parse_size(fraction)
    got = size.resolve(total)
    assert got % ALIGNMENT == 0
    assert got <= fraction * total < got + ALIGNMENT + 1
    assert math.isclose(parse_size(str(fraction)).value, fraction)


# Byte counts in the library's words: one formatter for the memory report and the plugin's
# messages.
def test_a_count_in_dasks_words():
    assert byte_text(0) == "0 B"
    assert byte_text(1536) == "1.50 kiB"
    assert byte_text(3 * GiB) == "3.00 GiB"


def test_a_negative_count_is_signed_in_the_same_unit_as_its_size():
    assert byte_text(-GiB) == "-1.00 GiB"
    assert byte_text(-100) == "-100 B"


def test_an_unknown_count_is_a_dash():
    assert byte_text(None) == "-"


def test_the_report_says_unknown_sizes_with_a_dash():
    snapshot = {"status": "active", "mode": "managed", "resource": "Managed",
                "device": {"name": "GPU", "total": 80 * GiB}, "pool_size": None,
                "current_bytes": 2 * GiB, "current_count": 3, "frameworks": {}}
    text = str(MemoryReport({"tcp://w:1": snapshot}))
    assert "(80.00 GiB, - free)" in text
    assert "pool -  current 2.00 GiB in 3 buffers  peak -" in text

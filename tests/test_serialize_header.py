"""Header checks: a tampered or truncated header is refused before any view is made.

Runs on the CPU only; it needs no framework but for the end-to-end cases (torch, CPU build).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dask_gpu_interop.layout import c_strides, is_dense
from dask_gpu_interop.serialize import dtypes
from dask_gpu_interop.serialize.header import (
    MAX_EXTENT,
    MAX_NDIM,
    VERSION,
    HeaderError,
    array_header,
    parse_array,
)

TABLE = dtypes.TORCH
NAMES = sorted(TABLE)


def valid(name="float32", shape=(2, 3), strides=None):
    dtype = TABLE[name]
    strides = c_strides(shape) if strides is None else strides
    header = array_header(dtype, shape, strides)
    return header, header["nbytes"]


# --- plain cases with the messages users see -------------------------------------------------


def test_valid_header_round_trips():
    header, nbytes = valid("bfloat16", (4, 5), (1, 4))
    spec = parse_array(header, nbytes, TABLE)
    assert spec.shape == (4, 5)
    assert spec.strides == (1, 4)
    assert spec.dtype.name == "bfloat16"
    assert spec.nbytes == 40


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (1, 1, 7)])
def test_zero_dim_and_empty(shape):
    header, nbytes = valid("int64", shape)
    spec = parse_array(header, nbytes, TABLE)
    assert spec.numel == math.prod(shape)


def test_truncated_frame_is_refused():
    header, nbytes = valid()
    with pytest.raises(HeaderError, match="truncated"):
        parse_array(header, nbytes - 1, TABLE)


def test_longer_frame_is_refused():
    header, nbytes = valid()
    with pytest.raises(HeaderError, match="frame holds"):
        parse_array(header, nbytes + 4, TABLE)


def test_version_mismatch_says_what_to_do():
    header, nbytes = valid()
    header["version"] = VERSION + 1
    with pytest.raises(HeaderError, match="same dask_gpu_interop version"):
        parse_array(header, nbytes, TABLE)


@pytest.mark.parametrize("name", ["float128", "qint8", "__class__", "Tensor", "", "float32 "])
def test_unknown_dtype_is_refused(name):
    header, nbytes = valid()
    header["dtype"] = name
    with pytest.raises(HeaderError, match="unknown dtype"):
        parse_array(header, nbytes, TABLE)


def test_dtype_must_be_a_name():
    header, nbytes = valid()
    header["dtype"] = 4
    with pytest.raises(HeaderError, match="dtype must be a name"):
        parse_array(header, nbytes, TABLE)


def test_shape_that_does_not_match_nbytes():
    header, nbytes = valid()
    header["shape"] = (3, 3)
    with pytest.raises(HeaderError, match="36 bytes, the header says 24"):
        parse_array(header, nbytes, TABLE)


def test_overlapping_strides_are_refused():
    header, nbytes = valid(shape=(2, 3))
    header["strides"] = (1, 1)
    with pytest.raises(HeaderError, match="overlap or leave gaps"):
        parse_array(header, nbytes, TABLE)


def test_stride_past_the_frame_is_refused():
    header, nbytes = valid(shape=(2, 3))
    header["strides"] = (3, 2)
    with pytest.raises(HeaderError, match="overlap or leave gaps"):
        parse_array(header, nbytes, TABLE)


@pytest.mark.parametrize("value", [True, -1, 2**62, 1.0, "2", None])
def test_bad_extent_values(value):
    header, nbytes = valid(shape=(2, 3))
    header["shape"] = (value, 3)
    with pytest.raises(HeaderError):
        parse_array(header, nbytes, TABLE)


def test_too_many_dimensions():
    header, _ = valid()
    header["shape"] = (1,) * (MAX_NDIM + 1)
    header["strides"] = (1,) * (MAX_NDIM + 1)
    header["nbytes"] = 4
    with pytest.raises(HeaderError, match="dimensions"):
        parse_array(header, 4, TABLE)


def test_strides_of_the_wrong_length():
    header, nbytes = valid(shape=(2, 3))
    header["strides"] = (3,)
    with pytest.raises(HeaderError, match="1 strides for 2 dimensions"):
        parse_array(header, nbytes, TABLE)


@pytest.mark.parametrize("key", ["version", "dtype", "shape", "strides", "nbytes"])
def test_missing_keys(key):
    header, nbytes = valid()
    del header[key]
    with pytest.raises(HeaderError):
        parse_array(header, nbytes, TABLE)


@pytest.mark.parametrize("header", [None, [], "header", 3, b"x"])
def test_header_that_is_not_a_mapping(header):
    with pytest.raises(HeaderError, match="mapping"):
        parse_array(header, 0, TABLE)


def test_array_header_refuses_non_dense_layouts():
    with pytest.raises(ValueError, match="not dense"):
        array_header(TABLE["float32"], (4, 4), (8, 1))


# --- generated headers --------------------------------------------------------------------


@st.composite
def dense_layouts(draw):
    """(dtype name, shape, strides) of a dense array, in a random dimension order."""
    name = draw(st.sampled_from(NAMES))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=5)))
    order = draw(st.permutations(range(len(shape))))
    strides = [0] * len(shape)
    step = 1
    for dim in reversed(order):
        strides[dim] = step
        step *= max(shape[dim], 1)
    return name, shape, tuple(strides)


junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(-3, 2**63), max_size=6),
    st.tuples(st.integers(-3, 9), st.booleans()),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def tampered(draw):
    """A valid header and frame size, then one to three random edits."""
    name, shape, strides = draw(dense_layouts())
    header = array_header(TABLE[name], shape, strides)
    nbytes = header["nbytes"]
    for _ in range(draw(st.integers(1, 3))):
        edit = draw(st.sampled_from(["drop", "junk", "extent", "frame", "dtype", "nbytes", "dim"]))
        key = draw(st.sampled_from(sorted(header)))
        if edit == "drop":
            header.pop(key, None)
        elif edit == "junk":
            header[key] = draw(junk)
        elif edit == "extent" and isinstance(header.get("shape"), tuple) and header["shape"]:
            which = draw(st.sampled_from(["shape", "strides"]))
            values = list(header[which]) if isinstance(header.get(which), tuple) else []
            if values:
                i = draw(st.integers(0, len(values) - 1))
                values[i] = draw(st.integers(-2, 2**63))
                header[which] = tuple(values)
        elif edit == "frame":
            nbytes = max(0, nbytes + draw(st.integers(-64, 64)))
        elif edit == "dtype":
            header["dtype"] = draw(st.one_of(st.sampled_from(NAMES), st.text(max_size=12)))
        elif edit == "nbytes":
            header["nbytes"] = draw(st.integers(-8, 2**64))
        elif edit == "dim" and isinstance(header.get("shape"), tuple):
            header["shape"] = header["shape"] + (draw(st.integers(0, 4)),)
    return header, nbytes


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tampered())
def test_tampered_headers_are_refused_or_consistent(case):
    """Whatever the edits, the result is HeaderError, or a view that fits its frame exactly."""
    header, frame_nbytes = case
    try:
        spec = parse_array(header, frame_nbytes, TABLE)
    except HeaderError as err:
        assert str(err)  # says what was wrong
        return
    assert spec.dtype.name in TABLE
    assert spec.nbytes == frame_nbytes
    assert all(0 <= d < MAX_EXTENT for d in spec.shape)
    assert is_dense(spec.shape, spec.strides)
    if spec.numel:  # the farthest element is inside the frame
        last = sum((d - 1) * s for d, s in zip(spec.shape, spec.strides, strict=True))
        assert (last + 1) * spec.dtype.itemsize <= frame_nbytes


@settings(max_examples=500, deadline=None)
@given(dense_layouts())
def test_every_dense_layout_is_accepted(layout):
    name, shape, strides = layout
    header = array_header(TABLE[name], shape, strides)
    spec = parse_array(header, header["nbytes"], TABLE)
    assert spec.strides == strides


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=4),
    st.lists(st.integers(0, 40), min_size=4, max_size=4),
)
def test_is_dense_matches_a_brute_force_count(shape, strides):
    strides = strides[: len(shape)]
    numel = math.prod(shape)
    assume(numel > 0)
    offsets = {0}
    for d, s in zip(shape, strides, strict=True):
        offsets = {o + i * s for o in offsets for i in range(d)}
    dense = len(offsets) == numel and max(offsets) == numel - 1
    assert is_dense(shape, strides) == dense

"""Cutting the stream into chunks never loses a beat nor finds one twice, wherever the cuts are."""

import numpy as np
import pytest

from examples.ecg import metrics
from examples.ecg.params import Params
from examples.ecg.pipeline import find_beats
from examples.ecg.synthetic import make_ecg

RATE = 250.0


@pytest.fixture(scope="module")
def ecg():
    return make_ecg(180, RATE, seed=11, abnormal_fraction=0.05)


@pytest.fixture(scope="module")
def whole(ecg):
    """The beats found in one piece: what every chunking must reproduce."""
    beats = find_beats(ecg.signal, RATE, chunks=len(ecg.signal)).positions
    assert metrics.detection_scores(beats, ecg.peaks, RATE)["f1"] >= 0.99
    return beats


def assert_same_beats(got, expected):
    assert len(np.unique(got)) == len(got), "a beat was found twice"
    # The FFT of a differently sized window rounds differently in the last bits: allow one
    # sample, one to one, and nothing more.
    for_got, _ = metrics.match(np.sort(got), expected, tolerance=1)
    assert len(got) == len(expected) and np.all(for_got >= 0)


@pytest.mark.parametrize("size", [613, 997, 4096, 7919, 22_501])
def test_awkward_chunk_sizes(ecg, whole, size):
    assert_same_beats(find_beats(ecg.signal, RATE, chunks=size).positions, whole)


def test_cuts_right_at_beats_and_at_the_window_edges(ecg, whole):
    """A cut on an R peak, one sample either side, and at the NMS half-window either side."""
    w = Params().nms_half_window(RATE)
    offsets = [0, 1, -1, w, -w, w + 1, -w - 1, 2, -2]
    cuts = sorted({int(whole[5 + 7 * k]) + off for k, off in enumerate(offsets)})
    sizes = tuple(np.diff([0, *cuts, len(ecg.signal)]))
    got = find_beats(ecg.signal, RATE, chunks=sizes).positions
    assert_same_beats(got, whole)
    for cut in cuts:  # the beats next to each cut are there, once
        near = whole[np.abs(whole - cut) <= w + 1]
        for beat in near:
            assert np.sum(np.abs(got - beat) <= 1) == 1


def test_chunks_shorter_than_the_overlap(ecg, whole):
    """Windows then span several chunks: a 37-sample chunk is shorter than the NMS window."""
    part = ecg.signal[:5000]
    expected = find_beats(part, RATE, chunks=len(part)).positions
    got = find_beats(part, RATE, chunks=37).positions
    assert_same_beats(got, expected)


def test_pruning_and_segments_do_not_depend_on_chunks(ecg):
    one = find_beats(ecg.signal, RATE, chunks=len(ecg.signal))
    many = find_beats(ecg.signal, RATE, chunks=1234)
    assert_same_beats(many.positions, one.positions)
    np.testing.assert_array_equal(one.kept, many.kept)
    np.testing.assert_allclose(one.starts[one.kept], many.starts[many.kept], atol=2)
    np.testing.assert_allclose(one.ends[one.kept], many.ends[many.kept], atol=2)

"""Lending host buffers for chunks (the page-locked kind runs in test_mortgage_gpu)."""

from __future__ import annotations

import numpy as np
import pytest

from examples.mortgage import chunk_bytes, read


def test_buffers_are_lent_again_the_smallest_that_fits():
    buffers = chunk_bytes.Buffers(pinned=False, keep=2)
    big = buffers.take(800)
    small = buffers.take(80)
    assert buffers.allocated == 2 and big.size == 800 and small.size == 80
    assert buffers.lent(big[10:20]) and not buffers.lent(np.zeros(3, np.uint8))
    buffers.give(big)
    buffers.give(small)
    assert not buffers.lent(big)
    again = buffers.take(50)  # the small one fits: the big one stays idle
    assert np.may_share_memory(again, small) and buffers.allocated == 2
    larger = buffers.take(850)  # an eighth more than 800 was made: still fits
    assert np.may_share_memory(larger, big) and buffers.allocated == 2
    buffers.take(2000)
    assert buffers.allocated == 3


def test_buffers_keep_only_the_largest_idle_ones():
    buffers = chunk_bytes.Buffers(pinned=False, keep=1)
    views = [buffers.take(n) for n in (10, 20, 30)]
    for view in views:
        buffers.give(view)
    kept = buffers.take(1)  # only the largest idle buffer is left to lend
    assert np.may_share_memory(kept, views[2])
    buffers.take(1)
    assert buffers.allocated == 4


def test_a_failed_read_gives_its_lent_buffer_back(tmp_path):
    path = tmp_path / "chunk.txt"
    path.write_bytes(b"1|a\n2|b\n" * 100)

    class Truncated(read.Source):
        def extent(self):
            return 0, path.stat().st_size + 10  # more than the file holds

    class Upload:  # DeviceUpload's host side, without a device
        buffers = chunk_bytes.Buffers(pinned=False)
        host = None

        def allocate(self, nbytes):
            self.host = self.buffers.take(nbytes)
            return self.host

        def done(self, a, b):
            pass

    upload = Upload()
    with pytest.raises(EOFError, match="chunk.txt ended at byte"):
        chunk_bytes._read_lent(Truncated(str(path)), upload)
    assert upload.buffers.allocated == 1 and not upload.buffers._lent


def test_fetch_on_cpus_reads_into_numpy_memory(tmp_path):
    path = tmp_path / "chunk.txt"
    path.write_bytes(b"1|a\n2|b\n" * 100)
    chunk = chunk_bytes.fetch(read.Source(str(path)), gpu=False)
    assert chunk.data.tobytes() == path.read_bytes() and chunk.offset == 0
    assert chunk.upload is None and chunk.buffers is None
    chunk.release()  # nothing lent: nothing to give back

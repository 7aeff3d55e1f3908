"""Byte counts in the library's words: one formatter for the memory report and the plugin's
messages."""

from dask_gpu_interop.memory.byte_text import byte_text
from dask_gpu_interop.memory.report import MemoryReport

GiB = 2**30


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

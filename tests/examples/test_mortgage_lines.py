"""The line layout behind the reader's checks, with NumPy (the CUDA kernel is compared with
this in tests/test_mortgage_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from examples.mortgage import lines


def _of(data: bytes, filled=True):
    return lines.of(np.frombuffer(data, dtype=np.uint8), np, filled=filled)


def test_lines_fields_and_blanks():
    layout = _of(b"1||3\n\n4|5|\r\n|x|\n")
    assert layout.starts.tolist() == [0, 5, 6, 12]
    assert layout.ends.tolist() == [4, 5, 10, 15]  # "\r" is not part of the line
    assert layout.blank.tolist() == [False, True, False, False]
    assert layout.separators.tolist() == [2, 0, 2, 2]
    assert not layout.wrong(3).any() and layout.rows == 3
    assert layout.filled_counts([0, 1, 2]) == [2, 2, 1]


@pytest.mark.parametrize("data, rows", [(b"", 0), (b"\n", 0), (b"a|b", 1), (b"a|b\n", 1),
                                        (b"a|b\n\n\nc|d", 2)])
def test_ends_with_or_without_a_newline(data, rows):
    layout = _of(data)
    assert layout.rows == rows
    assert not layout.wrong(2).any()


def test_wrong_field_counts_are_found():
    layout = _of(b"1|2|3\n1|2\n1|2|3|4\n\n1|2|3\n")
    assert layout.wrong(3).tolist() == [False, True, True, False, False]


def test_filled_mask_matches_a_split_of_every_line():
    rng = np.random.default_rng(3)
    alphabet = np.array(list(b"|||ab1.\r"), dtype=np.uint8)
    text = bytes(rng.choice(alphabet, 5000))
    text = b"\n".join(text[i:i + rng.integers(0, 60)] for i in range(0, 5000, 40))
    layout = _of(text)
    for i, (s, e) in enumerate(zip(layout.starts.tolist(), layout.ends.tolist(), strict=True)):
        fields = text[s:e].split(b"|")
        assert layout.separators[i] == len(fields) - 1
        want = sum(1 << j for j, f in enumerate(fields[:32]) if f)
        assert int(layout.filled[i]) == want


def test_filled_counts_need_the_mask():
    with pytest.raises(ValueError, match="filled=True"):
        _of(b"1|2\n", filled=False).filled_counts([0])


def test_field_hashes_are_equal_for_equal_texts_and_zero_for_blanks():
    data = b"a|01/2007|x\nb||x\nc|01/2007|\r\nd|01/2008|y\n"
    raw = np.frombuffer(data, dtype=np.uint8)
    layout = lines.of(raw, np)
    dates = lines.field_hashes(raw, layout.starts, layout.ends, 1, np)
    assert dates[0] == dates[2] != dates[3] and dates[1] == 0
    assert (dates[[0, 3]] % 2 == 1).all()
    last = lines.field_hashes(raw, layout.starts, layout.ends, 2, np)
    assert last[0] == last[1] != last[3] and last[2] == 0  # "\r" is not part of the field


def _decoded(found, raw, field):
    """Each line's field text, read back through the slots (None for a blank)."""
    data = raw.tobytes()
    texts = {}
    for slot in np.flatnonzero(found.hashes[field[0]]):
        a, b = int(found.starts[field[0], slot]), int(found.ends[field[0], slot])
        texts[int(slot)] = data[a:b].split(b"|")[field[1]]
    return [texts.get(int(code)) for code in found.codes[field[0]]]


def test_field_slots_give_each_line_the_text_of_its_field():
    rng = np.random.default_rng(5)
    words = [b"", b"01/2007", b"02/2007", b"X", b"0", b"12", b"N"]
    rows = [[bytes(str(i), "ascii")] + [words[k] for k in rng.integers(0, len(words), 4)]
            for i in range(300)]
    data = b"".join(b"|".join(r) + b"\n" for r in rows)
    raw = np.frombuffer(data, dtype=np.uint8)
    layout = lines.of(raw, np)
    found = lines.field_slots(raw, layout.starts, layout.ends, [1, 3, 4], np, slots=16)
    assert not found.full
    for j, field in enumerate([1, 3, 4]):
        want = [r[field] or None for r in rows]
        assert _decoded(found, raw, (j, field)) == want
        assert found.blank[j] == any(not r[field] for r in rows)
        used = found.hashes[j] != 0
        assert int(used.sum()) == len({r[field] for r in rows} - {b""})


def test_field_slots_say_when_a_table_is_full():
    data = b"".join(b"%d|v%d\n" % (i, i) for i in range(20))
    raw = np.frombuffer(data, dtype=np.uint8)
    layout = lines.of(raw, np)
    assert lines.field_slots(raw, layout.starts, layout.ends, [1], np, slots=16).full
    assert not lines.field_slots(raw, layout.starts, layout.ends, [1], np, slots=32).full


@pytest.mark.parametrize("fields, slots", [([2, 1], 16), ([1, 1], 16), ([1], 12)])
def test_field_slots_refuse_bad_arguments(fields, slots):
    layout = _of(b"1|2|3\n")
    with pytest.raises(ValueError):
        lines.field_slots(np.frombuffer(b"1|2|3\n", dtype=np.uint8), layout.starts, layout.ends,
                          fields, np, slots=slots)

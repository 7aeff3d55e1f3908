"""examples/ecg_pipeline.py, the ECG pipeline in one file: its beats, its hand-offs, its errors.

The detection needs no PyTorch; the whole run (Numba's beats into PyTorch) skips without it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import numpy as np
import pytest

from examples import ecg_pipeline as one_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "ecg_pipeline.py")
RATE = 360.0  # MIT-BIH record 208


def _beats(blocksize: str) -> tuple[int, np.ndarray]:
    with dask.config.set(scheduler="sync"):
        signal = one_file.read_signal(one_file.RECORD, "ecg_mv", blocksize)
        return signal.numblocks[0], one_file.find_beats(signal, RATE)


def test_where_the_file_is_cut_changes_no_beat():
    """Each chunk reads a margin of its neighbours and the threshold is the whole recording's,
    so one chunk and nineteen find the same beats."""
    chunks, whole = _beats("default")
    many, cut = _beats("37kB")
    assert (chunks, many) == (1, 19)
    np.testing.assert_array_equal(cut, whole)


def test_the_beats_of_record_208_are_its_heart_rate():
    """Five minutes of MIT-BIH record 208: the full application finds 502 beats; about 100
    per minute, never two within 0.2 s, every one with its whole window in the recording."""
    _, beats = _beats("default")
    assert 490 <= len(beats) <= 520
    assert np.diff(beats).min() >= one_file.SPACING_SECONDS * RATE
    assert beats.min() > one_file.BEFORE * RATE
    assert beats.max() < 5 * 60 * RATE - one_file.AFTER * RATE


def test_numba_cuts_each_beat_by_linear_interpolation():
    x = np.arange(100, dtype=np.float32) ** 2
    out = np.empty((2, one_file.SIZE), dtype=np.float32)
    assert one_file.cut_beats(x, np.array([1.5, 10.0]), 0.25, out)
    np.testing.assert_allclose(out[0, :3], [2.5, 3.25, 4.0])  # between 1, 4 and 9
    np.testing.assert_allclose(out[1, 4], 121.0)  # at 11: a sample itself


def test_the_whole_run_hands_the_beats_on_without_a_copy(capsys):
    pytest.importorskip("torch")
    positions, scores, in_place = one_file.main(["--device", "cpu", "--blocksize", "100kB"])
    out = capsys.readouterr().out
    assert in_place == {"Numba": True, "PyTorch": True}
    assert "handed on without a copy: to Numba yes, to PyTorch yes" in out
    assert len(scores) == len(positions) and np.isfinite(scores).all()
    flagged = int(out.split("outliers: ")[1].split(" of ")[0])
    assert 0 < flagged < len(scores) // 2
    assert out.rstrip().endswith("no GPU: the plugin does nothing here")  # the memory report


@pytest.mark.parametrize("args, message", [
    (["--csv", "/nonexistent/ecg.csv"], "--csv /nonexistent/ecg.csv: no such file"),
    (["--rate", "20"], "--rate 20: too low"),
    (["--device", "gpu"], "device='gpu'"),
])
def test_bad_input_is_one_line_before_any_work(args, message):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    assert done.stdout == ""


def test_the_file_is_one_a_user_can_copy():
    text = open(SCRIPT).read()
    assert len(text.splitlines()) <= 200
    assert "from examples" not in text and "import examples" not in text
    assert "GPUMemoryPlugin(" in text and "memory_report(client)" in text


@pytest.mark.gpu
def test_on_a_gpu_cudf_cupy_numba_and_torch_share_the_memory(capsys):
    """cuDF partitions, CuPy chunks, a Numba CUDA kernel and PyTorch on the GPU: the beats
    found on CPUs (CuPy may convolve by FFT, whose rounding can move a borderline candidate),
    and both hand-offs without a copy."""
    pytest.importorskip("torch")
    _, expected = _beats("default")
    positions, scores, in_place = one_file.main(["--device", "gpu"])
    out = capsys.readouterr().out
    assert len(np.intersect1d(positions, expected)) >= 0.99 * len(expected)
    assert abs(len(positions) - len(expected)) <= 0.01 * len(expected)
    assert in_place == {"Numba": True, "PyTorch": True}
    assert "on gpu" in out and np.isfinite(scores).all()

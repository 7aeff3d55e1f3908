"""examples/ecg_pipeline.py, the ECG pipeline in one file: its beats, its hand-offs, its errors.

The detection needs no PyTorch; the whole run (Numba's beats into PyTorch) skips without it.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

import dask
import numpy as np
import pytest

from examples import ecg_pipeline as one_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "ecg_pipeline.py")
RATE = 360.0  # MIT-BIH record 208


def _beats(blocksize) -> tuple[int, np.ndarray]:
    with dask.config.set(scheduler="sync"):
        values = one_file.read_values(one_file.RECORD, "ecg_mv", blocksize)
        signal = values.to_dask_array(lengths=True)
        return signal.numblocks[0], one_file.find_beats(signal, RATE)


def test_where_the_file_is_cut_changes_no_beat():
    """Each chunk reads a margin of its neighbours and the threshold is the whole recording's,
    so one chunk and nineteen find the same beats."""
    chunks, whole = _beats("64MB")
    many, cut = _beats("37kB")
    assert (chunks, many) == (1, 19)
    np.testing.assert_array_equal(cut, whole)


def test_the_beats_of_record_208_are_its_heart_rate():
    """Five minutes of MIT-BIH record 208: the full application finds 502 beats; about 100
    per minute, never two within 0.2 s, every one with its whole window in the recording."""
    _, beats = _beats("64MB")
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


def _run(args, cwd=ROOT, script=SCRIPT):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for --device gpu either
    return subprocess.run([sys.executable, script, "--device", "cpu", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=env)


def _refused(args, message, cwd=ROOT, script=SCRIPT):
    """``args`` refused by argparse in one line naming ``message``, nothing started."""
    done = _run(args, cwd, script)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    assert done.stdout == ""
    return done.stderr


def _recording(tmp_path, edit) -> str:
    """Record 208 passed through ``edit`` (its lines in, the new file's lines out)."""
    with open(one_file.RECORD) as f:
        lines = f.read().splitlines()
    path = tmp_path / "ecg.csv"
    path.write_text("\n".join(edit(lines)) + "\n")
    return str(path)


def _with_time(lines, sep):
    return [f"time{sep}{lines[0]}"] + [f"{i / RATE}{sep}{v}" for i, v in enumerate(lines[1:])]


@pytest.mark.parametrize("args, message", [
    (["--csv", "/nonexistent/ecg.csv", "--rate", "360"], "No such file or directory"),
    (["--rate", "20"], "--rate 20: too low"),
    (["--rate", "nan"], "--rate nan: too low or high"),
    (["--device", "gpu"], "--device 'gpu' but no CUDA GPU is visible here"),
    (["--column", "ecg"], "has no column 'ecg': give --column, one of ['ecg_mv']"),
    (["--csv", "{time}", "--rate", "360", "--column", "mv"], "one of ['time', 'ecg_mv']"),
    (["--csv", "{no header}", "--rate", "360"], "has no header line: add one naming"),
    (["--csv", "{semicolons}", "--rate", "360"], "is not comma-separated: save it as CSV"),
    (["--csv", "{tabs}", "--rate", "360"], "is not comma-separated: save it as CSV"),
    (["--csv", "{parquet}", "--rate", "360"], "is empty, or not CSV text (compressed?)"),
    (["--csv", "{empty}", "--rate", "360"], "is empty, or not CSV text (compressed?)"),
    (["--csv", "{time}"], "--csv needs --rate HZ"),
    (["--blocksize", "banana"], "argument --blocksize: invalid parse_bytes value: 'banana'"),
    (["--blocksize", "10"], "--blocksize 10 B: give 9.77 kiB or more"),
    (["--workers", "-1"], "--workers -1: give at least 1"),
    (["--workers", "0"], "--workers 0: give at least 1"),
])
def test_bad_input_is_one_line_before_any_work(args, message, tmp_path):
    """Before anything starts: ``--workers -1`` and ``--blocksize 10`` would start work
    that never ends, and a recording's own CSV has its own rate, not record 208's."""
    files = {
        "{time}": lambda: _recording(tmp_path, lambda lines: _with_time(lines, ",")),
        "{no header}": lambda: _recording(tmp_path, lambda lines: lines[1:]),
        "{semicolons}": lambda: _recording(tmp_path, lambda lines: _with_time(lines, ";")),
        "{tabs}": lambda: _recording(tmp_path, lambda lines: _with_time(lines, "\t")),
        "{parquet}": lambda: _parquet(tmp_path),
        "{empty}": lambda: _recording(tmp_path, lambda lines: []),
    }
    _refused([files[a]() if a in files else a for a in args], message)


def _parquet(tmp_path) -> str:
    import pandas as pd

    path = tmp_path / "ecg.parquet"
    pd.read_csv(one_file.RECORD).to_parquet(path)
    return str(path)


@pytest.mark.parametrize("case, message", [
    ("n/a", "1 value(s) of ecg_mv not a number, first at sample 4,999: fill or cut"),
    ("abc", "1 value(s) of ecg_mv not a number, first at sample 4,999"),
    ("a header line only", "0 values, under 10 s at 360 Hz: give a longer recording"),
])
def test_values_that_are_no_ecg_are_one_line_before_the_beats(case, message, tmp_path):
    """Read on the workers, the values are checked before any beat is looked for: a
    missing value inside a beat would make every score NaN, and flag no outlier."""
    if case == "a header line only":
        path = _recording(tmp_path, lambda lines: lines[:1])
    else:
        path = _recording(tmp_path, lambda lines: [*lines[:5000], case, *lines[5001:]])
    done = _run(["--csv", path, "--rate", "360", "--workers", "1"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and "Compute Failed" not in done.stderr
    assert "beats" not in done.stdout


def test_a_header_spaced_after_its_commas_names_its_columns(tmp_path):
    """``time, ecg_mv``: the column is ecg_mv, as the header check reads it."""
    pytest.importorskip("torch")
    path = _recording(tmp_path, lambda lines: _with_time(lines, ", "))
    done = _run(["--csv", path, "--rate", "360", "--workers", "1"])
    assert done.returncode == 0, done.stderr
    assert f"{len(_beats('64MB')[1]):,} beats in 5.0 min" in done.stdout


def test_a_copy_elsewhere_names_no_path_the_user_never_gave(tmp_path):
    shutil.copy(SCRIPT, tmp_path)
    said = _refused([], "no --csv given, and no record beside this file", cwd=tmp_path,
                    script=str(tmp_path / "ecg_pipeline.py"))
    assert "record208" not in said


def test_a_scheduler_address_where_no_scheduler_answers_is_one_line():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _refused(["--scheduler", f"tcp://127.0.0.1:{server.server_port}"],
                 "no Dask scheduler answered at tcp://127.0.0.1:")
    finally:
        server.shutdown()


def test_on_a_started_cluster_the_same_beats(running):
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, SCRIPT, *running], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(_beats('64MB')[1]):,} beats in 5.0 min" in done.stdout


def test_the_file_reads_like_a_demo():
    text = open(SCRIPT).read()
    lines = text.splitlines()
    assert len(lines) <= 250
    assert max(len(line) for line in lines) <= 88
    assert "from examples" not in text and "import examples" not in text
    for name in ("cluster_client(", "memory_report(client)"):
        assert f"dask_gpu_interop.{name}" in text
    assert not re.search(r"dask_gpu_interop\.(_|\w+\.)", text)  # public names only


@pytest.mark.gpu
def test_on_a_gpu_cudf_cupy_numba_and_torch_share_the_memory(capsys):
    """cuDF partitions, CuPy chunks, a Numba CUDA kernel and PyTorch on the GPU: the beats
    found on CPUs (CuPy may convolve by FFT, whose rounding can move a borderline candidate),
    and both hand-offs without a copy."""
    pytest.importorskip("torch")
    _, expected = _beats("64MB")
    positions, scores, in_place = one_file.main(["--device", "gpu"])
    out = capsys.readouterr().out
    assert len(np.intersect1d(positions, expected)) >= 0.99 * len(expected)
    assert abs(len(positions) - len(expected)) <= 0.01 * len(expected)
    assert in_place == {"Numba": True, "PyTorch": True}
    assert "on gpu" in out and np.isfinite(scores).all()

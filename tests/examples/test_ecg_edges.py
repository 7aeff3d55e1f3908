"""``python -m examples.ecg`` at its edges, on CPUs: a user's files in ``--out`` are never
replaced, what a killed run left is removed by the next one, and bad values are refused in one
line before any work."""

from __future__ import annotations

import importlib.util
import os

import pytest

from examples import staging
from examples.ecg import outputs
from examples.ecg.cli import ecg as main

from .commands import CPU, as_program, dead_pid, interrupted, invoke, refused


# The command checks for PyTorch (the ECG trains its model with it) before the checks these
# tests look for: without it (the README's test install) they skip, and run where it is.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the ECG command needs PyTorch")


def _run(args):
    return invoke(main, [*CPU, *args])


def _tree(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@needs_torch
@pytest.mark.parametrize("mine", [["ecg.csv"], ["stream.png"], ["ecg.csv", "decoded.png"]])
def test_a_users_files_in_out_are_never_replaced(tmp_path, mine):
    out = tmp_path / "out"
    out.mkdir()
    for name in mine:
        (out / name).write_text("my own\n")
    (out / "notes.txt").write_text("my notes\n")
    before = _tree(out)
    line = refused(_run(["--hours", "0.05", "--out", str(out)]), *mine, "did not write")
    assert "notes.txt" not in line
    assert _tree(out) == before


@needs_torch
def test_a_users_recording_named_ecg_csv_is_read_not_replaced(tmp_path):
    """With --csv nothing is written to ecg.csv: a file of that name in --out is no matter."""
    out = tmp_path / "out"
    out.mkdir()
    recording = "ecg\n" + "0.5\n" * 1000
    (out / "ecg.csv").write_text(recording)
    (out / "stream.png").write_text("my own\n")
    refused(_run(["--csv", str(out / "ecg.csv"), "--rate", "250", "--out", str(out)]),
            "stream.png")
    assert (out / "ecg.csv").read_text() == recording


def test_only_files_the_command_wrote_and_nobody_changed_are_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in outputs.PICTURES:
        outputs.write(out, name, lambda path: open(path, "w").write("first"))
    outputs.check(out, outputs.PICTURES)  # its own, as written: a later run replaces them
    outputs.write(out, "stream.png", lambda path: open(path, "w").write("second"))
    assert (out / "stream.png").read_text() == "second"
    (out / "latent.png").write_text("edited by hand")
    with pytest.raises(ValueError, match="latent.png, which this command did not write"):
        outputs.check(out, outputs.PICTURES)
    assert (out / "latent.png").read_text() == "edited by hand"
    assert sorted(os.listdir(out)) == sorted([outputs.MARKER, *outputs.PICTURES])


def test_a_dead_runs_hidden_file_is_removed_by_the_next_run(tmp_path):
    dead = dead_pid()
    out = tmp_path / "out"
    out.mkdir()
    name = staging.hidden_name("ecg.csv", suffix=".csv").replace(
        f"-{os.getpid()}-", f"-{dead}-")
    (out / name).write_text("0.1\n" * 100)
    (out / ".ecg.csv.partial-mine").write_text("not a name the command makes")
    outputs.check(out, [outputs.CSV])
    assert sorted(os.listdir(out)) == [".ecg.csv.partial-mine"]


@pytest.mark.parametrize("value, words", [
    ("10", ["--blocksize", "'10' is below 1MB"]),
    ("0", ["--blocksize", "below 1MB"]),
    ("banana", ["--blocksize", "'banana' is not a size"]),
])
def test_a_blocksize_that_is_no_size_or_too_small_is_refused_before_any_work(tmp_path, value,
                                                                              words):
    refused(_run(["--hours", "0.05", "--out", str(tmp_path / "out"), "--blocksize", value]),
            *words)
    assert os.listdir(tmp_path) == []


@needs_torch
def test_an_out_that_cannot_be_a_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    refused(_run(["--hours", "0.05", "--out", str(blocker / "pictures")]), "is a file")
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: False)  # a read-only mount
    refused(_run(["--hours", "0.05", "--out", str(tmp_path / "out")]), "not writable")
    assert os.listdir(tmp_path) == ["a-file"]


@needs_torch
def test_figures_may_not_take_the_name_of_a_picture(tmp_path):
    out = tmp_path / "out"
    refused(_run(["--hours", "0.05", "--out", str(out), "--json", str(out / "stream.png")]),
            "one of the files the run writes")


# ---------------------------------------------------------------------------------------------
# Mistakes answered before any work


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "rec.csv"
    path.write_text("ecg\n" + "".join(f"{0.1 * (i % 7):.1f}\n" for i in range(2000)))
    return path


@pytest.mark.parametrize("flaw, args, words", [
    ("gzip", [], ["gzip-compressed", "decompress it first"]),
    ("header only", [], ["holds no values"]),
    ("semicolons", [], [":2:", "is not a number"]),
    (None, ["--column", "3"], ["column 3 asked for", "1 field(s)"]),
])
@needs_torch
def test_a_recording_that_cannot_be_read_is_named_before_the_cluster_starts(
        tmp_path, recording, flaw, args, words):
    path = recording
    if flaw == "gzip":
        import gzip

        path = tmp_path / "rec.csv.gz"
        path.write_bytes(gzip.compress(recording.read_bytes()))
    elif flaw == "header only":
        recording.write_text("ecg\n")
    elif flaw == "semicolons":
        recording.write_text(recording.read_text().replace("\n", ";0.5\n").replace("ecg;0.5",
                                                                                   "ecg;x"))
    refused(_run(["--csv", str(path), "--rate", "250", "--out", str(tmp_path / "out"),
                  *args]), *words, exit_code=1)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, words", [
    (["--seed", "-1"], ["--seed", "-1 is not in the range"]),
    (["--hours", "0.0005"], ["--hours 0.0005", "too short", "at least"]),
    (["--hours", "0.05", "--rate", "1e9"], ["samples", "of memory", "lower --rate"]),
    (["--hours", "1e6"], ["samples", "of memory", "fewer --hours"]),
])
@needs_torch
def test_a_synthetic_recording_that_cannot_be_made_or_used_is_refused_first(tmp_path, args,
                                                                            words):
    refused(_run([*args, "--out", str(tmp_path / "out")]), *words)
    assert os.listdir(tmp_path) == []


def test_a_recording_checked_before_the_cluster_is_not_read_again_unless_changed(
        recording, monkeypatch):
    from examples.ecg import reader

    checked = []
    real = reader.check_values
    monkeypatch.setattr(reader, "check_values",
                        lambda *args: checked.append(args) or real(*args))
    assert reader.check_file(recording) == (True, 1)
    reader.read_csv(recording, reader.Backend("cpu"))
    assert len(checked) == 1
    recording.write_text("ecg\n0.5\n0.25\n")  # changed since: read again
    reader.read_csv(recording, reader.Backend("cpu"))
    assert len(checked) == 2


@needs_torch
def test_a_path_from_the_home_folder_the_shell_left_unexpanded_is_read_from_there(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "rec.csv").write_text("ecg\n")
    refused(_run(["--csv=~/rec.csv", "--rate", "250", "--out=~/out"]),
            f"{tmp_path}/rec.csv holds no values", exit_code=1)


def test_the_cli_module_run_as_a_program_is_the_command():
    done = as_program("examples.ecg.cli", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m examples.ecg ")


@needs_torch
@pytest.mark.parametrize("started_line", ["cluster:", "written to"])
def test_ctrl_c_stops_the_command_in_one_line_and_leaves_no_hidden_file(tmp_path,
                                                                         started_line):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once the command
    prints ``started_line``: while the recording is made, or while the pipeline runs."""
    out = tmp_path / "out"
    output, code = interrupted("examples.ecg", [*CPU, "--hours", "1", "--out", str(out)],
                               started_line)
    assert code == 130, output
    assert output.strip().splitlines()[-1].startswith("interrupted"), output
    for noise in ("Traceback", "KeyboardInterrupt", "Aborted"):
        assert noise not in output, output
    assert not [name for name in os.listdir(out) if ".partial-" in name]


@needs_torch
def test_a_recording_larger_than_the_free_disk_is_refused_before_any_work(tmp_path,
                                                                          monkeypatch):
    import shutil

    from examples.ecg import cli

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=100_000))
    refused(_run(["--hours", "0.05", "--out", str(tmp_path / "out")]), "of CSV", "free",
            "another --out")
    assert os.listdir(tmp_path) == [] and cli.CSV_BYTES * 45_000 > 100_000


@needs_torch
def test_a_full_disk_while_writing_is_one_line(tmp_path, monkeypatch):
    import errno

    from examples.ecg import plots

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    from examples.ecg.synthetic import make_ecg, write_csv

    recording = tmp_path / "rec.csv"
    write_csv(recording, make_ecg(120, 250, seed=0).signal)
    monkeypatch.setattr(plots, "write_all", full)
    result = _run(["--no-processes", "--csv", str(recording), "--rate", "250", "--out",
                   str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: the disk is full")

"""examples.command: ``run`` lets a command's output and exit status come through, and the
process ends without Python's finalizers; ``EndsInOneLine`` ends a command stopped by Ctrl-C or
a full disk in one line."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """
import atexit, sys, click
from examples.command import run

atexit.register(lambda: print("finalizer ran"))

@click.command()
@click.option("--exit", "code", default=None)
def main(code):
    print("lines", "of output", sep="\\n", end="")  # unflushed, no newline at the end
    if code == "message":
        sys.exit("one line saying what went wrong")
    if code is not None:
        sys.exit(int(code))

run(main, "prog")
"""


def _run(*args):
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("args, code", [((), 0), (("--exit", "0"), 0), (("--exit", "3"), 3),
                                        (("--bogus",), 2)])
def test_the_output_and_exit_status_come_through_without_finalizers(args, code):
    done = _run(*args)
    assert done.returncode == code, done.stderr
    assert "finalizer ran" not in done.stdout
    if code != 2:
        assert done.stdout == "lines\nof output"
    else:
        assert "No such option" in done.stderr


def test_a_message_given_to_sys_exit_is_printed_with_status_1():
    done = _run("--exit", "message")
    assert done.returncode == 1
    assert done.stderr.strip() == "one line saying what went wrong"


@pytest.mark.parametrize("package, command", [("mortgage", "mortgage"), ("ecg", "ecg")])
def test_an_entry_point_prepares_the_command_lines_cluster_before_importing_the_command(
        monkeypatch, package, command):
    import importlib
    import runpy

    import dask_gpu_interop.cluster.options
    import examples.command

    cli = importlib.import_module(f"examples.{package}.cli")
    seen = []
    monkeypatch.setattr(dask_gpu_interop.cluster.options, "prepare_from_command_line",
                        lambda: seen.append(f"examples.{package}.cli" in sys.modules))
    monkeypatch.setattr(examples.command, "run",
                        lambda command, prog_name: seen.append(command.name))
    # imported afresh here; every other test keeps the module it had
    monkeypatch.setattr(importlib.import_module(f"examples.{package}"), "cli", cli)
    monkeypatch.delitem(sys.modules, f"examples.{package}.cli")
    runpy.run_module(f"examples.{package}", run_name="__main__")
    # called once, before the command's own modules were imported; then the command ran
    assert seen == [False, command]


LATE_WRITE = """
import os, sys, click
from examples.command import run
from examples.mortgage import output

@click.command()
@click.argument("out")
def main(out):
    staging = []
    try:
        with output.Staged(out, what="table") as folder:
            staging.append(folder)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    # a worker's task still running as the work stopped writes into the removed folder
    os.makedirs(os.path.join(staging[0], "part"))
    open(os.path.join(staging[0], "part", "0.parquet"), "w").close()
    sys.exit(130)

run(main, "prog")
"""


def test_an_unfinished_output_written_into_after_it_was_removed_is_gone_when_run_ends(
        tmp_path):
    done = subprocess.run([sys.executable, "-c", LATE_WRITE, str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 130, done.stderr
    assert os.listdir(tmp_path) == []


INTERRUPTED_IN_A_GC_CALLBACK = """
import gc, signal, sys, time, click
from examples.command import run

@click.command()
def main():
    def callback(phase, info):  # as distributed's GC diagnosis: Ctrl-C may land in it
        if phase == "start" and not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)
            sum(range(1000))  # Python runs the handler here, inside the callback

    pressed = []
    gc.callbacks.append(callback)
    try:
        gc.collect()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
        print("ran on: the interrupt was dropped")
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(130)

run(main, "prog")
"""


def test_ctrl_c_inside_a_garbage_collector_callback_is_not_dropped():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IN_A_GC_CALLBACK],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 130 and done.stdout == "interrupted\n", done


def test_ctrl_c_is_held_back_until_an_uninterrupted_block_ends():
    import signal

    from examples.staging import uninterrupted

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            signal.raise_signal(signal.SIGINT)
            steps.append("after the signal")
            steps.extend(range(3))
        steps.append("after the block")
    assert steps == ["after the signal", 0, 1, 2]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("base", [click.Command, click.Group])
def test_ctrl_c_and_a_full_disk_end_a_command_in_one_line_naming_what_is_removed(base):
    from examples.command import EndsInOneLine

    class Command(EndsInOneLine, base):
        unfinished = "tables"
        elsewhere = "give another --out"

    def run(error):
        def fail(**kwargs):
            raise error

        extra = {"invoke_without_command": True} if base is click.Group else {}
        return CliRunner().invoke(Command("x", callback=fail, **extra), [],
                                  catch_exceptions=False)

    for code in (errno.ENOSPC, errno.EDQUOT):
        done = run(OSError(code, "No space left"))
        assert done.exit_code == 1
        assert done.output == ("Error: the disk is full (No space left): free some space or "
                               "give another --out; the tables not finished are removed\n")
    done = run(KeyboardInterrupt())
    assert done.exit_code == 130
    assert done.output == "interrupted: the tables not finished are removed\n"
    with pytest.raises(PermissionError):  # not the disk: the command's own error stands
        run(PermissionError(errno.EACCES, "Permission denied"))

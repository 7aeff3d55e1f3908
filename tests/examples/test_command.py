"""examples.command.run: a command's output and exit status come through, and the process
ends without Python's finalizers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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

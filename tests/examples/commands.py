"""What the tests of the examples' commands share: the flags of a run on one CPU worker, a
command run in the test's process or as a program, the checks of how it ended (refused in one
line, or stopped by Ctrl-C), and the id of a process that has ended, as a killed run's is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from click.testing import CliRunner

CPU = ["--device", "cpu", "--workers", "1"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def invoke(command, args, **kwargs):
    """The result of the click ``command`` run here with ``args`` (as a user types them); an
    exception it does not turn into a message reaches the test."""
    return CliRunner().invoke(command, [*args], catch_exceptions=False, **kwargs)


def refused(result, *words, exit_code: int = 2) -> str:
    """The one error line of a command that stopped before starting a cluster, which holds
    each of ``words``: exit status 2 for a value click refused, 1 for a failure the command
    named itself."""
    assert result.exit_code == exit_code, result.output
    assert "cluster:" not in result.output and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    for word in words:
        assert word in line, line
    return line


def as_program(module: str, *args) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` run from the repository's root, its output as text."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def started(module: str, *args) -> subprocess.Popen:
    """``python -m MODULE ARGS`` started as a terminal would start it (a process group of its
    own, output unbuffered) on CPUs: its output, stderr included, read line by line."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=ROOT, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})


def interrupted(module: str, args, started_line: str) -> tuple[str, int]:
    """Run ``python -m MODULE ARGS`` (:func:`started`), press Ctrl-C (SIGINT to its whole
    process group, as a terminal sends it) once it prints a line starting with
    ``started_line``: its output and exit status."""
    process = started(module, *args)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith(started_line):
                os.killpg(process.pid, signal.SIGINT)
                break
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return "".join(lines) + rest, process.returncode


def dead_pid() -> int:
    """The id of a process that has ended: what a run killed outright left names it."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)

"""Run an example's click command as a program, and end the process as soon as it is done.

When a command returns, its cluster is closed and its files are written; what Python does
after that (finalizers of every module loaded, the GPU stack's CUDA contexts torn down one
object at a time) is time the user waits at the prompt for nothing. :func:`run` flushes the
output and ends the process there, with the command's exit status. Used only under
``python -m``: imported, a command returns as usual (the tests call it that way). What must
still happen as the process ends (removing an unfinished output that a worker wrote into after
it was first removed) is registered with :func:`at_end`, which :func:`run` calls before it ends
the process.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

import click

_AT_END: list = []


class UserPath(click.Path):
    """A path option that reads a leading ``~`` as the home folder, as the shell does where it
    can: ``--out=~/data`` reaches the command unexpanded, and would otherwise name a folder
    ``~`` in the working directory."""

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            value = os.path.expanduser(value)
        return super().convert(value, param, ctx)


def at_end(function, *args) -> None:
    """Call ``function(*args)`` as the process ends: before :func:`run` ends it, or at exit
    where the command was called some other way (its failure is not reported)."""
    _AT_END.append((function, args))
    atexit.register(function, *args)


def run(command, prog_name: str) -> None:
    """Run the click ``command`` (standalone, as click does for a program), then end the
    process at once with its exit status."""
    try:
        command(prog_name=prog_name)
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):  # sys.exit("message")
        print(code, file=sys.stderr)
        code = 1
    for function, args in _AT_END:
        try:
            function(*args)
        except Exception:  # nothing to tell the user that the command has not told
            pass
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code or 0)

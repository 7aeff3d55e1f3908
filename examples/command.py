"""Run an example's click command as a program, and end the process as soon as it is done.

When a command returns, its cluster is closed and its files are written; what Python does
after that (finalizers of every module loaded, the GPU stack's CUDA contexts torn down one
object at a time) is time the user waits at the prompt for nothing. :func:`run` flushes the
output and ends the process there, with the command's exit status. Used only under
``python -m``: imported, a command returns as usual (the tests call it that way). What must
still happen as the process ends (removing an unfinished output that a worker wrote into after
it was first removed) is registered with :func:`at_end`, which :func:`run` calls before it ends
the process.

Ctrl-C raises KeyboardInterrupt in the main thread wherever it is, also inside a garbage
collector's callback (distributed registers one) or a finalizer, where Python reports it as
"Exception ignored" and goes on: the command would run on as if no key had been pressed.
:func:`run`'s handler sees such a place on the stack and raises the interrupt again a moment
later, outside it.

:class:`EndsInOneLine` gives the examples' commands one line for Ctrl-C and a full disk, and
:class:`UserPath` reads a leading ``~`` in a path option as the shell would.
"""

from __future__ import annotations

import atexit
import errno
import gc
import logging
import os
import signal
import sys
import threading

import click

_AT_END: list = []


class EndsInOneLine:
    """Mixed into a click command or group (before it): Ctrl-C or a full disk ends the command
    in one line, where click would print "Aborted!" or a traceback. What the command had begun
    to write, ``unfinished``, is removed as the error passes through its own code; the line
    says so, and where else to write (``elsewhere``)."""

    unfinished: str  # what the command writes: "files", "outputs"
    elsewhere: str  # the other way out of a full disk than freeing space

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo(f"interrupted: the {self.unfinished} not finished are removed", err=True)
            ctx.exit(130)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise click.ClickException(
                f"the disk is full ({exc.strerror}): free some space or {self.elsewhere}; "
                f"the {self.unfinished} not finished are removed") from None


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


def _swallowed_here(frame) -> bool:
    """Whether an exception raised in ``frame`` would be reported and dropped: a frame on its
    stack is a garbage collector's callback or a finalizer."""
    callbacks = {getattr(getattr(f, "__func__", f), "__code__", None) for f in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _interrupt(signum, frame) -> None:
    """Ctrl-C: KeyboardInterrupt, where it is not dropped (else again in a moment)."""
    if _swallowed_here(frame):
        threading.Timer(0.05, signal.raise_signal, (signum,)).start()
        return
    raise KeyboardInterrupt


def run(command, prog_name: str) -> None:
    """Run the click ``command`` (standalone, as click does for a program), then end the
    process at once with its exit status."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored
        signal.signal(signal.SIGINT, _interrupt)
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

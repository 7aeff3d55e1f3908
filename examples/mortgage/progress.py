"""What the user sees while the work runs, on the current client: a bar on a terminal, a line
per tenth otherwise; and the stage times after it."""

from __future__ import annotations

import sys


class Progress:
    """Counts ``done`` of ``total`` steps of ``what``; redraws a bar on a terminal, prints a
    line at every tenth (and at the end) when the output is a file or a pipe."""

    def __init__(self, what: str, total: int, echo=print):
        self.what, self.total, self.echo = what, max(1, total), echo
        self.tty = sys.stdout.isatty()
        self._shown = 0

    def update(self, done: int) -> None:
        if self.tty:
            bar = "#" * (30 * done // self.total)
            end = "\n" if done >= self.total else ""
            print(f"\r{self.what}: [{bar:<30}] {done}/{self.total}", end=end, flush=True)
        elif done >= self.total or done * 10 // self.total > self._shown * 10 // self.total:
            self.echo(f"{self.what}: {done}/{self.total}")
        self._shown = done


def stage_line(name: str, seconds: float) -> str:
    """One line of a command's stage times, aligned with the others."""
    return f"  {name:<14} {seconds:8.2f} s"


def wait(futures, what: str, echo=print) -> None:
    """Wait for ``futures``, showing how many are done."""
    from distributed import as_completed

    shown = Progress(what, len(futures), echo)
    for done, _ in enumerate(as_completed(futures), start=1):
        shown.update(done)


def current_client():
    """This process's dask client, or None: the work then runs on local threads."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None

"""Where the command writes: files of known names in ``--out``, never over a file it did not write.

``--out`` is a folder of the user's (``ecg-output`` by default) that may hold other files. The
command writes the synthetic recording (``ecg.csv``) and the four pictures there, and lists each
file it wrote, with its size and modification time, in ``.written-by-examples-ecg.json``. A
later run replaces a file of those names only where the list holds it unchanged: a file of the
user's, or one changed since, is refused before any work, and left as it was. Each file is
written under a hidden name beside it and renamed into place once whole (what a killed run
left is removed by the next one: ``examples.staging``).

    outputs.check(out, [CSV, *PICTURES])            # before any work
    outputs.write(out, "stream.png", figure.savefig)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import staging

MARKER = ".written-by-examples-ecg.json"
CSV = "ecg.csv"
PICTURES = ("stream.png", "beat_lengths.png", "latent.png", "decoded.png")


def _listed(out: Path) -> dict:
    """The files the marker in ``out`` lists: ``{name: [[size, mtime_ns], ...]}``, each with
    the states it may be in (two while it is replaced: the earlier file's and the new one's)."""
    try:
        with open(out / MARKER, encoding="utf-8") as f:
            found = json.load(f)["files"]
        return {str(name): [list(state) for state in states] for name, states in found.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _list(out: Path, listed: dict) -> None:
    """Write the marker of ``out``: beside it, then renamed into place."""
    with staging.uninterrupted():
        partial = begin(out, MARKER)
        try:
            with open(partial, "w", encoding="utf-8") as f:
                json.dump({"files": listed}, f)
            os.replace(partial, out / MARKER)
        except BaseException:
            abandon(partial)
            raise


def _stat(path) -> list[int]:
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


def _ours(out: Path, name: str, listed: dict) -> bool:
    """Whether ``out/name`` is a file this command wrote and nobody changed since."""
    path = out / name
    return (not path.is_symlink() and path.is_file()
            and _stat(path) in listed.get(name, []))


def check(out, names) -> Path:
    """The absolute path of ``out`` once ``names`` may be written there: ValueError, saying
    what to do, where it cannot be written or would replace a file this command did not
    write."""
    out = Path(os.path.abspath(out))
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError(f"--out {out} is a file: give a folder for the pictures")
    existing = out
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out {out} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out} cannot be written: {existing} is not writable here "
                         "(read-only, or another user's): give another folder")
    if existing != out:
        return out
    staging.remove_stale(str(out))  # what killed runs left
    listed = _listed(out)
    theirs = [name for name in names if os.path.lexists(out / name)
              and not _ours(out, name, listed)]
    if theirs:
        raise ValueError(
            f"--out {out} holds {', '.join(theirs)}, which this command did not write (or "
            "which changed since it wrote them): give another folder, or move them away; "
            "nothing was changed")
    return out


def begin(out, name: str) -> Path:
    """A new hidden file beside ``out/name`` to write it into (then :func:`finish`)."""
    return Path(staging.new_file(str(out), name, os.path.splitext(name)[1]))


def finish(out, name: str, partial) -> Path:
    """``partial`` renamed to ``out/name`` (where :func:`check` still allows it), and listed
    as this command's; the path. The list names the new file before the rename (a rename
    keeps a file's size and time), and the earlier one until after it: a run stopped in
    between leaves a file a later run knows as its own."""
    out = Path(out)
    try:
        check(out, [name])
    except ValueError:
        abandon(partial)
        raise
    target = out / name
    with staging.uninterrupted():
        listed = _listed(out)
        earlier = [state for state in listed.get(name, [])
                   if os.path.isfile(target) and state == _stat(target)]
        _list(out, {**listed, name: [*earlier, _stat(partial)]})
        os.replace(partial, target)
        _list(out, {**_listed(out), name: [_stat(target)]})
    return target


def abandon(partial) -> None:
    """Remove a hidden file that was not finished."""
    try:
        os.remove(partial)
    except FileNotFoundError:
        pass


def write(out, name: str, write_to) -> Path:
    """``write_to(path)`` into a hidden file beside ``out/name``, renamed into place once
    written (:func:`finish`); the path."""
    partial = None
    try:
        with staging.uninterrupted():  # the file made, and its name kept to remove it
            partial = begin(out, name)
        write_to(partial)
    except BaseException:
        if partial is not None:
            abandon(partial)
        raise
    return finish(out, name, partial)

"""Where the commands write, and what they may replace: never a file they did not write.

An output directory is built in a hidden sibling (``.NAME.partial-*``, see ``examples.staging``)
and renamed into place once complete, so that a run that fails or is interrupted leaves nothing
a later run would take for data; what a run killed outright left is removed by the next run
that writes beside it. A finished output holds a marker naming what it is (a generated
dataset, a feature table) and listing the files the command wrote: ``overwrite`` replaces an
output only when the marker is there, names the same kind of output, and the directory holds
nothing else; and no output may be an input, lie inside one or hold one.

    with output.Staged(out, what="feature table", overwrite=True, inputs=[data]) as staging:
        frame.to_parquet(staging)     # renamed to ``out`` when the block ends without error
"""

from __future__ import annotations

import json
import os
import shutil
import sys

from .. import staging as hidden
from ..command import at_end

MARKER = ".written-by-examples-mortgage.json"


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory and path != directory


def _files(directory: str) -> list[str]:
    """Every file and link under ``directory``, relative to it (empty folders: with a /)."""
    found = []
    for root, folders, names in os.walk(directory):
        base = os.path.relpath(root, directory)
        found += [os.path.normpath(os.path.join(base, name)) for name in names]
        found += [os.path.normpath(os.path.join(base, f)) + "/" for f in folders
                  if os.path.islink(os.path.join(root, f)) or not os.listdir(os.path.join(root, f))]
    return sorted(found)


def _shown(names: list[str], count: int = 4) -> str:
    more = f" and {len(names) - count} more" if len(names) > count else ""
    return ", ".join(names[:count]) + more


def _marker(directory: str) -> tuple[str | None, list[str]] | None:
    """(what the output is, the files it lists) of the marker in ``directory``; None without
    one."""
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as f:
            found = json.load(f)
        what = found.get("what")
        return (what if isinstance(what, str) else None), list(found["files"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def held(directory: str) -> str | None:
    """What an earlier output of these commands in ``directory`` is ("generated dataset",
    "feature table"), as its marker says; None where there is none."""
    found = _marker(directory)
    return None if found is None else found[0]


def check(target: str, *, what: str, overwrite: bool = False, inputs=()) -> str:
    """The absolute path of ``target`` once ``what`` may be written there: FileExistsError
    where it would replace what these commands did not write (or an earlier output without
    ``overwrite``), ValueError where it is or holds an input or the working directory, or
    cannot be written; each says what to do."""
    target = os.path.abspath(target)
    real = os.path.realpath(target)
    for given in inputs:
        source = os.path.realpath(given)
        if real == source or _inside(real, source) or _inside(source, real):
            relation = "is" if real == source else "is inside" if _inside(real, source) else "holds"
            raise ValueError(f"{target} {relation} the input {given}: write the {what} "
                             "somewhere else")
    here = os.path.realpath(os.getcwd())
    if real == here or _inside(here, real):
        raise ValueError(f"{target} is or holds the working directory: write the {what} to a "
                         "directory of its own")
    if os.path.islink(target):
        raise FileExistsError(
            f"{target} is a link (to {os.readlink(target)}), which the finished {what} would "
            f"replace: give the directory it names, or a new one, for the {what}")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise FileExistsError(f"{target} exists and is not a directory: give a new or empty "
                              f"directory for the {what}")
    hidden.remove_stale(os.path.dirname(target))  # what killed runs left beside it
    present = _files(target) if os.path.lexists(target) else []
    if present:
        found = _marker(target)
        if found is None:
            raise FileExistsError(
                f"{target} holds files these commands did not write ({_shown(present)}): "
                f"give a new or empty directory for the {what}; nothing was changed")
        kind, listed = found
        if kind != what:
            raise FileExistsError(
                f"{target} holds {f'a {kind}' if kind else 'an output of another kind'}, "
                f"not a {what}: "
                f"--overwrite replaces only an earlier {what}; give another directory for "
                f"the {what}; nothing was changed")
        foreign = [name for name in present if name not in listed and name != MARKER]
        if foreign:
            raise FileExistsError(
                f"{target} holds an earlier {what} and files it did not write "
                f"({_shown(foreign)}): move those away, or give another directory")
        if not overwrite:
            raise FileExistsError(f"{target} holds an earlier {what}: pass --overwrite to "
                                  "replace it, or give another directory")
    writable(target)
    return target


def writable(target: str) -> None:
    """ValueError unless ``target`` can be created: its nearest existing parent is a directory
    this process may write into."""
    parent = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{target} cannot be written: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{target} cannot be written: {parent} is not writable here "
                         "(read-only, or another user's): give another place")


class Staged:
    """An output directory built in a hidden sibling, whose path the ``with`` block gets: renamed
    to ``target`` at the end (replacing an earlier output of these commands), or removed when
    the block raises or is interrupted."""

    def __init__(self, target: str, *, what: str, overwrite: bool = False, inputs=()):
        self.what, self.overwrite, self.inputs = what, overwrite, inputs
        self.target = check(target, what=what, overwrite=overwrite, inputs=inputs)
        self.staging: str | None = None
        self._made: str | None = None  # the first parent folder this created

    def __enter__(self) -> str:
        parent = os.path.dirname(self.target)
        missing = parent
        while not os.path.exists(os.path.dirname(missing)):
            missing = os.path.dirname(missing)
        try:
            if not os.path.exists(parent):
                os.makedirs(parent)
                self._made = missing
            with hidden.uninterrupted():  # the folder made, and its name kept to remove it
                self.staging = hidden.new_folder(parent, os.path.basename(self.target))
        except OSError as exc:
            self._remove_made()
            raise ValueError(f"{self.target} cannot be written ({exc.strerror}): give "
                             "another place") from None
        except BaseException:  # Ctrl-C held back until the folder was made
            self.__exit__(*sys.exc_info())
            raise
        return self.staging

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.commit()
        else:  # remove what was written: the sibling, and the parent folders this created
            _discard(self.staging)
            self.staging = None
            self._remove_made()
        return False

    def _remove_made(self) -> None:
        folder = os.path.dirname(self.target)
        while self._made is not None:
            try:
                os.rmdir(folder)
            except OSError:
                break
            if folder == self._made:
                break
            folder = os.path.dirname(folder)
        self._made = None

    def commit(self) -> None:
        """Write the marker and rename the sibling into place (Ctrl-C held back until the
        renames are done: an earlier output is never left under its hidden name)."""
        with hidden.uninterrupted():
            self._commit()

    def _commit(self) -> None:
        staging, self.staging = self.staging, None
        listed = [name for name in _files(staging) if name != MARKER]
        with open(os.path.join(staging, MARKER), "w", encoding="utf-8") as f:
            json.dump({"what": self.what, "files": listed}, f, indent=0)
        try:  # again: the directory may have changed while the work ran
            check(self.target, what=self.what, overwrite=self.overwrite, inputs=self.inputs)
        except (ValueError, FileExistsError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise type(exc)(f"{exc} (it changed while this run worked: another run at "
                            f"once?); this run's {self.what} is removed") from None
        if not os.path.lexists(self.target) or not os.listdir(self.target):
            try:
                os.replace(staging, self.target)  # a new name, or over an empty directory
            except OSError as exc:  # another run put its output there in the meantime
                shutil.rmtree(staging, ignore_errors=True)
                raise FileExistsError(
                    f"{self.target} was written by another run while this one worked "
                    f"({exc.strerror}): this run's {self.what} is removed; give another "
                    "place, or run one at a time") from None
            return
        earlier = os.path.join(os.path.dirname(self.target),
                               hidden.hidden_name(os.path.basename(self.target), "old"))
        os.rename(self.target, earlier)
        try:
            os.rename(staging, self.target)
        except OSError:
            os.rename(earlier, self.target)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(earlier)  # an earlier output of these commands, and nothing else


def _discard(staging: str | None) -> None:
    """Remove an unfinished output's folder, now and again when this process ends: tasks
    still running when the work stopped (Ctrl-C: the workers finish the task at hand until
    their cluster closes) may write into it after it is removed."""
    if staging is None:
        return
    shutil.rmtree(staging, ignore_errors=True)
    at_end(shutil.rmtree, staging, True)


def check_file(target: str, *, what: str, overwrite: bool = False, accept=None) -> str:
    """The absolute path of ``target`` once ``what`` may be written there (over an existing
    file only when ``accept(path)`` and ``overwrite``); ValueError or FileExistsError, saying
    what to do."""
    target = os.path.abspath(target)
    if os.path.isdir(target):
        raise ValueError(f"{target} is a directory: give a file name for the {what}")
    hidden.remove_stale(os.path.dirname(target))
    if os.path.lexists(target) and not (accept and accept(target)):
        raise FileExistsError(f"{target} exists and is not an earlier {what}: give another file "
                              "name; nothing was changed")
    if os.path.lexists(target) and not overwrite:
        raise FileExistsError(f"{target} holds an earlier {what}: pass --overwrite to replace "
                              "it, or give another file name")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise ValueError(f"{target} cannot be written: the folder {folder} does not exist")
    writable(target)
    return target


def replace_file(target: str, write, *, what: str, overwrite: bool = False,
                 accept=None) -> str:
    """``write(path)`` into a sibling of ``target``, then renamed to it (see ``check_file``)."""
    target = check_file(target, what=what, overwrite=overwrite, accept=accept)
    partial = None
    try:
        with hidden.uninterrupted():  # the file made, and its name kept to remove it
            partial = hidden.new_file(os.path.dirname(target), os.path.basename(target),
                                      os.path.splitext(target)[1])
        write(partial)
        os.replace(partial, target)
    except BaseException:
        if partial is not None and os.path.exists(partial):
            os.remove(partial)
        raise
    return target

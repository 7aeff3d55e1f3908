"""Hidden names for what a command is still writing, and removing those whose writer died.

An output is written under a hidden name beside it (``.NAME.partial-HOST-PID-TOKEN``, a file or
a folder) and renamed into place once complete; a run that fails or is interrupted removes
it. A process killed outright (``kill -9``, the machine's out-of-memory killer, a lost
terminal) cannot: its name says which process wrote it, on which machine (a short digest of
the host's name), so that :func:`remove_stale`, called by the next run that writes beside it,
removes it once that process is gone. The bound: what a killed run left lasts until the next
run of these commands that writes into the same folder on the same machine. One left by a
run on another machine (a shared file system) is left alone, as a live one would be: no
process of another machine can be seen from here; so is one whose process number a new
process took, until that one ends too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading

_NAME = re.compile(r"^\.(?P<name>.+)\.(?:partial|old)-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-"
                   r"[0-9a-f]{8}(?:\.[^.]*)?$")


def _host() -> str:
    """This machine, as the hidden names record it."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def hidden_name(name: str, kind: str = "partial", suffix: str = "") -> str:
    """A new hidden name for ``name`` while it is written (``kind`` "partial"), or for an
    earlier output while it is replaced ("old"), naming this process and machine; ``suffix``
    (an extension) kept at its end for writers that choose a format by it."""
    return f".{name}.{kind}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}{suffix}"


def writer_of(name: str) -> tuple[str, int] | None:
    """(host digest, pid) of a hidden name :func:`hidden_name` made; None for another name."""
    found = _NAME.match(name)
    return None if found is None else (found["host"], int(found["pid"]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(folder: str) -> list[str]:
    """Remove the hidden files and folders in ``folder`` that a process of this machine, no
    longer running, was writing (see the module's text); the paths removed. Nothing else is
    touched: a name this module did not make, a live writer's, another machine's."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    host, removed = _host(), []
    for name in names:
        writer = writer_of(name)
        if writer is None or writer[0] != host or _alive(writer[1]):
            continue
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:  # another run removed it first
            pass
        except OSError:  # another user's, in a shared folder: theirs to remove
            continue
        removed.append(path)
    return removed


def new_folder(parent: str, name: str, kind: str = "partial") -> str:
    """A new hidden folder for ``name`` in ``parent`` (:func:`hidden_name`), with the mode the
    user's umask gives (where ``tempfile.mkdtemp`` makes it 0700, and a folder renamed into
    place would keep that)."""
    for _ in range(100):
        path = os.path.join(parent, hidden_name(name, kind))
        try:
            os.mkdir(path, 0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for a hidden folder of {name} in {parent}")


def new_file(parent: str, name: str, suffix: str = "") -> str:
    """A new empty hidden file for ``name`` in ``parent`` (:func:`hidden_name`), with the mode
    the user's umask gives (where ``tempfile.mkstemp`` makes it 0600)."""
    for _ in range(100):
        path = os.path.join(parent, hidden_name(name, "partial", suffix))
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for a hidden file of {name} in {parent}")


@contextlib.contextmanager
def uninterrupted():
    """Ctrl-C held back while the block runs, then raised: a hidden file made and its name
    kept, or an output renamed and listed, is one step that an interruption does not split
    (in the main thread, where Python runs its signal handlers; elsewhere a plain block)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])
        elif caught and previous is signal.SIG_DFL:
            raise KeyboardInterrupt

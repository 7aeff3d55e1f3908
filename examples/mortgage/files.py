"""Which files a dataset holds, in which layout, and how they are cut into partitions.

A dataset is a file, a directory or a glob (or the classic ``--perf``/``--acq`` pair). A file's
layout is told from its lines' field counts (31: classic performance, 25: classic acquisition,
108: current), its quarter from its name. A zip archive's data members (``ARCHIVE::MEMBER``) and
gzip, bzip2 or xz files are read decompressed, each whole in one partition (they cannot be cut
at byte offsets).

Partitions are sized by bytes: a quarter's small files packed together, a large file cut into
pieces that end at loan boundaries, so that every loan's history is in one partition (the
per-loan features and the forward-looking label need it, and no shuffle does). Once the cluster
is known, the partitions are cut again into a multiple of its worker threads, of about equal
size (:func:`balance`): the tasks then run in full waves, and the last wave keeps every thread
busy instead of a few.

A dataset's ``names.csv`` (the sellers' short names) is read with its plan
(:func:`read_names`).
"""

from __future__ import annotations

import bz2
import glob
import gzip
import lzma
import math
import os
import re
import stat
import struct
import zipfile
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import pairwise

from dask.utils import format_bytes, parse_bytes

from . import output, schema

# Text per partition by default: a GPU's time per task is mostly fixed costs, so it wants large
# partitions; a CPU worker is one core, and smaller partitions keep every core busy.
PARTITION_SIZES = {"gpu": "1GiB", "cpu": "256MiB"}
MIN_PARTITION_SIZE = parse_bytes("1MiB")
MAX_PARTITIONS = 100_000


def partition_size_for(device: str, partition_size: int | str | None = None) -> int:
    """Bytes of text per partition: ``partition_size``, or the device's default."""
    given = PARTITION_SIZES[device] if partition_size is None else partition_size
    try:
        size = parse_bytes(given) if isinstance(given, str) else int(given)
    except (TypeError, ValueError):
        raise ValueError(f"partition_size={given!r} is not a size: write one such as 256MiB "
                         "or 1GiB") from None
    if size < MIN_PARTITION_SIZE:
        raise ValueError(
            f"partition_size={given!r} is below {format_bytes(MIN_PARTITION_SIZE)}: every "
            "partition is a task with fixed costs; give at least 1MiB (defaults: "
            f"{PARTITION_SIZES['gpu']} on GPUs, {PARTITION_SIZES['cpu']} on CPUs)")
    return size


MEMBER = "::"  # ARCHIVE::MEMBER: a member of a zip archive
STREAMS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}  # single-file compressions


def compressed(path: str) -> bool:
    """Whether ``path`` names a compressed file (or a zip archive's member)."""
    return MEMBER in path or path.lower().endswith(tuple(STREAMS))


def open_text(path: str):
    """``path``'s text as a binary file object, decompressed."""
    if MEMBER in path:
        archive, member = path.split(MEMBER, 1)
        with zipfile.ZipFile(archive) as zipped:  # the member's stream keeps the file open
            return zipped.open(member)
    opener = STREAMS.get(os.path.splitext(path)[1].lower(), open)
    return opener(path, "rb")


def text_size(path: str) -> int:
    """Bytes of ``path``'s text, decompressed (gzip records it modulo 4 GiB: the smallest such
    value at least the compressed size; bzip2 and xz do not: the compressed size)."""
    if MEMBER in path:
        archive, member = path.split(MEMBER, 1)
        with zipfile.ZipFile(archive) as zipped:
            return zipped.getinfo(member).file_size
    size = os.path.getsize(path)
    if path.lower().endswith(".gz") and size >= 18:
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            (modulo,) = struct.unpack("<I", f.read(4))
        return modulo + -(-max(size - modulo, 0) // 2**32) * 2**32
    return size


def text_blocks(path: str, size: int):
    """A compressed file's text as ``(block, first line)``: whole lines, about ``size`` bytes
    a block, decompressed as a stream; the first line's number 0-based."""
    line, rest = 0, b""
    with open_text(path) as f:
        while data := f.read(size):
            data = rest + data
            end = data.rfind(b"\n") + 1
            block, rest = data[:end], data[end:]
            if block:  # else no line ends in it yet
                yield block, line
                line += block.count(b"\n")
    if rest:
        yield rest, line


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, stop)`` of one file's text, from a line start to a line start (a
    compressed file's piece is all of it)."""

    path: str
    start: int
    stop: int

    @property
    def nbytes(self) -> int:
        return self.stop - self.start

    @property
    def compressed(self) -> bool:
        return compressed(self.path)


@dataclass(frozen=True)
class Part:
    """One partition: pieces of one quarter's performance (or current-layout) files."""

    index: int
    quarter: str | None
    pieces: tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)


@dataclass
class Plan:
    """What the ETL reads: the partitions, and in the classic layout each quarter's
    acquisition files (key None: files without a quarter in their names, joined to all)."""

    layout: schema.Layout  # the layout of the partitions' files
    parts: list[Part]
    acquisitions: dict[str | None, tuple[str, ...]] = field(default_factory=dict)
    names: dict[str, str] | None = None
    input_bytes: int = 0

    @property
    def quarters(self) -> list[str | None]:
        """The quarter of every partition."""
        return [part.quarter for part in self.parts]

    def inputs(self) -> list[str]:
        """The files the plan reads (a zip member as its archive)."""
        paths = [piece.path for part in self.parts for piece in part.pieces]
        paths += [path for group in self.acquisitions.values() for path in group]
        return sorted({path.split(MEMBER, 1)[0] for path in paths})

    def balanced(self, slots: int, size: int) -> Plan:
        """This plan with its partitions cut again for ``slots`` worker threads (:func:`balance`)."""
        return replace(self, parts=balance(self.parts, size, slots, self.layout))

    def acquisition_files(self, quarter: str | None) -> tuple[str, ...]:
        if quarter in self.acquisitions:
            return self.acquisitions[quarter]
        return tuple(path for files in self.acquisitions.values() for path in files)


def _natural(path: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def find_files(spec) -> list[str]:
    """The files of ``spec``, a file, a directory (with its perf/ and acq/ folders), a glob or a
    list of those, in natural order (quarter, then part), each once however it was named; a
    zip archive as its members. ValueError, naming it and why, for an entry that looks like a
    Fannie Mae file and cannot be read: a named pipe, a broken link, a folder this user may
    not read, a download not finished."""
    specs = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    given = {os.path.realpath(item) for item in map(os.fspath, specs) if os.path.isdir(item)}
    found = []
    for item in map(os.fspath, specs):
        if os.path.isdir(item):
            _not_an_output(item)
            inside = _folder_files(item)
            if not inside:
                _no_files_in(item)
            _no_data_left_in_folders(item, given)
            found += inside
        elif os.path.lexists(item):
            found += _entries([item], named=True)
        else:  # a glob: a folder it matches is read as a folder given (DIR/* of perf/, acq/)
            matched = glob.glob(item)
            found += _entries([m for m in matched if not os.path.isdir(m)], named=False)
            for folder in (m for m in matched if os.path.isdir(m)):
                _not_an_output(folder)
                found += _folder_files(folder)
    files = _once(found)
    if not files:
        raise FileNotFoundError(f"no files found for {spec!r}: give a file, a directory or a "
                                "glob of Fannie Mae files (either layout)")
    return [path for f in files for path in (_members(f) if f.lower().endswith(".zip") else [f])]


def _folder_files(folder: str) -> list[str]:
    """The files of ``folder`` and of its perf/ and acq/ folders; ValueError where one of
    those cannot be read."""
    inside = []
    for sub in ("", "perf", "acq"):
        path = os.path.join(folder, sub)
        if sub and os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
            raise ValueError(f"{path} cannot be read by this user: give it read access "
                             f"(chmod a+rx {path}), or the files elsewhere")
        inside += [f for f in _entries(glob.glob(os.path.join(path, "*")), named=False)
                   if os.path.isfile(f)]
    return inside


def _not_an_output(folder: str) -> None:
    """ValueError for a feature table these commands wrote, given as data."""
    if output.held(folder) == "feature table":
        raise ValueError(
            f"{folder} is a feature table these commands wrote (Parquet), not Fannie Mae "
            "files: give the text files the ETL reads (the classic Performance_* and "
            "Acquisition_* files, or the current layout's quarter files)")


# A name that Fannie Mae's files have (Performance_2007Q3.txt, Acquisition_2007Q3.txt,
# 2007Q3.csv, 2007Q3.zip), with whatever a copy or a download adds to it; documents are not.
_DATA_NAME = re.compile(r"^(performance|acquisition)_|^\d{4}Q[1-4]\b", re.I)
_DOCUMENTS = (".md", ".pdf", ".html", ".htm", ".json", ".yaml", ".yml", ".png", ".jpg",
              ".xls", ".xlsx", ".doc", ".docx", ".py", ".ipynb", ".sh")
# What browsers and download tools name a file they have not finished writing.
_UNFINISHED = (".crdownload", ".part", ".partial", ".download", ".tmp")


def looks_like_data(path: str) -> bool:
    """Whether ``path``'s name is one a Fannie Mae file has (a zip member's name too)."""
    name = os.path.basename(path.split(MEMBER, 1)[-1])
    return bool(_DATA_NAME.search(name)) and not name.lower().endswith(_DOCUMENTS)


def _entries(paths: list[str], named: bool) -> list[str]:
    """``paths`` that are files (folders are skipped); ValueError for one
    that looks like a Fannie Mae file (or was ``named`` by the user) and is not a regular
    file, or is a download not finished."""
    kept = []
    for path in paths:
        if os.path.isdir(path):
            continue
        if not (named or looks_like_data(path)):
            if os.path.isfile(path):
                kept.append(path)
            continue
        what = _not_a_file(path)
        if what:
            raise ValueError(f"{path} is {what}, not a regular file: the ETL reads a file at "
                             "byte offsets, several times; copy the data into a file, or move "
                             "this out of the data")
        if path.lower().endswith(_UNFINISHED):
            raise ValueError(f"{path} is a download that has not finished: let it finish (or "
                             "download it again), then give the finished file")
        kept.append(path)
    return kept


def _not_a_file(path: str) -> str | None:
    """What ``path`` is when it is not a regular file (None when it is one); never opened,
    so that a named pipe does not block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"a link to {os.readlink(path)}, which does not exist"
    except OSError as exc:
        return f"not reachable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _once(paths: list[str]) -> list[str]:
    """``paths`` in natural order, each file once: a file reached by two names (a folder and
    a glob of it, a link, a relative and an absolute path) is read once."""
    seen, kept = set(), []
    for path in sorted(set(paths), key=_natural):
        info = os.stat(path)
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            kept.append(path)
    return kept


def _no_data_left_in_folders(directory: str, given=()) -> None:
    """ValueError naming a folder of ``directory`` (other than perf/ and acq/, and those
    ``given`` as data too) that holds files named as Fannie Mae's: reading ``directory`` would
    leave them out without a word."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if (entry.name in ("perf", "acq") or entry.name.startswith(".")
                or not entry.is_dir() or os.path.realpath(entry.path) in given):
            continue
        try:
            held = [f.name for f in os.scandir(entry.path) if looks_like_data(f.name)]
        except OSError:
            continue
        if held:
            raise ValueError(
                f"{entry.path} holds Fannie Mae files ({held[0]}...) that reading {directory} "
                f"leaves out (it reads its files, perf/ and acq/): give them as data too "
                f"(etl --data {directory} {entry.path}), or move them out")


def _no_files_in(directory: str) -> None:
    """FileNotFoundError for a directory without files, naming its folders that hold some."""
    folders = sorted(entry.name for entry in os.scandir(directory)
                     if entry.is_dir() and not entry.name.startswith(".")
                     and any(f.is_file() for f in os.scandir(entry.path)))
    if folders:
        raise FileNotFoundError(
            f"{directory} holds no files but its folders {', '.join(folders)} do: give one of "
            f"them, e.g. {os.path.join(directory, folders[0])} (each folder of a dataset "
            "written with --layout both holds the same loans in one layout)")
    raise FileNotFoundError(f"{directory} holds no files: give a directory, a file or a glob "
                            "of Fannie Mae files (either layout)")


def _members(archive: str) -> list[str]:
    """A zip archive's data files as ``ARCHIVE::MEMBER``; ValueError, naming what it holds,
    when there are none."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            names = [info.filename for info in zipped.infolist() if not info.is_dir()]
    except zipfile.BadZipFile:
        raise ValueError(f"{archive} is not a zip archive that can be read: unpack it, or "
                         "give the files it should hold") from None
    except OSError:
        head(archive)  # says why it cannot be read
        raise
    paths = [f"{archive}{MEMBER}{name}" for name in sorted(names, key=_natural)]
    data = []
    for path in paths:
        text = head(path)
        if layout_of(path, text=text) is not None:
            data.append(path)
        elif looks_like_data(path):
            _refuse_unknown(path, text)
    if not data:
        held = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise ValueError(
            f"{archive} holds no Fannie Mae file ({held or 'nothing'}): give archives of the "
            "current layout's quarter files (108 fields a line) or of the classic "
            "Performance_* and Acquisition_* files")
    return data


HEAD = 1 << 16  # bytes of a file's text read to tell its layout, and checked first


def head(path: str, size: int = HEAD) -> bytes:
    """The first ``size`` bytes of ``path``'s text (decompressed); ValueError, saying what to
    do, when it cannot be read or decompressed."""
    try:
        with open_text(path) as f:
            return f.read(size)
    except PermissionError:
        raise ValueError(f"{path} cannot be read by this user: give it read access (chmod a+r "
                         f"{path.split(MEMBER, 1)[0]}), or move it out of the data") from None
    except (OSError, EOFError, lzma.LZMAError, zipfile.BadZipFile) as exc:
        if compressed(path):
            raise ValueError(f"{path} cannot be decompressed ({exc}): check the file, or give "
                             "it unpacked") from None
        raise ValueError(f"{path} cannot be read ({exc}): check the file, or move it out of "
                         "the data") from None


def layout_of(path: str, lines: int = 20, text: bytes | None = None) -> schema.Layout | None:
    """A data file's layout, from the most common field count of its first lines (a bad line
    does not hide it); None: not a data file. ``text``: its first bytes, if read already."""
    if os.path.basename(path) == "names.csv":
        return None
    first = (head(path) if text is None else text).split(b"\n")[:lines]
    counts = Counter(line.count(b"|") + 1 for line in first if line.strip())
    by_fields = {layout.fields: layout for layout in schema.LAYOUTS}
    for fields, _ in counts.most_common():
        if fields in by_fields:
            return by_fields[fields]
    return None


_DELIMITERS = {b"|": "'|'", b",": "',' (comma)", b"\t": "a tab", b";": "';'"}


# The first bytes of files that are not text, and what each is.
_BINARY = {b"PAR1": "a Parquet file", b"PK\x03\x04": "a zip archive (or a document made of one)",
           b"\x1f\x8b": "gzip-compressed (name it .gz to have it read)",
           b"BZh": "bzip2-compressed (name it .bz2 to have it read)",
           b"\xfd7zXZ\x00": "xz-compressed (name it .xz to have it read)",
           b"%PDF": "a PDF document"}


def binary(text: bytes) -> str | None:
    """What a file whose first bytes are ``text`` is where it is not text; None for text."""
    for magic, what in _BINARY.items():
        if text.startswith(magic):
            return what
    return "binary data" if b"\0" in text[:4096] else None


def not_data(path: str, text: bytes) -> str:
    """Why ``path``, whose first bytes are ``text``, is not a Fannie Mae file: that it is no
    text (and what it is), what its lines hold (the fields and their delimiter), or that it
    is empty."""
    kind = binary(text)
    if kind is not None:
        return f"is {kind}, not text"
    lines = [line for line in text.split(b"\n")[:20] if line.strip()]
    if not lines:
        return "is empty" if not text else "holds only blank lines"
    counts = {mark: Counter(line.count(mark) for line in lines).most_common(1)[0][0]
              for mark in _DELIMITERS}
    mark = max(counts, key=lambda m: (counts[m], m == b"|"))
    if counts[mark] == 0:
        return "holds lines without any field delimiter"
    return f"holds lines of {counts[mark] + 1} fields separated by {_DELIMITERS[mark]}"


def _refuse_unknown(path: str, text: bytes) -> None:
    """ValueError for a file named like Fannie Mae's whose lines are in none of its layouts."""
    why = not_data(path, text)
    if why.startswith(("is empty", "holds only blank")):
        raise ValueError(f"{path} {why}: a download that failed? download it again, or move "
                         "it out of the data")
    if binary(text) is not None:
        fix = "give the text files Fannie Mae ships, or move it out of the data"
    elif "'|'" in why:
        fix = "check that it is a Fannie Mae file, or move it out of the data"
    else:
        fix = "write it with '|' between fields, as Fannie Mae ships it, or move it out of the data"
    raise ValueError(
        f"{path} {why}, where Fannie Mae's files hold 31 (classic performance), 25 (classic "
        f"acquisition) or 108 (current layout) fields separated by '|': {fix}")


def _refuse_copies(paths: list[str], heads: dict[str, bytes], layout: schema.Layout) -> None:
    """ValueError naming two files of one quarter that begin with the same loan (a copy of
    the same file: a second download, a backup, an archive beside its unpacked file), which
    would put its rows in the table twice. The parts of a quarter's split file hold other
    loans each."""
    firsts: dict = {}
    for path in paths:
        line = next((line for line in heads[path].split(b"\n") if line.strip()), b"")
        key = (schema.quarter_of(path), line.rstrip(b"\r"))
        if key in firsts:
            other = firsts[key]
            raise ValueError(
                f"two files for the same quarter{' ' + key[0] if key[0] else ''}: {other} and "
                f"{path} begin with the same loan (one a copy of the other?): their rows would "
                "be read twice; move one of them out of the data")
        firsts[key] = path


def plan(data=None, *, perf=None, acq=None, names: str | None = None,
         partition_size: int | str = PARTITION_SIZES["cpu"]) -> Plan:
    """Find the files of a dataset (``data``, or the classic ``perf`` and ``acq``) and cut
    them into partitions of about ``partition_size`` bytes.

    Every file whose name is a Fannie Mae file's is read, or refused with the reason
    (ValueError): lines in none of the layouts (another delimiter, empty), two copies of one
    quarter's file."""
    size = partition_size_for("cpu", partition_size)
    given = [x for x in (data, perf, acq) if x is not None]
    if not given:
        raise FileNotFoundError("no files given: pass a directory, a file or a glob of Fannie "
                                "Mae files (either layout), or the classic perf and acq files")
    files = find_files([x for item in given
                        for x in ([item] if isinstance(item, (str, os.PathLike)) else item)])
    heads = {path: head(path) for path in files}
    layouts = {path: layout_of(path, text=heads[path]) for path in files}
    for path in files:
        if layouts[path] is None and looks_like_data(path):
            _refuse_unknown(path, heads[path])
    by_layout = _grouped(files, lambda path: getattr(layouts[path], "name", None))
    if names is None:
        names = next((f for f in files if os.path.basename(f) == "names.csv"), None)
    current = by_layout.get(schema.CURRENT.name, [])
    performance = by_layout.get(schema.CLASSIC_PERFORMANCE.name, [])
    acquisition = by_layout.get(schema.CLASSIC_ACQUISITION.name, [])
    for layout, group in ((schema.CURRENT, current), (schema.CLASSIC_PERFORMANCE, performance),
                          (schema.CLASSIC_ACQUISITION, acquisition)):
        _refuse_copies(group, heads, layout)
    if current and (performance or acquisition):
        raise ValueError(
            "the data mixes the current layout (108 fields) with the classic one (31 and 25 "
            f"fields): {current[0]} and {(performance or acquisition)[0]}; give one layout")
    if current:
        layout, data_files, acquisitions = schema.CURRENT, current, {}
    elif performance and acquisition:
        layout, data_files = schema.CLASSIC_PERFORMANCE, performance
        acquisitions = _acquisitions_by_quarter(acquisition, performance)
    else:
        missing = "acquisition" if performance else "performance"
        others = [f for f in by_layout.get(None, []) if os.path.basename(f) != "names.csv"]
        seen = (f" ({others[0]} {not_data(others[0], heads[others[0]])})" if others else "")
        raise FileNotFoundError(
            f"no Fannie Mae {missing} files among {len(files)} file(s) of {data or perf or acq!r}"
            f"{seen}: give the current layout's quarter files (108 fields a line), or the "
            "classic Performance_* (31 fields) and Acquisition_* (25 fields) files, with '|' "
            "between fields")
    parts = cut(data_files, size, layout)
    if len(parts) > MAX_PARTITIONS:
        raise ValueError(f"partition_size={partition_size!r} cuts the data into {len(parts):,} "
                         "partitions: give a larger size")
    total = sum(text_size(p) for p in data_files)
    total += sum(text_size(p) for files in acquisitions.values() for p in files)
    return Plan(layout, parts, acquisitions, read_names(names), total)


def read_names(path: str | None) -> dict[str, str] | None:
    """names.csv: ``seller_name|short name`` lines after a header line."""
    if path is None:
        return None
    mapping = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise ValueError(
                    f"{path}:{number}: not UTF-8 text (names.csv holds 'seller name|short "
                    "name' lines after a header line): give the names file of the dataset, "
                    "saved as UTF-8") from None
            if number == 1 or not line:
                continue
            parts = line.split("|")
            if len(parts) != 2:
                raise ValueError(
                    f"{path}:{number}: expected 'seller name|short name', found {line!r} "
                    "(names.csv is pipe-delimited with a header line)"
                )
            mapping[parts[0].strip()] = parts[1].strip()
    return mapping


def _grouped(paths: list[str], key) -> dict:
    """``paths`` by ``key(path)``, in order."""
    groups: dict = {}
    for path in paths:
        groups.setdefault(key(path), []).append(path)
    return groups


def _acquisitions_by_quarter(acquisition: list[str], performance: list[str]) -> dict:
    by_quarter = _grouped(acquisition, schema.quarter_of)
    known = {q for q in by_quarter if q is not None}
    for path in performance:
        quarter = schema.quarter_of(path)
        if quarter is not None and known and quarter not in known:
            raise FileNotFoundError(
                f"{path} is from {quarter} but no acquisition file of {quarter} was given "
                f"(expected Acquisition_{quarter}.txt beside {acquisition[0]})")
    return {q: tuple(files) for q, files in by_quarter.items()}


def cut(paths: list[str], size: int, layout: schema.Layout) -> list[Part]:
    """Partitions of about ``size`` bytes: a quarter's small files together, large files in
    pieces that end at loan boundaries; a compressed file whole."""
    groups: list[tuple[str | None, list[Piece]]] = []
    for quarter, files in _grouped(paths, schema.quarter_of).items():
        pending: list[Piece] = []
        for path in files:
            file_size = text_size(path)
            if file_size == 0:
                continue
            if sum(p.nbytes for p in pending) + file_size > size and pending:
                groups.append((quarter, pending))
                pending = []
            if file_size <= size or compressed(path):
                pending.append(Piece(path, 0, file_size))
                continue
            pieces = -(-file_size // size)
            with open(path, "rb") as f:
                bounds = [loan_boundary(f, round(i * file_size / pieces), file_size,
                                        layout.loan_field) for i in range(pieces + 1)]
            groups += [(quarter, [Piece(path, a, b)]) for a, b in pairwise(bounds) if b > a]
        if pending:
            groups.append((quarter, pending))
    return [Part(i, quarter, tuple(pieces)) for i, (quarter, pieces) in enumerate(groups)]


def balance(parts: list[Part], size: int, slots: int, layout: schema.Layout,
            minimum: int = MIN_PARTITION_SIZE) -> list[Part]:
    """``parts`` cut again into a multiple of ``slots`` partitions (the worker threads that run
    them), each at most about ``size`` bytes and none made below ``minimum``, the largest
    as small as the quarters allow. With tasks of about equal time they run in full waves: cut
    by size alone, a few partitions more than the threads make a last wave in which most
    threads wait.

    A quarter's files are cut into spans of equal bytes whose ends move to the next loan
    boundary (a span may end one file and begin the next of the same quarter); a compressed
    file stays whole."""
    quarters: dict[str | None, list[list]] = {}
    for part in parts:  # each quarter's files, as [path, start, stop] runs of text
        runs = quarters.setdefault(part.quarter, [])
        for piece in part.pieces:
            if runs and runs[-1][0] == piece.path and runs[-1][2] == piece.start:
                runs[-1][2] = piece.stop
            else:
                runs.append([piece.path, piece.start, piece.stop])
    sizes = [sum(stop - start for _, start, stop in runs) for runs in quarters.values()]
    if not sum(sizes) or slots < 1:
        return list(parts)
    shares = [max(1, math.ceil(s / size)) for s in sizes]  # at most about size each
    count = slots * math.ceil(sum(shares) / slots)
    count = max(sum(shares), min(count, sum(sizes) // max(1, minimum)))
    while sum(shares) < count:  # one more span for the quarter with the largest spans
        largest = max(range(len(sizes)), key=lambda i: sizes[i] / shares[i])
        shares[largest] += 1
    cut_parts: list[Part] = []
    for (quarter, runs), share in zip(quarters.items(), shares, strict=True):
        for pieces in _cut_runs(runs, share, layout):
            cut_parts.append(Part(len(cut_parts), quarter, pieces))
    return cut_parts


def _cut_runs(runs: list[list], count: int, layout: schema.Layout) -> list[tuple[Piece, ...]]:
    """One quarter's runs of text cut into ``count`` spans of about equal bytes, each ending
    at a loan boundary (or a file's end), as the pieces each span covers."""
    ends, offset = [], 0
    for _, start, stop in runs:
        offset += stop - start
        ends.append(offset)
    total, bounds = offset, {0, offset}
    for k in range(1, count):
        target = round(k * total / count)
        i = next(i for i, end in enumerate(ends) if end > target)
        path, start, stop = runs[i]
        run_start = ends[i] - (stop - start)
        if compressed(path):  # whole: to its nearer end
            bounds.add(run_start if target - run_start < ends[i] - target else ends[i])
            continue
        with open(path, "rb") as f:
            at = loan_boundary(f, start + target - run_start, stop, layout.loan_field)
        bounds.add(run_start + max(at, start) - start)
    spans = []
    edges = sorted(bounds)
    for a, b in pairwise(edges):
        pieces = []
        for (path, start, stop), end in zip(runs, ends, strict=True):
            begin = end - (stop - start)
            lo, hi = max(a, begin), min(b, end)
            if hi > lo:
                pieces.append(Piece(path, start + lo - begin, start + hi - begin))
        spans.append(tuple(pieces))
    return spans


def chunks(pieces, size: int) -> list[list[Piece]]:
    """``pieces`` regrouped in order into chunks of about ``size`` bytes at most: small pieces
    together, a larger one cut at line starts (a chunk need not hold whole loans)."""
    groups: list[list[Piece]] = []
    pending: list[Piece] = []
    for piece in pieces:
        bounds = [piece.start, piece.stop]
        if piece.nbytes > size:
            count = -(-piece.nbytes // size)
            with open(piece.path, "rb") as f:
                inner = [line_start(f, piece.start + round(i * piece.nbytes / count), piece.stop)
                         for i in range(1, count)]
            bounds = [piece.start, *inner, piece.stop]
        for a, b in pairwise(bounds):
            if b <= a:
                continue
            if pending and sum(p.nbytes for p in pending) + (b - a) > size:
                groups.append(pending)
                pending = []
            pending.append(Piece(piece.path, a, b))
    if pending:
        groups.append(pending)
    return groups


def line_start(f, offset: int, stop: int) -> int:
    """The first line start at or after ``offset`` (``stop`` when there is none before it)."""
    f.seek(offset - 1)
    f.readline()  # to the start of the next line (or stays, if offset starts a line)
    return min(f.tell(), stop)


def loan_boundary(f, offset: int, size: int, loan_field: int = 0) -> int:
    """The first line start at or after ``offset`` that begins a new loan: both sides of a cut
    find the same one, so each loan lands whole in one piece."""
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    pos = line_start(f, offset, size)
    if pos >= size:
        return size
    previous = _loan_id(_line_before(f, pos), loan_field)
    f.seek(pos)
    for line in iter(f.readline, b""):
        if _loan_id(line, loan_field) != previous:
            return pos
        pos += len(line)
    return size


def _loan_id(line: bytes, field: int) -> bytes:
    fields = line.split(b"|", field + 1)
    return fields[field].strip() if len(fields) > field else b""


def _line_before(f, pos: int, block: int = 1 << 16) -> bytes:
    """The line that ends just before ``pos`` (without its newline)."""
    start = pos - 1  # the newline that ends it
    parts = []
    while start > 0:
        step = min(block, start)
        f.seek(start - step)
        data = f.read(step)
        cut_at = data.rfind(b"\n")
        if cut_at >= 0:
            parts.append(data[cut_at + 1:])
            break
        parts.append(data)
        start -= step
    return b"".join(reversed(parts))


def lines_before(path: str, offset: int, block: int = 1 << 24) -> int:
    """How many lines of ``path`` end before byte ``offset`` (to number a piece's lines)."""
    count = 0
    with open(path, "rb") as f:
        while offset > 0:
            data = f.read(min(block, offset))
            if not data:
                break
            count += data.count(b"\n")
            offset -= len(data)
    return count

"""A chunk's bytes, from the file to the device.

- :func:`read_range`: several threads copy blocks from the page cache at once (one Python
  thread manages about 1.5 GB/s, too slow to feed a GPU).
- :class:`Buffers`: page-locked host buffers, which the device copies from at full speed and
  libcudf reads in place. Pinning memory is slow, so a process keeps and reuses them.
- :class:`DeviceUpload`: each block's copy to the device is queued as soon as the block is in.
- :class:`ReadAhead`: the chunk a GPU worker runs next is read while this one's kernels run.
  The page-cache reads took 0.39-0.49 s of a 2.4 s ETL of 10.8 GiB on one H200, and two workers
  on one host read no faster together than one alone
  (benchmarks/results/mortgage-2xH200-dense-stages.md): done ahead, they are off the path.

:func:`fetch` puts these together for one chunk's task.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .stages import stage

READ_BLOCK = 16 << 20  # bytes each thread reads at a time
# A chunk read ahead is read in this many blocks: each thread takes the GIL back once per
# block, and a task's Python on the main thread waits for it each time (read ahead in 16 MiB
# blocks, the one-GPU ETL ran 2.03-2.27 s against 1.71-1.74 s without reading ahead:
# benchmarks/results/mortgage-1xH200-dense-read-ahead.md).
AHEAD_PIECES = 4
_readers = None


def read_range(path: str, offset: int, out: np.ndarray, done=None,
               pieces: int | None = None) -> None:
    """Fill ``out`` with the file's bytes from ``offset``, in parallel blocks of READ_BLOCK
    bytes, or in ``pieces`` blocks when given. ``done(a, b)``: called by the thread that read
    block ``[a, b)`` of ``out``, as soon as it is in."""
    global _readers
    view = memoryview(out).cast("B")
    step = READ_BLOCK if pieces is None else max(1, -(-len(view) // pieces))
    blocks = [(a, min(a + step, len(view))) for a in range(0, len(view), step)]
    fd = os.open(path, os.O_RDONLY)
    try:
        def fill(block):
            first, b = block
            a = first
            while a < b:
                got = os.preadv(fd, [view[a:b]], offset + a)
                if got == 0:
                    raise EOFError(f"{path} ended at byte {offset + a}, before {offset + b}")
                a += got
            if done is not None:
                done(first, b)

        if len(blocks) <= 1:
            for block in blocks:
                fill(block)
            return
        if _readers is None:
            _readers = ThreadPoolExecutor(min(8, os.cpu_count() or 1), "mortgage-read")
        list(_readers.map(fill, blocks))
    finally:
        os.close(fd)


class Buffers:
    """Host buffers lent to chunks and given back when the chunk is parsed, kept for the next
    ones: page-locked on GPUs (``pinned=True``), plain NumPy memory otherwise. A GPU worker's
    task holds one and the chunk read ahead another; at most ``keep`` idle ones are kept (the
    largest)."""

    def __init__(self, pinned: bool, keep: int = 3):
        self.pinned = pinned
        self.keep = keep
        self.allocated = 0  # buffers made so far (reuse shows as a count that stays put)
        self._idle: list[np.ndarray] = []
        self._lent: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(view) -> (view, buffer)
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of an idle buffer (the smallest that fits), or of a new one an eighth
        larger (the next chunk, cut at a loan boundary, may be a little larger)."""
        with self._lock:
            fits = [i for i, b in enumerate(self._idle) if b.size >= nbytes]
            buffer = self._idle.pop(min(fits, key=lambda i: self._idle[i].size)) if fits else None
        if buffer is None:
            buffer = self._new(max(1, nbytes + nbytes // 8))
        view = buffer[:nbytes]
        with self._lock:
            self._lent[id(view)] = (view, buffer)
        return view

    def give(self, view: np.ndarray) -> None:
        """Take back what :meth:`take` lent (the caller no longer reads it)."""
        with self._lock:
            _, buffer = self._lent.pop(id(view))
            self._idle.append(buffer)
            self._idle.sort(key=lambda b: b.size)
            del self._idle[:-self.keep]  # the smallest idle ones go

    def lent(self, data: np.ndarray) -> bool:
        """Whether ``data`` lies in a buffer lent now."""
        with self._lock:
            return any(np.may_share_memory(data, b) for _, b in self._lent.values())

    def _new(self, nbytes: int) -> np.ndarray:
        self.allocated += 1
        if not self.pinned:
            return np.empty(nbytes, dtype=np.uint8)
        import cupy

        memory = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(nbytes), 0)
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)


BUFFERS = {True: Buffers(pinned=True), False: Buffers(pinned=False)}  # by "on a GPU"


@contextmanager
def pinned(nbytes: int):
    """A page-locked buffer of ``nbytes`` for the block, then given back."""
    buffer = BUFFERS[True].take(nbytes)
    try:
        yield buffer
    finally:
        BUFFERS[True].give(buffer)


class DeviceUpload:
    """A chunk's bytes read into page-locked memory and copied to the device block by block,
    as each block is in: the copies (55 GB/s on an H200) run while the rest of the file is
    read from the page cache (about 26 GB/s), instead of after it. Give ``allocate`` and
    ``done`` to the source's ``read``, then :meth:`take` the device copy."""

    def __init__(self, buffers: Buffers | None = None):
        self.buffers = BUFFERS[True] if buffers is None else buffers
        self.host = None
        self._device = None
        self._copied = None

    @classmethod
    def of(cls, host: np.ndarray) -> DeviceUpload:
        """The upload of bytes already in page-locked memory: one copy, queued now."""
        upload = cls()
        upload.host = host
        upload._device_for(host.size)
        upload.done(0, host.size)
        upload.queued()
        return upload

    def allocate(self, nbytes: int) -> np.ndarray:
        self.host = self.buffers.take(nbytes)
        self._device_for(nbytes)
        return self.host

    def _device_for(self, nbytes: int) -> None:
        import cupy

        self._device = cupy.empty(nbytes, dtype=cupy.uint8)

    def done(self, start: int, stop: int) -> None:
        """Queue the copy of ``[start, stop)`` on the default stream, which the chunk's kernels
        follow (called from the reading threads)."""
        import cupy

        if stop <= start:
            return
        runtime = cupy.cuda.runtime
        runtime.memcpyAsync(self._device.data.ptr + start, self.host.ctypes.data + start,
                            stop - start, runtime.memcpyHostToDevice, 0)

    def take(self):
        """The device copy; the caller holds its only reference (to free it when done)."""
        device, self._device = self._device, None
        return device

    def queued(self) -> None:
        """Every block's copy is queued: mark the point the host buffer is free after."""
        import cupy

        self._copied = cupy.cuda.Event(disable_timing=True)
        self._copied.record(cupy.cuda.Stream.null)

    def finish(self) -> None:
        """Wait until the copies have read the host buffer (before it is lent again)."""
        if self._copied is not None:
            self._copied.synchronize()


@dataclass
class _Ahead:
    source: object
    future: Future  # of (bytes, offset)


class ReadAhead:
    """The one chunk read ahead in this process, by a background thread, into a lent buffer.

    A task names the chunk its worker runs next (:meth:`start`); that chunk's task then takes
    the read over (:meth:`claim`). A hint that does not come true costs the read and nothing
    else: the task reads its file itself, and the next :meth:`start` gives the unused buffer
    back.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._ahead: _Ahead | None = None
        self._thread = ThreadPoolExecutor(1, "mortgage-read-ahead")

    def start(self, source, buffers: Buffers) -> None:
        """Read ``source`` (a :class:`~.read.Source`) into one of ``buffers`` in the
        background; a chunk read ahead earlier and not claimed is dropped."""
        future = self._thread.submit(_read_lent, source, buffers)
        with self._lock:
            old, self._ahead = self._ahead, _Ahead(source, future)
        if old is not None:
            old.future.add_done_callback(lambda f: _give_back(f, buffers))

    def claim(self, source) -> Future | None:
        """The read of ``source`` (its result: ``(bytes, offset)``, the bytes to be given back
        to the buffers when done with), or None when it is not the chunk read ahead."""
        with self._lock:
            if self._ahead is None or self._ahead.source != source:
                return None
            ahead, self._ahead = self._ahead, None
        return ahead.future


def _read_lent(source, buffers: Buffers, upload: DeviceUpload | None = None):
    """``source.read`` into a buffer lent by ``buffers`` (through ``upload``, which copies each
    block to the device as it is in, when given; else in AHEAD_PIECES blocks), given back if
    the read fails."""
    taken = []

    def allocate(nbytes):
        taken.append(upload.allocate(nbytes) if upload else buffers.take(nbytes))
        return taken[0]

    try:
        if upload is not None:
            return source.read(allocate, upload.done)
        return source.read(allocate, pieces=AHEAD_PIECES)
    except BaseException:
        if taken:
            buffers.give(taken[0])
        raise


def _give_back(future: Future, buffers: Buffers) -> None:
    if future.exception() is None:
        buffers.give(future.result()[0])


READ_AHEAD = ReadAhead()


@dataclass
class Chunk:
    """A chunk's bytes on the host, where they start in the file, and their device copy on
    its way (GPUs), until :meth:`release`."""

    data: np.ndarray
    offset: int
    upload: DeviceUpload | None
    buffers: Buffers | None  # the data's lender, or None

    def release(self) -> None:
        """Give the host bytes back to their lender, once the device copy is done with them."""
        if self.upload is not None:
            self.upload.finish()
        if self.buffers is not None:
            self.buffers.give(self.data)
            self.buffers = None


def fetch(source, gpu: bool) -> Chunk:
    """``source``'s bytes: those read ahead, when it was the chunk read ahead in this process;
    else read now (on GPUs into a page-locked buffer, copied to the device block by block)."""
    buffers = BUFFERS[gpu]
    ahead = READ_AHEAD.claim(source)
    if ahead is not None:
        with stage("waiting for the read ahead"):  # zero when it was all hidden
            data, offset = ahead.result()  # a failed read raises here, in the task that needs it
        return Chunk(data, offset, DeviceUpload.of(data) if gpu else None, buffers)
    if gpu:
        upload = DeviceUpload(buffers)
        data, offset = _read_lent(source, buffers, upload)
        upload.queued()
        return Chunk(data, offset, upload, buffers)
    data, offset = source.read()
    return Chunk(data, offset, None, None)


def read_ahead(source, gpu: bool) -> None:
    """Start reading ``source``, the chunk this worker runs next, into a lent buffer."""
    READ_AHEAD.start(source, BUFFERS[gpu])

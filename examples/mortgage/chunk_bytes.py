"""A chunk's bytes, from the file to the device.

- :func:`read_range`: several threads copy blocks from the page cache at once (one Python
  thread manages about 1.5 GB/s, too slow to feed a GPU).
- :class:`Buffers`: page-locked host buffers, which the device copies from at full speed and
  libcudf reads in place. Pinning memory is slow, so a process keeps and reuses them.
- :class:`DeviceUpload`: each block's copy to the device is queued as soon as the block is in.

:func:`fetch` puts these together for one chunk's task.

Not kept, each measured on the lent H200 machines (files in benchmarks/results/):

- Reading a worker's next chunk ahead while the GPU works on this one (a background thread,
  chunks assigned to workers in runs): slower, one GPU and two, started with the chunk's copy
  or after its parse (mortgage-1xH200-dense-read-ahead.md,
  mortgage-2xH200-dense-read-ahead-background.md).
- A host-wide file lock letting one GPU worker at a time read and copy its chunk, so that
  two workers' reads would not share the host's memory bandwidth: two GPUs took 0.95 s with
  it and 0.92 s without, medians on one cluster (mortgage-2xH200-dense-host-read-lock.md).
- Registering the file's page-cache pages with CUDA (mmap + cudaHostRegister) instead of
  reading them: 0.10-0.12 s for 1.18 GiB against 0.063 s to read and copy it
  (mortgage-1xH200-page-cache-to-device.md).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

READ_BLOCK = 16 << 20  # bytes each thread reads at a time
_readers = None


def read_range(path: str, offset: int, out: np.ndarray, done=None) -> None:
    """Fill ``out`` with the file's bytes from ``offset``, in parallel blocks. ``done(a, b)``:
    called by the thread that read block ``[a, b)`` of ``out``, as soon as it is in."""
    global _readers
    view = memoryview(out).cast("B")
    blocks = [(a, min(a + READ_BLOCK, len(view))) for a in range(0, len(view), READ_BLOCK)]
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
    ones: page-locked on GPUs (``pinned=True``), plain NumPy memory otherwise. At most
    ``keep`` idle ones are kept (the largest)."""

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


PINNED = Buffers(pinned=True)  # this process's page-locked buffers


@contextmanager
def pinned(nbytes: int):
    """A page-locked buffer of ``nbytes`` for the block, then given back."""
    buffer = PINNED.take(nbytes)
    try:
        yield buffer
    finally:
        PINNED.give(buffer)


class DeviceUpload:
    """A chunk's bytes read into page-locked memory and copied to the device block by block,
    as each block is in: the copies (55 GB/s on an H200) run while the rest of the file is
    read from the page cache (about 26 GB/s), instead of after it. Give ``allocate`` and
    ``done`` to the source's ``read``, then :meth:`take` the device copy."""

    def __init__(self, buffers: Buffers | None = None):
        self.buffers = PINNED if buffers is None else buffers
        self.host = None
        self._device = None
        self._copied = None

    def allocate(self, nbytes: int) -> np.ndarray:
        import cupy

        self.host = self.buffers.take(nbytes)
        self._device = cupy.empty(nbytes, dtype=cupy.uint8)
        return self.host

    def done(self, start: int, stop: int) -> None:
        """Queue the copy of ``[start, stop)`` on the default stream, which the chunk's kernels
        follow (called from the reading threads)."""
        import cupy

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


def _read_lent(source, upload: DeviceUpload):
    """``source.read`` into a buffer lent through ``upload``, which copies each block to the
    device as it is in; the buffer is given back if the read fails."""
    try:
        return source.read(upload.allocate, upload.done)
    except BaseException:
        if upload.host is not None:
            upload.buffers.give(upload.host)
        raise


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
    """``source``'s bytes: on GPUs in a lent page-locked buffer, copied to the device block by
    block as they are read; else in NumPy memory."""
    if gpu:
        upload = DeviceUpload()
        data, offset = _read_lent(source, upload)
        upload.queued()
        return Chunk(data, offset, upload, upload.buffers)
    data, offset = source.read()
    return Chunk(data, offset, None, None)

"""Reading a chunk's bytes while the GPU works on the chunk before it.

A GPU worker spends about a fifth of the ETL copying files from the page cache, work that
uses the host's memory bandwidth and no GPU, and two workers on one host share it. With the
read as a task of its own (:func:`read_ahead`) and two threads per GPU worker, one thread reads
the next chunk while the other runs this chunk's GPU work. :func:`gpu_turn` lets one task at a
time use the GPU: two chunks' kernels on the one default stream slowed both
(benchmarks/results/mortgage-1xH200-dense-2threads.md).

The read task returns a :class:`Ticket`, not the bytes: they stay in this process, in a
reusable (page-locked, on GPUs) buffer, until the chunk's task takes them with :func:`take`.
Dask sizes a ticket as its bytes, so the chunk's task is placed where they are; run anywhere
else, or after the buffer was given to a newer read, the task reads the file itself.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from dask.sizeof import sizeof

from .read import Source
from .stages import stage

HELD = 3  # chunks read ahead that a process keeps at most (the oldest is dropped)
SPARE = 2  # free buffers a process keeps for the next reads

_gpu = threading.Lock()
_lock = threading.Lock()
_held: OrderedDict[str, tuple[np.ndarray, int, np.ndarray]] = OrderedDict()
_spare: list[np.ndarray] = []


@dataclass(frozen=True)
class Ticket:
    """A chunk read ahead in process ``pid``: its bytes are there under ``token``."""

    source: Source
    token: str
    pid: int
    nbytes: int


@sizeof.register(Ticket)
def _sizeof_ticket(ticket: Ticket) -> int:
    """The bytes a ticket stands for, so that Dask runs the chunk's task where they are."""
    return ticket.nbytes


@contextmanager
def gpu_turn(device: str):
    """Hold the GPU for one task's work (on CPUs, nothing)."""
    if device != "gpu":
        yield
        return
    with _gpu:
        yield


def _buffer(nbytes: int, device: str) -> np.ndarray:
    """A spare buffer of at least ``nbytes`` (the smallest that fits), or a new one."""
    with _lock:
        fits = [i for i, b in enumerate(_spare) if b.size >= nbytes]
        if fits:  # by place: list.remove would compare arrays element by element
            return _spare.pop(min(fits, key=lambda i: _spare[i].size))
    size = max(nbytes, 1) * 5 // 4  # room for the next chunk, a little larger
    if device != "gpu":
        return np.empty(size, dtype=np.uint8)
    import cupy

    memory = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(size), 0)
    return np.frombuffer(memory, dtype=np.uint8, count=size)


def _give_back(buffer: np.ndarray) -> None:
    with _lock:
        _spare.append(buffer)
        _spare.sort(key=lambda b: b.size)
        del _spare[:-SPARE]  # keep the largest


def read_ahead(source: Source, device: str) -> Ticket:
    """Read ``source``'s bytes into this process's buffers; the ticket to take them."""
    buffers: list[np.ndarray] = []

    def allocate(nbytes: int) -> np.ndarray:
        buffers.append(_buffer(nbytes, device))
        return buffers[0][:nbytes]

    with stage("read ahead"):
        data, offset = source.read(allocate)
    token = uuid.uuid4().hex
    with _lock:
        _held[token] = (data, offset, buffers[0])
        dropped = [_held.popitem(last=False)[1] for _ in range(len(_held) - HELD)]
    for _, _, buffer in dropped:
        _give_back(buffer)
    return Ticket(source, token, os.getpid(), len(data))


@contextmanager
def take(item: Source | Ticket):
    """``(source, (bytes, offset) or None)`` of a chunk's task: the bytes read ahead, when this
    process holds them (given back to the buffers after the block), else None."""
    if not isinstance(item, Ticket):
        yield item, None
        return
    held = None
    if item.pid == os.getpid():
        with _lock:
            held = _held.pop(item.token, None)
    if held is None:
        yield item.source, None
        return
    data, offset, buffer = held
    try:
        yield item.source, (data, offset)
    finally:
        _give_back(buffer)

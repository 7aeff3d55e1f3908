"""CuPy: allocate through the worker's resource with ``cupy.cuda.set_allocator``.

CuPy's own default pool would otherwise keep freed memory to itself; after binding, CuPy
allocations are RMM buffers (with their own statistics adaptor, so the report can show them).
"""

from __future__ import annotations

from dask.utils import format_bytes

from . import BOUND, Binding

_previous = None


def bind(cupy, resource, stack) -> Binding:
    global _previous
    if _previous is None:
        get = getattr(cupy.cuda, "get_allocator", None)
        _previous = get() if get is not None else cupy.get_default_memory_pool().malloc
    cupy.cuda.set_allocator(make_allocator(cupy, resource))
    detail = "allocates from the worker's RMM resource"
    held = cupy.get_default_memory_pool().total_bytes()
    if held:
        detail += f"; CuPy's own pool still holds {format_bytes(held)} from before the plugin"
    return Binding("cupy", BOUND, detail)


def make_allocator(cupy, resource):
    """A CuPy allocator drawing RMM buffers from ``resource`` on CuPy's current stream.

    RMM's ``Stream`` for CuPy's current stream is kept from the last call (one pair, replaced
    at once, so threads never mix theirs up): building it for every call is measurable
    (benchmarks/cupy_allocators.py).
    """
    from rmm.pylibrmm.device_buffer import DeviceBuffer
    from rmm.pylibrmm.stream import Stream

    get_stream = cupy.cuda.get_current_stream
    get_device = cupy.cuda.runtime.getDevice
    unowned = cupy.cuda.UnownedMemory
    pointer = cupy.cuda.MemoryPointer
    last = (None, None)  # (CuPy stream, RMM Stream of it)

    def allocate(nbytes: int):
        nonlocal last
        current = get_stream()
        cached, stream = last
        if cached is not current:
            stream = Stream(obj=current)
            last = (current, stream)
        buffer = DeviceBuffer(size=nbytes, stream=stream, mr=resource)
        return pointer(unowned(buffer.ptr, buffer.size, buffer, get_device()), 0)

    return allocate


def unbind() -> None:
    global _previous
    if _previous is None:
        return
    import cupy

    cupy.cuda.set_allocator(_previous)
    _previous = None

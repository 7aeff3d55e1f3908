"""Numba: an external memory manager (EMM plugin) drawing from the worker's resource.

Numba fixes a context's memory manager when the context is created, so the binding must
happen before Numba first touches the GPU. The plugin binds when ``numba.cuda`` is imported;
if Numba's context already existed, Numba stays outside and the report says so.
"""

from __future__ import annotations

from . import BOUND, OUTSIDE, Binding

_resource = None  # the worker's resource for Numba; None: RMM's current device resource
_manager_class = None


def bind(numba_cuda, resource, stack) -> Binding:
    global _resource
    _resource = resource
    numba_cuda.set_memory_manager(manager_class())
    context = numba_cuda.current_context()
    if isinstance(context.memory_manager, manager_class()):
        return Binding("numba", BOUND, "allocates from the worker's RMM resource")
    return Binding(
        "numba",
        OUTSIDE,
        "Numba created its CUDA context before the plugin ran and keeps its own allocator; "
        "start workers with --preload dask_gpu_interop.preload (or register the plugin "
        "before any Numba GPU work) to bind it",
    )


def manager_class():
    """The EMM plugin class (built on first use: it subclasses RMM's, which imports Numba)."""
    global _manager_class
    if _manager_class is None:
        _manager_class = _make_manager_class()
    return _manager_class


def _make_manager_class():
    from cuda.bindings.driver import CUdeviceptr
    from numba.cuda import MemoryPointer
    from rmm.allocators.numba import RMMNumbaManager
    from rmm.pylibrmm.device_buffer import DeviceBuffer

    class WorkerResourceNumbaManager(RMMNumbaManager):
        """RMM's Numba manager, allocating from the worker's resource while it is bound."""

        def memalloc(self, size):
            if _resource is not None:
                buffer = DeviceBuffer(size=size, mr=_resource)
            else:
                buffer = DeviceBuffer(size=size)
            key = int(buffer.ptr) or id(buffer)
            allocations = self.allocations
            allocations[key] = buffer

            def release():
                if allocations:
                    allocations.pop(key, None)

            return MemoryPointer(self.context, CUdeviceptr(int(buffer.ptr)), size, finalizer=release)

    return WorkerResourceNumbaManager


def unbind() -> None:
    """Numba keeps the manager, which falls back to RMM's current device resource."""
    global _resource
    _resource = None

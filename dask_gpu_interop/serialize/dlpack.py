"""Hand raw memory to any DLPack consumer, with the element type we choose, without a copy.

Received frames are untyped bytes (an ``rmm.DeviceBuffer`` over UCX), and
``__cuda_array_interface__`` cannot name bfloat16 or the float8 types, so a consumer such as
JAX could only take them as ``uint8`` and would copy to reinterpret. A DLPack capsule names
the type, shape and strides itself; :class:`DLPackView` builds one over memory owned by
another object and keeps that object alive until the consumer lets go.

Pure ctypes (no framework imports), so it is tested on the CPU with NumPy, PyTorch and JAX.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence

from ..compat import python_api_handle
from .dtypes import DType

# dlpack.h, DLDeviceType
CPU, CUDA, CUDA_HOST = 1, 2, 3


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


_NAME = b"dltensor"

# What each exported capsule keeps alive (the struct, its shape and strides arrays, the owner),
# by the struct's address, until the consumer's deleter or the unused capsule's destructor runs.
_live: dict[int, tuple] = {}
_live_lock = threading.Lock()


def _release(address, live=_live, lock=_live_lock):
    # Defaults bind the state: a consumer may free its buffer while the interpreter shuts down,
    # after this module's globals are gone.
    with lock:
        live.pop(address, None)


_delete = _Deleter(_release)


# Our own handle on the C API: argtypes set on the shared ctypes.pythonapi would change how
# every other library's calls through it are converted.
_pythonapi = ctypes.PyDLL(None, handle=python_api_handle())
_pythonapi.PyCapsule_New.restype = ctypes.py_object
_pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
_pythonapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def _destroy(capsule, api=_pythonapi, name=_NAME, release=_release):
    # A consumer renames the capsule it took ("used_dltensor") and calls the deleter itself;
    # a capsule nobody took still holds our tensor and must release it here.
    if api.PyCapsule_IsValid(capsule, name):
        address = api.PyCapsule_GetPointer(capsule, name)
        if address:
            release(address)


_capsule_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy)
_DESTRUCTOR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value

# C code holds these two function pointers (a consumer's buffer may outlive this module, and
# be freed at exit): keep the callbacks alive for the life of the process.
_pythonapi.Py_IncRef.argtypes = [ctypes.py_object]
for _callback in (_delete, _capsule_destructor):
    _pythonapi.Py_IncRef(_callback)


class DLPackView:
    """``ptr`` seen as an array of ``dtype``, exported once or many times through DLPack.

    ``owner`` is whatever keeps the memory alive (a DeviceBuffer, a NumPy array, ...).
    ``strides`` are in elements. The memory must be ready: the producer's stream must have
    been synchronized before this is built (consumers get no stream to wait on).
    """

    def __init__(
        self,
        ptr: int,
        dtype: DType,
        shape: Sequence[int],
        strides: Sequence[int] | None,
        device: tuple[int, int],
        owner: object,
    ):
        if dtype.dlpack is None:
            raise TypeError(f"DLPack has no type code for {dtype.name}")
        self.ptr = int(ptr)
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        self.device = (int(device[0]), int(device[1]))
        self.owner = owner

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("DLPackView exports views only: let the consumer copy")
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"memory is on DLPack device {self.device}, not {tuple(dl_device)}")
        # ``stream`` needs no wait: the memory was ready when this view was built.
        # ``max_version``: a consumer that asks for a versioned capsule also takes the legacy one.
        return self._capsule()

    def _capsule(self):
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        code, bits, lanes = self.dtype.dlpack
        managed = _DLManagedTensor()
        managed.dl_tensor.data = self.ptr or None
        managed.dl_tensor.device = _DLDevice(*self.device)
        managed.dl_tensor.ndim = ndim
        managed.dl_tensor.dtype = _DLDataType(code, bits, lanes)
        managed.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            managed.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        managed.dl_tensor.byte_offset = 0
        managed.deleter = _delete
        address = ctypes.addressof(managed)
        with _live_lock:
            _live[address] = (managed, shape, strides, self.owner)
        return _pythonapi.PyCapsule_New(address, _NAME, _DESTRUCTOR)


def live_exports() -> int:
    """Capsules exported and not yet released (for tests: a leak shows here)."""
    with _live_lock:
        return len(_live)


def host_pointer(buffer) -> tuple[int, object]:
    """(address, owner) of a contiguous host buffer (bytes-like), keeping it alive via owner."""
    import numpy as np

    array = np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)
    return array.__array_interface__["data"][0], array


def device_of_pointer(ptr: int) -> tuple[int, int]:
    """The DLPack (device type, id) of a CUDA pointer, asked of the CUDA runtime.

    Managed memory (an RMM managed pool) is reported as CUDA memory of its device: that is
    how it is used here, and consumers such as JAX take no other device type.
    """
    try:
        from cuda.bindings import runtime
    except ImportError:
        runtime = None
    if runtime is not None:
        err, attrs = runtime.cudaPointerGetAttributes(ptr)
        if err != runtime.cudaError_t.cudaSuccess:
            raise RuntimeError(f"cudaPointerGetAttributes({ptr:#x}) failed: {err}")
        kind, device = int(attrs.type), int(attrs.device)
    else:
        import cupy  # the GPU stack brings one of the two

        attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
        kind, device = int(attrs.type), int(attrs.device)
    # cudaMemoryType: 0 unregistered host, 1 pinned host, 2 device, 3 managed
    if kind in (0, 1):
        return (CPU, 0) if kind == 0 else (CUDA_HOST, 0)
    return CUDA, device

"""JAX arrays in both serializer families, landing on the receiver's default device.

distributed has no JAX serializer: JAX arrays are pickled through NumPy and lose their
device. Here, like :mod:`.torch`:

- "cuda": the frame is the array's own device buffer (JAX arrays are immutable, so no
  copy is ever needed to send one), and the received buffer becomes the new array through
  DLPack, typed by us, so bfloat16 and float8 need no reinterpreting copy.
- "dask": the bytes go through host memory and are put on the receiver's default device.

Only single-device arrays in JAX's default (row-major) layout are sent this way; sharded
arrays are left to pickle. This module imports jax: :mod:`.registry` imports it only once a
JAX array is serialized.
"""

from __future__ import annotations

import jax
import numpy as np
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from ..compat import registered_types
from ..layout import CAIView, c_strides
from . import dlpack, dtypes, placement
from .header import ArraySpec, HeaderError, array_header, field, frame_count, parse_array


class DeviceBytes(CAIView):
    """A JAX array's device buffer seen as bytes, for distributed-ucxx to send in place.

    Its owner (the JAX array) is kept alive until the frame is sent; the array must have been
    waited on before this is made (the interface names no stream).
    """

    def __init__(self, ptr: int, nbytes: int, owner: object):
        super().__init__(ptr if nbytes else 0, (nbytes,), None, "|u1", owner)
        self.ptr = ptr
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.nbytes


def _device(x: jax.Array):
    devices = x.devices()
    if len(devices) != 1:
        raise NotImplementedError("sharded JAX arrays are left to pickle")
    return next(iter(devices))


def export(x: jax.Array) -> tuple[dict, str]:
    """(array header, platform) for a single-device array; NotImplementedError otherwise."""
    device = _device(x)
    name = np.dtype(x.dtype).name
    if name not in dtypes.JAX:
        raise NotImplementedError(f"JAX dtype {name} is left to pickle")
    layout = getattr(getattr(getattr(x, "format", None), "layout", None), "major_to_minor", None)
    if layout is not None and tuple(layout) != tuple(range(x.ndim)):
        raise NotImplementedError("JAX arrays in a non-default layout are left to pickle")
    header = array_header(dtypes.JAX[name], x.shape, c_strides(x.shape))
    return header, "cpu" if device.platform == "cpu" else "gpu"


def cuda_serialize_array(x: jax.Array) -> tuple[dict, list]:
    header, platform = export(x)
    if platform != "gpu":
        raise NotImplementedError("host arrays go by the 'dask' family")
    x.block_until_ready()  # UCX reads the buffer with no stream to wait on
    ptr = x.unsafe_buffer_pointer() if x.size else 0
    return {"array": header, "platform": platform}, [DeviceBytes(ptr, header["nbytes"], x)]


def dask_serialize_array(x: jax.Array) -> tuple[dict, list]:
    header, platform = export(x)
    host = np.ascontiguousarray(np.asarray(x))
    return {"array": header, "platform": platform}, [memoryview(host.reshape(-1).view(np.uint8))]


def _parse(header: object, frames: list) -> tuple[ArraySpec, str]:
    if not isinstance(header, dict):
        raise HeaderError(f"JAX header must be a dict, got {type(header).__name__}")
    platform = field(header, "platform", str)
    if platform not in ("cpu", "gpu"):
        raise HeaderError(f"JAX header platform {platform[:32]!r}: expected 'cpu' or 'gpu'")
    frame_count(frames, 1, "JAX array")
    spec = parse_array(header.get("array"), placement.frame_nbytes(frames[0]), dtypes.JAX)
    if not spec.c_contiguous:
        raise HeaderError(f"JAX arrays are row-major; strides {spec.strides} are not")
    return spec, platform


def _target(platform: str):
    """The receiver's default device for ``platform`` (its GPU, whatever the sender's was)."""
    if platform == "gpu":
        default = jax.devices()[0]
        if default.platform != "cpu":
            return default
        placement.no_gpu("a JAX array from a GPU")
    return jax.devices("cpu")[0]


def _numpy_dtype(spec: ArraySpec):
    return np.dtype(jax.numpy.dtype(spec.dtype.name))  # ml_dtypes names bfloat16, float8_*


def cuda_deserialize_array(header: dict, frames: list) -> jax.Array:
    """The received buffer itself becomes the array (DLPack, typed by the header)."""
    spec, platform = _parse(header, frames)
    target = _target(platform)
    (frame,) = frames
    if spec.nbytes == 0:
        return _empty(spec, target)
    if placement.cuda_interface(frame) is not None:
        ptr, owner = placement.device_pointer(frame), frame
        device = dlpack.device_of_pointer(ptr)
    else:  # host memory where device memory was expected: still correct
        ptr, owner = dlpack.host_pointer(placement.host_bytes(frame))
        device = (dlpack.CPU, 0)
    array = jax.dlpack.from_dlpack(
        dlpack.DLPackView(ptr, spec.dtype, spec.shape, None, device, owner)
    )
    return array if _device(array) == target else jax.device_put(array, target)


def dask_deserialize_array(header: dict, frames: list) -> jax.Array:
    """Host bytes, put on the receiver's default device (one copy to the GPU)."""
    spec, platform = _parse(header, frames)
    target = _target(platform)
    if spec.nbytes == 0:
        return _empty(spec, target)
    host = np.frombuffer(placement.host_bytes(frames[0]), dtype=np.uint8)
    return jax.device_put(host.view(_numpy_dtype(spec)).reshape(spec.shape), target)


def _empty(spec: ArraySpec, target) -> jax.Array:
    return jax.device_put(np.empty(spec.shape, _numpy_dtype(spec)), target)


def register() -> None:
    """Register ours for ``jax.Array`` in both families (idempotent)."""
    cuda_serialize.register(jax.Array, cuda_serialize_array)
    cuda_deserialize.register(jax.Array, cuda_deserialize_array)
    dask_serialize.register(jax.Array, dask_serialize_array)
    dask_deserialize.register(jax.Array, dask_deserialize_array)


def is_registered() -> bool:
    return registered_types(dask_serialize).get(jax.Array) is dask_serialize_array

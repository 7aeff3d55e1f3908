"""cuDF frames between GPU workers with cuDF's spilling on: device to device.

dask-cuda leaves cuDF's serializers unregistered where cuDF's spilling is on (so that its
store does not move to host memory what cuDF's spilling manages), and cuDF frames then cross
between workers pickled, through host memory. The "cuda" family spills nothing: it hands the
frames' device buffers to the comm (UCX), so here it gets cuDF's own device serialization, as
cuDF registers it when its spilling is off. cuDF sends a spillable buffer without making it
unspillable, and a spilled one as host memory; the "dask" family is left as dask-cuda leaves it.

This module imports cuDF: :mod:`.registry` imports it only once a cuDF object is serialized.
"""

from __future__ import annotations

from cudf.core.abc import Serializable
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize

from ..compat import registered_types


def device_serialize(frame):
    return frame.device_serialize()


def device_deserialize(header, frames):
    return Serializable.device_deserialize(header, frames)


def register() -> None:
    """cuDF's device serialization in the "cuda" family, where nothing registered one."""
    for dispatch, function in ((cuda_serialize, device_serialize),
                               (cuda_deserialize, device_deserialize)):  # fmt: skip
        if Serializable not in registered_types(dispatch):
            dispatch.register(Serializable)(function)


def is_registered() -> bool:
    """Whether a "cuda" serializer for cuDF's objects (cuDF's own, or this module's) is in
    force."""
    return all(Serializable in registered_types(dispatch)
               for dispatch in (cuda_serialize, cuda_deserialize))  # fmt: skip

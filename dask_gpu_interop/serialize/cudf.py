"""cuDF frames between GPU workers with cuDF's spilling on: device to device.

dask-cuda leaves cuDF's serializers unregistered where cuDF's spilling is on, and cuDF frames
then cross between workers pickled, through host memory. So do lists and tuples of them (the
shuffle's batches, a task's several frames): distributed serializes a collection item by item
(each through the "cuda" family, on the device) only where its first item has a "dask"
serializer, and pickles it whole otherwise. Here cuDF gets its own serializers back, as cuDF
registers them when its spilling is off: device serialization in the "cuda" family (the
frames' device buffers handed to the comm, UCX; a spillable buffer is sent without being made
unspillable, a spilled one as host memory) and host serialization in the "dask" family (over
TCP). dask-cuda's store keeps spillable objects, and collections holding one, out of its own
spilling, so a "dask" serializer does not make it move what cuDF's spilling manages.

This module imports cuDF: :mod:`.registry` imports it only once a cuDF object is serialized.
"""

from __future__ import annotations

from cudf.core.abc import Serializable
from distributed.protocol import dask_deserialize, dask_serialize
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize

from ..compat import registered_types


def device_serialize(frame):
    return frame.device_serialize()


def device_deserialize(header, frames):
    return Serializable.device_deserialize(header, frames)


def host_serialize(frame):
    return frame.host_serialize()


def host_deserialize(header, frames):
    return Serializable.host_deserialize(header, frames)


_FUNCTIONS = ((cuda_serialize, device_serialize), (cuda_deserialize, device_deserialize),
              (dask_serialize, host_serialize), (dask_deserialize, host_deserialize))


def register() -> None:
    """cuDF's device ("cuda") and host ("dask") serialization, where nothing registered one."""
    for dispatch, function in _FUNCTIONS:
        if Serializable not in registered_types(dispatch):
            dispatch.register(Serializable)(function)


def is_registered() -> bool:
    """Whether serializers for cuDF's objects (cuDF's own, or this module's) are in force in
    both families."""
    return all(Serializable in registered_types(dispatch) for dispatch, _ in _FUNCTIONS)

"""cuDF's serialization registered where cuDF's spilling left it out (dask-cuda registers
cuDF's serializers only with spilling off), with stand-ins for cuDF on CPUs: the "cuda" family
gets cuDF's own device (de)serialization and the "dask" family its host one, so that a list of
frames crosses item by item on the device; cuDF's own registration is kept, and the
registration chains onto the pending one for "cudf" as for the other frameworks."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
from distributed.protocol import deserialize, serialize
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from dask_gpu_interop.compat import lazy_registrations, registered_types
from dask_gpu_interop.serialize import registry

DISPATCHERS = (cuda_serialize, cuda_deserialize, dask_serialize, dask_deserialize)


class Serializable:
    """cuDF's base of serializable objects, as a stand-in: "device" frames are bytes here."""

    def __init__(self, payload: bytes):
        self.payload = payload

    def device_serialize(self):
        return {"type-serialized-name": "Frame", "is-cuda": [False]}, [self.payload]

    @classmethod
    def device_deserialize(cls, header, frames):
        return Frame(bytes(frames[0]))

    def host_serialize(self):
        return {"type-serialized-name": "Frame", "host": True}, [self.payload]

    @classmethod
    def host_deserialize(cls, header, frames):
        return Frame(bytes(frames[0]))


class Frame(Serializable):
    pass


Frame.__module__ = "cudf.core.dataframe"  # its top-level module is "cudf"


@pytest.fixture
def fake_cudf(monkeypatch):
    """A "cudf" of the stand-ins, and the dispatchers as they were afterwards."""
    saved = [(dict(lazy_registrations(d)), dict(registered_types(d))) for d in DISPATCHERS]
    modules = {"cudf": types.ModuleType("cudf"), "cudf.core": types.ModuleType("cudf.core"),
               "cudf.core.abc": types.ModuleType("cudf.core.abc")}  # fmt: skip
    modules["cudf.core.abc"].Serializable = Serializable
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "dask_gpu_interop.serialize.cudf", raising=False)
    yield
    for dispatch, (lazy, lookup) in zip(DISPATCHERS, saved, strict=True):
        lazy_registrations(dispatch).clear()
        lazy_registrations(dispatch).update(lazy)
        registered_types(dispatch).clear()
        registered_types(dispatch).update(lookup)


def _cudf_left_out():
    """dask-cuda's registration with cuDF's spilling on: nothing registered."""


def test_with_spilling_a_cudf_frame_takes_the_cuda_family_with_cudfs_own_serialization(
        fake_cudf):
    for dispatch in DISPATCHERS:
        dispatch.register_lazy("cudf", _cudf_left_out)
    registry.register(["cudf"])
    header, frames = serialize(Frame(b"rows"), serializers=("cuda", "dask", "pickle"))
    assert header["serializer"] == "cuda"  # not pickled through host memory
    out = deserialize(header, frames, deserializers=("cuda", "dask", "pickle"))
    assert isinstance(out, Frame) and out.payload == b"rows"
    assert registry.registered("cudf")
    header, frames = serialize(Frame(b"rows"), serializers=("dask", "pickle"))  # over TCP
    assert header["serializer"] == "dask" and header["sub-header"]["host"]


def test_with_spilling_a_list_of_cudf_frames_crosses_item_by_item_on_the_device(fake_cudf):
    """distributed serializes a collection item by item only where its first item has a "dask"
    serializer; else the whole list is pickled, its frames through host memory."""
    for dispatch in DISPATCHERS:
        dispatch.register_lazy("cudf", _cudf_left_out)
    registry.register(["cudf"])
    batch = ([Frame(b"a"), Frame(b"b")], [1, 2])  # as the shuffle's batches are
    header, frames = serialize(batch, serializers=("cuda", "dask", "pickle"))
    assert header.get("is-collection")
    (frames_header, _) = header["sub-headers"]
    assert frames_header.get("is-collection")
    assert [h["serializer"] for h in frames_header["sub-headers"]] == ["cuda", "cuda"]
    out = deserialize(header, frames, deserializers=("cuda", "dask", "pickle"))
    assert [frame.payload for frame in out[0]] == [b"a", b"b"] and list(out[1]) == [1, 2]


def test_cudfs_own_registration_is_kept_where_it_ran(fake_cudf):
    def own_serialize(frame):
        return {"own": True}, []

    def cudfs_own():
        cuda_serialize.register(Serializable)(own_serialize)
        cuda_deserialize.register(Serializable)(lambda header, frames: "own")

    for dispatch in DISPATCHERS:
        dispatch.register_lazy("cudf", cudfs_own)
    registry.register(["cudf"])
    assert cuda_serialize.dispatch(Frame) is own_serialize


def test_registered_at_once_where_cudfs_registrations_already_ran(fake_cudf):
    for dispatch in DISPATCHERS:
        lazy_registrations(dispatch).pop("cudf", None)
    registry.register(["cudf"])
    module = importlib.import_module("dask_gpu_interop.serialize.cudf")
    assert cuda_serialize.dispatch(Frame) is module.device_serialize
    assert cuda_deserialize.dispatch(Frame) is module.device_deserialize
    assert dask_serialize.dispatch(Frame) is module.host_serialize
    assert dask_deserialize.dispatch(Frame) is module.host_deserialize

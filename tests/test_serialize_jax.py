"""Our JAX serializers on the CPU (skipped where JAX is not installed).

The "cuda" family's receiving side goes through DLPack; with host frames it runs here on the
CPU device, which checks the typed import (bfloat16, float8) without a GPU.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize  # noqa: E402

import dask_gpu_interop.serialize as ser  # noqa: E402
from dask_gpu_interop.serialize import dtypes  # noqa: E402
from dask_gpu_interop.serialize.header import HeaderError  # noqa: E402

ser.register()
from dask_gpu_interop.serialize import jax as sj  # noqa: E402

X64 = {"int64", "uint64", "float64", "complex128"}
NAMES = [n for n in sorted(dtypes.JAX) if jax.config.jax_enable_x64 or n not in X64]
SHAPES = [(), (0,), (7,), (3, 4), (2, 0, 5), (2, 3, 4)]


def sample(name, shape):
    dtype = np.dtype(jnp.dtype(name))
    numel = int(np.prod(shape)) if shape else 1
    high = 2 if name == "bool" else 256
    raw = np.random.default_rng(0).integers(0, high, numel * dtype.itemsize, dtype=np.uint8)
    return jnp.asarray(raw.view(dtype).reshape(shape))


def same_bytes(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dask_family_round_trips(name, shape):
    x = sample(name, shape)
    header, frames = serialize(x)
    assert header["serializer"] == "dask"
    y = deserialize(header, frames)
    assert isinstance(y, jax.Array)
    assert same_bytes(x, y)


@pytest.mark.parametrize("name", NAMES)
def test_cuda_family_receiver_through_dlpack(name):
    x = sample(name, (3, 5))
    header, frames = sj.dask_serialize_array(x)
    y = sj.cuda_deserialize_array(header, frames)
    assert same_bytes(x, y)


def test_wire_format():
    x = sample("bfloat16", (4, 4))
    assert same_bytes(x, loads(dumps({"x": to_serialize(x)}))["x"])


def test_host_arrays_are_left_to_the_dask_family():
    x = jnp.arange(3.0)
    header, _ = serialize(x, serializers=("cuda", "dask", "pickle"))
    assert header["serializer"] == "dask"


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda h, f: h.update(platform="tpu"), "platform"),
        (lambda h, f: h["array"].update(strides=(1, 3)), "row-major"),
        (lambda h, f: h["array"].update(dtype="object"), "unknown dtype"),
        (lambda h, f: f.append(b""), "frames"),
        (lambda h, f: f.__setitem__(0, bytes(f[0])[:-1]), "truncated"),
    ],
)
def test_tampered_headers(edit, match):
    header, frames = sj.dask_serialize_array(sample("float32", (3, 4)))
    frames = list(frames)
    edit(header, frames)
    for load in (sj.dask_deserialize_array, sj.cuda_deserialize_array):
        with pytest.raises(HeaderError, match=match):
            load(header, frames)


def test_registration_imports_no_jax_until_an_array_is_serialized():
    code = textwrap.dedent(
        """
        import sys
        import dask_gpu_interop.serialize as ser
        ser.register()
        from distributed.protocol import serialize
        serialize([1, 2, 3])
        assert "jax" not in sys.modules
        import jax.numpy as jnp
        h, f = serialize(jnp.ones(3))
        assert "array" in h["sub-header"], h
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"

"""Zero-copy conversions on the GPU: pointer equality for every zero-copy path, values for
every path, the documented refusals, and stream ordering (gpu-marked).

docs/zero-copy.md is the table these tests confirm.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from dask_gpu_interop.device import gpu_count

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to the others

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_count() == 0, reason="needs a CUDA GPU")]

from dask_gpu_interop import convert  # noqa: E402
from dask_gpu_interop.convert import ZeroCopyError  # noqa: E402

LIBRARIES = ["cudf", "cupy", "numba", "torch", "jax"]


def _available(name: str) -> bool:
    if importlib.util.find_spec(name) is None:
        return False
    if name == "cudf":  # its Python package can be there without libcudf
        try:
            import cudf  # noqa: F401
        except Exception:
            return False
    if name == "jax":
        import jax

        return jax.devices()[0].platform != "cpu"
    if name == "torch":
        import torch

        return torch.cuda.is_available()
    return True


def need(*names):
    for name in names:
        if not _available(name):
            pytest.skip(f"{name} (with GPU support) is not installed here")


# --- making, reading and locating data in each library ----------------------------------------


def make(library: str, values: np.ndarray):
    need(library)
    if library == "cupy":
        import cupy

        return cupy.asarray(values)
    if library == "numba":
        from numba import cuda

        return cuda.to_device(values)
    if library == "torch":
        import torch

        return torch.as_tensor(values).cuda()
    if library == "jax":
        import jax

        return jax.device_put(values, jax.devices()[0])
    if library == "cudf":
        import cudf
        import cupy

        if values.ndim == 1:
            return cudf.Series(cupy.asarray(values))
        return cudf.DataFrame({i: cupy.asarray(values[:, i]) for i in range(values.shape[1])})
    raise AssertionError(library)


def pointer(obj) -> int:
    library = convert.library_of(obj)
    if library == "torch":
        return obj.data_ptr()
    if library == "jax":
        return obj.unsafe_buffer_pointer()
    if library == "cudf" and hasattr(obj, "columns"):
        return pointer(obj[obj.columns[0]])
    return int(obj.__cuda_array_interface__["data"][0])


def to_host(obj) -> np.ndarray:
    library = convert.library_of(obj)
    if library == "torch":
        return obj.detach().cpu().numpy()
    if library == "cupy":
        import cupy

        return cupy.asnumpy(obj)
    if library == "numba":
        return obj.copy_to_host()
    if library == "cudf":
        return obj.to_numpy()
    return np.asarray(obj)


PAIRS = [(a, b) for a in LIBRARIES for b in LIBRARIES if a != b]


@pytest.mark.parametrize("source, target", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_1d_zero_copy_in_every_direction(source, target):
    need(target)
    values = np.arange(1000, dtype=np.float32)
    x = make(source, values)
    y = convert.convert(x, target, copy=False)
    assert pointer(y) == pointer(x), f"{source}->{target} copied"
    np.testing.assert_array_equal(to_host(y), values)


@pytest.mark.parametrize("source, target", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_copy_true_always_copies(source, target):
    need(target)
    values = np.arange(100, dtype=np.int32)
    x = make(source, values)
    y = convert.convert(x, target, copy=True)
    assert pointer(y) != pointer(x)
    np.testing.assert_array_equal(to_host(y), values)


TWO_D = [(a, b) for a in LIBRARIES[1:] for b in LIBRARIES[1:] if a != b]


@pytest.mark.parametrize("source, target", TWO_D, ids=[f"{a}->{b}" for a, b in TWO_D])
def test_2d_zero_copy_between_array_libraries(source, target):
    need(target)
    values = np.arange(48, dtype=np.float64).reshape(6, 8)
    if "jax" in (source, target):
        import jax

        if not jax.config.jax_enable_x64:
            values = values.astype(np.float32)
    x = make(source, values)
    y = convert.convert(x, target, copy=False)
    assert pointer(y) == pointer(x)
    np.testing.assert_array_equal(to_host(y), values)


@pytest.mark.parametrize("target", ["cupy", "numba", "torch", "jax"])
def test_dataframe_from_an_f_order_buffer_is_a_view_both_ways(target):
    need("cudf", "cupy", target)
    import cupy

    base = cupy.asfortranarray(cupy.arange(40, dtype=cupy.float32).reshape(8, 5))
    df = convert.to_cudf(base, copy=False)
    assert pointer(df) == base.data.ptr
    np.testing.assert_array_equal(df.to_numpy(), cupy.asnumpy(base))
    if target == "jax":
        with pytest.raises(ZeroCopyError, match="row-major"):
            convert.to_jax(df, copy=False)
        return
    out = convert.convert(df, target, copy=False)
    assert pointer(out) == base.data.ptr
    np.testing.assert_array_equal(to_host(out), cupy.asnumpy(base))


def test_c_order_from_an_f_order_frame_needs_a_copy():
    need("cudf", "cupy")
    import cupy

    df = convert.to_cudf(cupy.asfortranarray(cupy.ones((4, 3), dtype=cupy.float32)))
    with pytest.raises(ZeroCopyError, match="C-order"):
        convert.to_cupy(df, order="C", copy=False)
    out = convert.to_cupy(df, order="C")
    assert out.flags.c_contiguous


def test_c_order_array_into_a_dataframe_needs_a_copy():
    need("cudf", "cupy")
    import cupy

    x = cupy.ones((4, 3), dtype=cupy.float32)
    with pytest.raises(ZeroCopyError, match="C-order"):
        convert.to_cudf(x, copy=False)
    df = convert.to_cudf(x)
    np.testing.assert_array_equal(df.to_numpy(), np.ones((4, 3), np.float32))


def test_ordinary_dataframes_need_a_copy_and_say_why():
    need("cudf", "cupy")
    import cudf

    df = cudf.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [5.0, 6.0]})
    # Columns in falling address order can never be one strided block.
    df = df[sorted(df.columns, key=lambda name: -pointer(df[name]))]
    with pytest.raises(ZeroCopyError, match="allocated the columns separately"):
        convert.to_cupy(df, copy=False)
    expected = np.array([[1, 3, 5], [2, 4, 6]], dtype=np.float64)[
        :, [ord(c) - 97 for c in df.columns]
    ]
    np.testing.assert_array_equal(to_host(convert.to_cupy(df)), expected)


def test_mixed_dtypes_need_a_copy():
    need("cudf", "cupy")
    import cudf

    df = cudf.DataFrame({"a": [1, 2], "b": [3.0, 4.0]})
    with pytest.raises(ZeroCopyError, match="different dtypes"):
        convert.to_torch(df, copy=False)


def test_nulls():
    need("cudf", "cupy", "torch")
    import cudf

    floats = cudf.Series([1.0, None, 3.0])
    with pytest.raises(ZeroCopyError, match="1 nulls"):
        convert.to_torch(floats, copy=False)
    out = to_host(convert.to_torch(floats))
    assert np.isnan(out[1]) and out[0] == 1.0
    with pytest.raises(ValueError, match="no NaN"):
        convert.to_torch(cudf.Series([1, None, 3]))


def test_strided_into_cudf_and_jax():
    need("cudf", "cupy", "jax")
    import cupy

    x = cupy.arange(20, dtype=cupy.float32)[::2]
    with pytest.raises(ZeroCopyError, match="strided"):
        convert.to_cudf(x, copy=False)
    with pytest.raises(ZeroCopyError, match="row-major"):
        convert.to_jax(x.reshape(2, 5).T, copy=False)
    np.testing.assert_array_equal(convert.to_cudf(x).to_numpy(), cupy.asnumpy(x))


def test_types_a_target_lacks_are_refused_clearly():
    need("torch", "numba")
    import torch

    t = torch.ones(4, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="Numba has no bfloat16"):
        convert.to_numba(t)


def test_bfloat16_between_torch_and_jax():
    need("torch", "jax")
    import torch

    t = torch.arange(8, device="cuda").to(torch.bfloat16)
    x = convert.to_jax(t, copy=False)
    assert x.unsafe_buffer_pointer() == t.data_ptr() and str(x.dtype) == "bfloat16"
    assert convert.to_torch(x, copy=False).data_ptr() == t.data_ptr()


def test_requires_grad_tensors_convert_without_a_copy():
    need("torch", "cupy")
    import torch

    t = torch.ones(16, device="cuda", requires_grad=True)
    assert convert.to_cupy(t, copy=False).data.ptr == t.data_ptr()


@pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("target", ["cupy", "numba", "jax", "cudf"])
def test_data_on_another_device_stays_there(target):
    need("torch", target)
    import torch

    with torch.cuda.device(0):
        t = torch.arange(64, dtype=torch.float32, device="cuda:1")
        y = convert.convert(t, target, copy=False)
    assert pointer(y) == t.data_ptr()
    np.testing.assert_array_equal(to_host(y), np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("target", ["cupy", "numba", "jax", "cudf"])
def test_consumer_waits_for_the_producers_stream(target):
    """A slow write on a side stream, converted at once: the consumer must see it finished."""
    need("torch", target)
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        t = torch.zeros(1 << 22, device="cuda")
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the write lands
        t.fill_(1.0)
        y = convert.convert(t, target, copy=False)
        total = float(to_host(y).sum())
    assert total == float(1 << 22)

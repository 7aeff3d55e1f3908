"""dask_gpu_interop.convert on the CPU: arguments, errors, and the paths that work on host
memory (PyTorch <-> JAX through DLPack, which is the same code the GPU uses).

GPU paths (cuDF, CuPy, Numba, and everything on the device) are in test_convert_gpu.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dask_gpu_interop import convert
from dask_gpu_interop.convert import ZeroCopyError

torch = pytest.importorskip("torch")


def test_importing_convert_imports_no_gpu_or_array_library():
    code = textwrap.dedent(
        """
        import sys
        import dask_gpu_interop.convert
        loaded = {"torch", "jax", "cupy", "cudf", "numba"} & set(sys.modules)
        assert not loaded, loaded
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"to": "tensorflow"}, "choose one of cupy, torch"),
        ({"to": "torch", "copy": "no"}, "choose False"),
        ({"to": "torch", "order": "A"}, "choose 'K'"),
    ],
)
def test_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        convert.convert(torch.ones(2), **kwargs)


def test_unknown_objects_say_what_is_expected():
    with pytest.raises(TypeError, match="expected a cuDF Series/DataFrame"):
        convert.to_torch([1, 2, 3])


@pytest.mark.parametrize("to", ["cupy", "numba", "cudf"])
def test_gpu_only_targets_refuse_host_data_clearly(to):
    with pytest.raises(TypeError, match="live on the GPU"):
        convert.convert(torch.ones(3), to)


def test_library_of_reads_the_type_module_only():
    assert convert.library_of(torch.ones(1)) == "torch"
    assert convert.library_of(object()) == "other"


def test_torch_to_torch_is_the_same_tensor():
    t = torch.arange(6.0)
    assert convert.to_torch(t, copy=False) is t
    c = convert.to_torch(t, copy=True)
    assert c.data_ptr() != t.data_ptr() and torch.equal(c, t)


def test_conjugate_views_need_a_copy():
    z = torch.tensor([1 + 2j, 3 - 1j]).conj()
    with pytest.raises(ZeroCopyError, match="conjugate bit"):
        convert.to_torch(z, copy=False)
    assert torch.equal(convert.to_torch(z), z.resolve_conj())


def test_order_requests():
    t = torch.arange(12.0).reshape(3, 4)
    with pytest.raises(ZeroCopyError, match="F-order .* from a C-order source needs a copy"):
        convert.to_torch(t, order="F", copy=False)
    f = convert.to_torch(t, order="F")
    assert f.stride() == (1, 3) and torch.equal(f, t)
    assert convert.to_torch(f, order="C").is_contiguous()
    assert convert.to_torch(t, order="C", copy=False) is t


def test_sparse_tensors_are_refused():
    with pytest.raises(TypeError, match="to_dense"):
        convert.to_torch(torch.eye(3).to_sparse())


# --- PyTorch <-> JAX on the CPU (skipped without JAX) ------------------------------------------


@pytest.fixture
def jax():
    return pytest.importorskip("jax")


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.bool, torch.int16,
     torch.float16, torch.complex64, torch.uint16, torch.float8_e4m3fn],
    ids=str,
)  # fmt: skip
def test_torch_to_jax_and_back_is_zero_copy(jax, dtype):
    t = torch.arange(24).reshape(4, 6).to(dtype)
    x = convert.to_jax(t, copy=False)
    assert x.unsafe_buffer_pointer() == t.data_ptr()
    assert x.shape == (4, 6)
    back = convert.to_torch(x, copy=False)
    assert back.data_ptr() == t.data_ptr()
    assert back.dtype == dtype
    same = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    assert torch.equal(back.view(same), t.view(same))


def test_requires_grad_tensors_are_detached_not_copied(jax):
    t = torch.randn(4, 3, requires_grad=True)
    x = convert.to_jax(t, copy=False)
    assert x.unsafe_buffer_pointer() == t.data_ptr()


def test_strided_tensors_into_jax(jax):
    t = torch.arange(12.0).reshape(3, 4).t()
    with pytest.raises(ZeroCopyError, match="always row-major"):
        convert.to_jax(t, copy=False)
    x = convert.to_jax(t)  # copy=None: copies, because it must
    assert x.unsafe_buffer_pointer() != t.data_ptr()
    assert (jax.numpy.asarray(x) == jax.numpy.asarray(t.contiguous().numpy())).all()


def test_copy_true_always_copies(jax):
    t = torch.arange(8.0)
    x = convert.to_jax(t, copy=True)
    assert x.unsafe_buffer_pointer() != t.data_ptr()
    assert (jax.numpy.asarray(x) == jax.numpy.arange(8.0)).all()
    y = convert.to_torch(x, copy=True)
    assert y.data_ptr() != x.unsafe_buffer_pointer()


def test_64_bit_types_with_x64_disabled(jax):
    if jax.config.jax_enable_x64:
        pytest.skip("x64 is enabled here")
    t = torch.arange(4, dtype=torch.float64)
    with pytest.raises(ZeroCopyError, match="64-bit types disabled"):
        convert.to_jax(t, copy=False)
    with pytest.warns(UserWarning, match="64-bit types disabled"):
        x = convert.to_jax(t)
    assert str(x.dtype) == "float32"


def test_jax_to_jax_is_the_same_array(jax):
    x = jax.numpy.arange(3.0)
    assert convert.to_jax(x, copy=False) is x

"""The pipeline's hand-offs between frameworks, each one a view of the same memory.

On the GPU: a cuDF column -> CuPy (``__cuda_array_interface__``), CuPy -> Numba
(``cuda.as_cuda_array``), CuPy <-> PyTorch (``dask_gpu_interop.convert``: DLPack, or the CUDA
array interface for managed memory). On the CPU the same calls hand a pandas column to NumPy
and NumPy to PyTorch, also without copies. ``data_pointer`` reads
the address of the first element of any of them, so tests can check that nothing was copied.
"""

from __future__ import annotations

from .backend import Backend


def column_to_array(series, backend: Backend):
    """A float32 column of a cuDF/pandas DataFrame as a CuPy/NumPy array, without a copy.

    A copy happens only when the column is not float32 or (cuDF) has nulls: say so loudly
    rather than hide it, because a null in an ECG is a gap the segmentation cannot bridge.
    """
    if bool(series.isna().any()):
        raise ValueError(
            f"column {series.name!r} has missing values: an ECG must be a gap-free series "
            "(fill or cut the gap before running the pipeline)"
        )
    if backend.is_gpu:
        if series.dtype != "float32":
            series = series.astype("float32")
        return series.values  # a CuPy view of the column's device buffer
    return series.to_numpy(dtype="float32", copy=False)


def as_numba_device_array(array):
    """A Numba device array over a CuPy array's memory (the CUDA array interface)."""
    from numba import cuda

    return cuda.as_cuda_array(array)


# Numba's warning when a launch has fewer blocks than keep the GPU busy ("Grid size 12 will
# likely result in GPU under-utilization due to low occupancy."): the pipeline's kernels run
# a block per beat or per 256 samples of a chunk, and a chunk may hold few on purpose.
LOW_OCCUPANCY = r"Grid size \d+ will likely result in GPU under-utilization"


def launch(kernel, blocks: int, threads: int, *args) -> None:
    """``kernel[blocks, threads](*args)``, without Numba's low-occupancy warning (only that
    one: any other warning passes)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=LOW_OCCUPANCY)
        configured = kernel[blocks, threads]  # where Numba warns
    configured(*args)


def to_torch(array):
    """A PyTorch tensor over a CuPy or NumPy array's memory, on the array's device."""
    if hasattr(array, "__cuda_array_interface__"):
        from dask_gpu_interop.convert import to_torch as convert_to_torch

        return convert_to_torch(array, copy=False)  # stream-ordered; managed memory too
    import torch

    return torch.from_dlpack(array)  # read-only arrays too (from_numpy warns on those)


def from_torch(tensor, backend: Backend):
    """A CuPy/NumPy array over a tensor's memory."""
    if backend.is_gpu:
        from dask_gpu_interop.convert import to_cupy

        return to_cupy(tensor.detach(), copy=False)
    return tensor.detach().numpy()


def data_pointer(obj) -> int:
    """The address of ``obj``'s first element: device address for GPU objects, host for CPU."""
    if hasattr(obj, "data_ptr"):  # torch.Tensor
        return int(obj.data_ptr())
    if hasattr(obj, "__cuda_array_interface__"):
        return int(obj.__cuda_array_interface__["data"][0])
    if hasattr(obj, "__array_interface__"):
        return int(obj.__array_interface__["data"][0])
    if hasattr(obj, "to_numpy"):  # a pandas Series: its values' buffer
        return data_pointer(obj.to_numpy(copy=False))
    raise TypeError(f"data_pointer: {type(obj).__name__} exposes no array interface")

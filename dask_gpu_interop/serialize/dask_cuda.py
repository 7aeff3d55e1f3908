"""Teach dask-cuda which torch tensors live on the GPU.

dask-cuda's workers store each result in a device or host buffer, deciding with
``is_device_object``, whose default is ``hasattr(obj, "__cuda_array_interface__")``. For
torch tensors that property raises instead of saying no: ``KeyError`` for float8 dtypes and
``RuntimeError`` for tensors that require grad, so storing such a tensor failed the task. A tensor's own ``is_cuda`` answers exactly.
"""

from __future__ import annotations

import sys

from ..compat import lazy_registrations


def register() -> None:
    """Register with dask-cuda where it is loaded (its workers import it before any task)."""
    module = sys.modules.get("dask_cuda.is_device_object")
    if module is None and "dask_cuda" in sys.modules:
        try:
            import dask_cuda.is_device_object as module
        except ImportError:
            return
    if module is None:
        return
    dispatch = module.is_device_object
    if "torch" in lazy_registrations(dispatch):
        return

    @dispatch.register_lazy("torch")
    def _register_torch():
        import torch

        @dispatch.register(torch.Tensor)
        def is_device_tensor(tensor) -> bool:
            return bool(tensor.is_cuda)

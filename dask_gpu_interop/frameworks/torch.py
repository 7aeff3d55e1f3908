"""PyTorch: allocate from the worker's pool.

Async mode: PyTorch's own ``cudaMallocAsync`` backend draws from the device's default CUDA
pool, the same pool RMM's async mode views, at PyTorch's native speed. The backend is chosen
when PyTorch loads, so it is set before PyTorch is imported (``prepare``).

Pool and managed modes: RMM's pluggable allocator, which allocates from RMM's current device
resource (PyTorch's bytes are counted under "rmm", with cuDF's). PyTorch can swap its
allocator only before its first CUDA allocation, and never back.
"""

from __future__ import annotations

import os
import sys

from .._imports import loaded
from . import BOUND, OUTSIDE, SHARED, Binding

ASYNC = "cudaMallocAsync"
_CONF_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_bound = False
_conf_set = None  # the variable prepare() set, so unbind can take it back

_COUNTED = "allocates through RMM's current resource (counted under 'rmm', with cuDF)"


def prepare(state) -> None:
    """Before PyTorch is imported: in async mode, choose its cudaMallocAsync backend."""
    global _conf_set
    if state.mode != "async" or "torch" in sys.modules:
        return
    if any("backend:" in os.environ.get(name, "") for name in _CONF_NAMES):
        return  # the user chose a backend
    name = "PYTORCH_CUDA_ALLOC_CONF"
    current = os.environ.get(name, "")
    os.environ[name] = ",".join(part for part in (current, f"backend:{ASYNC}") if part)
    _conf_set = (name, current)


def _backend(torch) -> str:
    try:
        return torch.cuda.get_allocator_backend()
    except Exception:
        return "unknown"


def bind(torch, resource, state) -> Binding:
    global _bound
    if state.mode == "async" and _backend(torch) == ASYNC:
        detail = (
            "PyTorch's cudaMallocAsync backend, on the device's default pool that RMM's async "
            "mode draws from (in the CUDA pool numbers, not RMM's statistics)"
        )
        if state.plan.release_threshold is not None:
            _keep_release_threshold(torch, state)
            detail += "; the pool's release threshold re-applied after PyTorch started"
        return Binding("torch", SHARED, detail)
    if _bound:
        return Binding("torch", BOUND, _COUNTED)
    from rmm.allocators.torch import rmm_torch_allocator

    if rmm_torch_allocator is None:
        return Binding("torch", OUTSIDE, "this PyTorch build has no CUDA support")
    try:
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
    except RuntimeError as err:
        return Binding(
            "torch",
            OUTSIDE,
            f"PyTorch allocated on the GPU before the plugin ran ({err}); its caching allocator "
            "keeps its own memory. Start workers with --preload dask_gpu_interop.preload to "
            "bind it from the start",
        )
    _bound = True
    return Binding("torch", BOUND, _COUNTED)


def _keep_release_threshold(torch, state) -> None:
    """PyTorch raises the pool's release threshold to the maximum when its allocator first
    allocates on a device (seen with torch 2.11: 2**64 - 1 instead of the 1 GiB asked for).
    Let that happen now, then have the worker's memory stack set its threshold back."""
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    state.stack.restore_release_threshold()


def natively_initialized() -> bool:
    """PyTorch has initialized CUDA with its own caching allocator (so it cannot be bound)."""
    torch = loaded("torch")
    if torch is None or _bound:
        return False
    try:
        return bool(torch.cuda.is_initialized()) and _backend(torch) != ASYNC
    except Exception:
        return False


def is_bound() -> bool:
    return _bound


def unbind() -> None:
    """Take back the backend choice if PyTorch was never loaded; a loaded PyTorch keeps its
    allocator (it cannot swap twice) and follows RMM's current resource from now on."""
    global _conf_set
    if _conf_set is not None and "torch" not in sys.modules:
        name, previous = _conf_set
        if previous:
            os.environ[name] = previous
        else:
            os.environ.pop(name, None)
    _conf_set = None

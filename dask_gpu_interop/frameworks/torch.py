"""PyTorch: route its CUDA allocations through RMM with RMM's pluggable allocator.

PyTorch can swap its allocator only before its first CUDA allocation, and never back. The
plugin swaps when ``torch`` is imported; RMM's torch allocator allocates from RMM's current
device resource, so PyTorch's bytes are counted under "rmm" with cuDF's.
"""

from __future__ import annotations

import sys

from . import BOUND, OUTSIDE, Binding

_bound = False

_COUNTED = "allocates through RMM's current resource (counted under 'rmm', with cuDF)"


def bind(torch, resource, stack) -> Binding:
    global _bound
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


def natively_initialized() -> bool:
    """PyTorch has initialized CUDA with its own caching allocator (so it cannot be bound)."""
    torch = sys.modules.get("torch")
    if torch is None or _bound:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def is_bound() -> bool:
    return _bound


def unbind() -> None:
    """PyTorch cannot swap allocators twice: it follows RMM's current resource from now on."""

"""Tensors for serializer tests, on any device: every dtype's bit patterns, views, shapes,
and a bitwise comparison (NaN-safe, for dtypes torch cannot compare or copy)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

SHAPES = [(), (0,), (5,), (4, 3), (2, 0, 3), (3, 4, 5)]
VIEWS = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.transpose(0, -1) if x.dim() > 1 else x,
    "sliced": lambda x: x[::2] if x.dim() else x,
    "narrowed": lambda x: x[..., 1:] if x.dim() else x,
    "expanded": lambda x: x[:1].expand(3, *x.shape[1:]) if x.dim() else x,
}
_SAME_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def sample(dtype, shape, device="cpu"):
    """Distinct bit patterns for any dtype (random bytes, viewed)."""
    size = torch.empty((), dtype=dtype).element_size()
    high = 2 if dtype is torch.bool else 256  # other bytes are not valid booleans
    raw = torch.randint(0, high, (math.prod(shape) * size,), dtype=torch.uint8, device=device)
    return raw.view(dtype).reshape(shape)


def raw_bytes(t):
    """The elements' bytes in logical order, on the host."""
    same = _SAME_SIZE.get(t.element_size())
    t = t.detach()
    t = t.view(same) if same is not None else t
    # clone, not contiguous(): a size-1 dim with stride 0 counts as contiguous and stays so
    return t.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8).cpu()


def same_bytes(a, b) -> bool:
    """Same shape, dtype and bits."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.numel() == 0 or torch.equal(raw_bytes(a), raw_bytes(b))

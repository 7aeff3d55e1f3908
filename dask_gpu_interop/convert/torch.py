"""PyTorch tensors: read as they are (detached, their lazy bits resolved), built through DLPack
(or ``__cuda_array_interface__`` for managed memory and producers without DLPack).

torch is imported only when one of these functions runs.
"""

from __future__ import annotations

from ..layout import Layout, cuda_interface
from ..serialize import dlpack
from ..serialize.dtypes import TORCH
from .common import Adapter, Source, ZeroCopyError, check_view, finish, sync_producer


def build(src: Source, copy, order):
    import torch

    if src.library == "torch":
        out = src.obj if src.copied or src.origin is None else src.origin
    elif hasattr(src.obj, "__dlpack__") and not is_managed(src.obj):
        # torch passes its current stream: the producer makes it wait for pending writes.
        out = torch.from_dlpack(src.obj)
    else:
        sync_producer(src)
        # device= imports the interface in place (without it, torch copies to the host)
        out = torch.as_tensor(src.obj, device=torch.device("cuda", src.device[1]))
    out = check_view(src, layout_of(out), out, copy, "PyTorch")
    return finish(src, out, copy, order, layout_of, lambda t: copy_in_order(t, order))


def is_managed(obj) -> bool:
    """Managed memory: DLPack calls it kDLCUDAManaged, which PyTorch refuses (seen with
    torch 2.11), so such data goes by the CUDA array interface instead (also zero-copy)."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or cuda_interface(obj) is None:
        return False
    try:
        return int(device()[0]) == 13  # kDLCUDAManaged
    except Exception:
        return False


def copy_in_order(t, order):
    """A copy of tensor ``t`` in ``order`` ("C" or "F"; else its own layout)."""
    import torch

    if order == "F" and t.dim() > 1:
        dims = tuple(reversed(range(t.dim())))
        return t.permute(dims).contiguous().permute(dims)
    return t.clone(memory_format=torch.contiguous_format if order == "C" else torch.preserve_format)


def layout_of(t) -> Layout:
    size = t.element_size()
    return Layout(t.data_ptr() if t.numel() else 0, tuple(t.shape),
                  tuple(s * size for s in t.stride()), size)  # fmt: skip


def source(t, copy) -> Source:
    import torch

    t = t.detach()
    if t.layout is not torch.strided:
        raise TypeError(f"{t.layout} tensors have no single buffer: use to_dense() first")
    copied = False
    for bit, resolve in (("conjugate", "resolve_conj"), ("negative", "resolve_neg")):
        if getattr(t, "is_conj" if bit == "conjugate" else "is_neg")():
            if copy is False:
                raise ZeroCopyError(
                    f"the tensor has its {bit} bit set (a lazy view): materializing it copies; "
                    f"call {resolve}() or pass copy=None"
                )
            t, copied = getattr(t, resolve)(), True
    name = str(t.dtype).removeprefix("torch.")
    if name not in TORCH:
        raise TypeError(f"torch.{name} tensors are not converted (no plain element type)")
    itemsize = t.element_size()
    return Source(
        t,
        "torch",
        TORCH[name],
        tuple(t.shape),
        tuple(s * itemsize for s in t.stride()),
        t.data_ptr() if t.numel() else 0,
        _device(t),
        copied,
    )


def _device(t) -> tuple[int, int]:
    if t.device.type == "cuda":
        return dlpack.CUDA, t.device.index
    if t.device.type == "cpu":
        return dlpack.CPU, 0
    raise TypeError(f"tensors on {t.device.type} are not converted")


def wait(src: Source) -> None:
    import torch

    torch.cuda.current_stream(src.obj.device).synchronize()


ADAPTER = Adapter(
    build=build,
    read=lambda t, copy, order: source(t, copy),
    wait=wait,
    copy=lambda src, order: source(copy_in_order(src.obj, order), None),
)

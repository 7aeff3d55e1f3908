"""PyTorch tensors in both of distributed's serializer families, landing on the receiver's GPU.

distributed 2026.7 cannot send a CUDA tensor at all (its "dask" serializer calls ``.numpy()``)
and has no "cuda" serializer, so tensors never travel GPU to GPU over UCX. Here:

- "cuda": the frame is the tensor's own bytes on the device (a ``uint8`` view, no copy when
  the tensor is dense), so distributed-ucxx sends it device to device and the receiver's
  buffer comes from its RMM resource; that buffer becomes the new tensor without a copy.
- "dask": the bytes go through host memory (TCP, spilling) and come back onto the receiving
  process's current CUDA device, or stay on the CPU for CPU tensors.

Every non-quantized dtype travels as bytes (see :mod:`.dtypes`), so bfloat16, float8 and
complex32 need no NumPy equivalent. Dense views in any dimension order (transposes,
channels-last) are sent as they are; other views are made contiguous first, so only the
bytes they need travel. ``requires_grad``, ``.grad`` and ``nn.Parameter`` are kept.

This module imports torch: :mod:`.registry` imports it only once a tensor is serialized.
"""

from __future__ import annotations

import warnings

import torch
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from ..compat import registered_types
from . import dtypes, placement
from .header import (
    ArraySpec,
    HeaderError,
    array_header,
    field,
    frame_count,
    is_dense,
    parse_array,
)

_KINDS = (torch.Tensor, torch.nn.Parameter)


# --- the tensor as bytes, and back: shared by both families --------------------------------


def export(t: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """(array header, flat ``uint8`` tensor on ``t``'s device holding exactly its elements).

    Raises NotImplementedError for what bytes cannot carry (sparse, quantized, meta, other
    devices), so distributed falls back to pickle for those.
    """
    if type(t) not in _KINDS and _overrides_dispatch(type(t)):
        raise NotImplementedError(f"{type(t).__name__} (a tensor subclass) is left to pickle")
    t = t.detach()
    if t.layout is not torch.strided:
        raise NotImplementedError(f"{t.layout} tensors are left to pickle")
    if t.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"tensors on {t.device.type} are left to pickle")
    name = str(t.dtype).removeprefix("torch.")
    if name not in dtypes.TORCH:
        reason = dtypes.TORCH_UNSUPPORTED.get(
            name, "a dtype dask-gpu-interop does not know (newer than its table): it travels "
                  "by pickle, through host memory")
        raise NotImplementedError(f"torch.{name}: {reason}")
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not is_dense(t.shape, t.stride()):
        t = _contiguous(t)
    numel = t.numel()
    if numel == 0:
        flat = torch.empty(0, dtype=torch.uint8, device=t.device)
    else:
        # Every stride is >= 0, so element [0, ..., 0] is the lowest address of the block.
        flat = t.as_strided((numel,), (1,)).view(torch.uint8)
    return array_header(dtypes.TORCH[name], tuple(t.shape), tuple(t.stride())), flat


# Same-size integer types: copying through them works for every dtype, including the "shell"
# ones (int1..int7, bits8, float4_e2m1fn_x2...) that have no copy kernel of their own.
_SAME_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    same = _SAME_SIZE.get(t.element_size())
    if same is None:
        return t.contiguous()
    return t.view(same).contiguous().view(t.dtype)


def _overrides_dispatch(cls: type) -> bool:
    """Wrapper subclasses (FakeTensor, DTensor, ...) have no plain storage to send."""
    return getattr(cls, "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__


def rebuild(spec: ArraySpec, flat: torch.Tensor) -> torch.Tensor:
    """The tensor ``spec`` describes, viewing ``flat`` (``uint8``, checked to fit) in place."""
    dtype = getattr(torch, spec.dtype.name)  # a name from our table, never from the wire
    if spec.numel == 0:
        return torch.empty(spec.shape, dtype=dtype, device=flat.device)
    if flat.numel() != spec.nbytes:  # parse_array checked the frame; this guards the caller
        raise HeaderError(f"buffer holds {flat.numel()} bytes, the header needs {spec.nbytes}")
    if flat.data_ptr() % spec.dtype.itemsize:
        flat = flat.clone()  # misaligned for the element type (a host frame at an odd offset)
    typed = flat.view(dtype)
    # A tensor of its own over the same memory, not a view of ``flat``: autograd treats views
    # differently (``detach_()`` refuses them, as distributed's own tests found), and a sent
    # tensor arrives as a leaf.
    try:
        out = torch.empty(0, dtype=dtype, device=flat.device)
        return out.set_(typed.untyped_storage(), typed.storage_offset(), spec.shape, spec.strides)
    except (RuntimeError, TypeError):  # dtypes without kernels for empty/set_ (bit shells)
        return typed.as_strided(spec.shape, spec.strides)


# --- framing ---------------------------------------------------------------------------------


def _dumps(t: torch.Tensor, to_frame) -> tuple[dict, list]:
    header, flat = export(t)
    sub = {
        "array": header,
        "device": t.device.type,
        "requires_grad": bool(t.requires_grad),
        "parameter": isinstance(t, torch.nn.Parameter),
        "grad": None,
    }
    frames = [to_frame(flat)]
    grad = t.grad if t.is_leaf else None
    if grad is not None:
        sub["grad"], grad_flat = export(grad)
        frames.append(to_frame(grad_flat))
    return sub, frames


def _loads(header: object, frames: list, to_flat) -> torch.Tensor:
    """Check everything first, then build: ``to_flat(frame, device)`` makes a ``uint8`` tensor."""
    if not isinstance(header, dict):
        raise HeaderError(f"torch header must be a dict, got {type(header).__name__}")
    kind = field(header, "device", str)
    requires_grad = field(header, "requires_grad", bool)
    parameter = field(header, "parameter", bool)
    grad_header = field(header, "grad", dict, optional=True)
    frame_count(frames, 1 if grad_header is None else 2, "torch tensor")
    spec = parse_array(header.get("array"), _nbytes(frames[0]), dtypes.TORCH)
    grad_spec = None
    if grad_header is not None:
        grad_spec = parse_array(grad_header, _nbytes(frames[1]), dtypes.TORCH)
        if grad_spec.shape != spec.shape or grad_spec.dtype != spec.dtype:
            raise HeaderError(
                f"grad of shape {grad_spec.shape} ({grad_spec.dtype.name}) for a tensor of "
                f"shape {spec.shape} ({spec.dtype.name})"
            )
    if requires_grad and spec.dtype.name not in _DIFFERENTIABLE:
        raise HeaderError(f"requires_grad on a {spec.dtype.name} tensor")
    device = _target_device(kind)
    t = rebuild(spec, to_flat(frames[0], device))
    if parameter:
        t = torch.nn.Parameter(t, requires_grad=requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    if grad_spec is not None:
        t.grad = rebuild(grad_spec, to_flat(frames[1], device))
    return t


_DIFFERENTIABLE = {
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
}  # fmt: skip


# --- frames and devices ------------------------------------------------------------------


def _device_frame(flat: torch.Tensor) -> torch.Tensor:
    """The flat CUDA tensor itself: it has ``__cuda_array_interface__``, so UCX sends it GPU
    to GPU."""
    return flat


def _host_frame(flat: torch.Tensor) -> memoryview:
    """Host bytes: a CPU tensor's own memory, or a CUDA tensor's bytes copied to the host."""
    return memoryview(flat.cpu().numpy())


def _nbytes(frame) -> int:
    if isinstance(frame, torch.Tensor):
        if not frame.is_contiguous():
            raise HeaderError("tensor frame is not contiguous")
        return frame.nbytes
    return placement.frame_nbytes(frame)


def _target_device(kind: str) -> torch.device:
    """Where a received tensor goes: the receiver's current GPU, never the sender's index."""
    if kind == "cpu":
        return torch.device("cpu")
    if kind != "cuda":
        raise HeaderError(f"torch header device {kind[:32]!r}: expected 'cpu' or 'cuda'")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    placement.no_gpu("a CUDA torch tensor")
    return torch.device("cpu")


def _flat_from_device_frame(frame, device: torch.device) -> torch.Tensor:
    """A ``uint8`` tensor on ``device`` over ``frame``; no copy when the frame is there."""
    if isinstance(frame, torch.Tensor):
        flat = frame.detach()
    elif placement.cuda_interface(frame) is not None:
        if _nbytes(frame) == 0:
            return torch.empty(0, dtype=torch.uint8, device=device)
        # With device= the CUDA array interface is imported in place (without it, torch
        # copies to the host); the tensor keeps the frame (e.g. an rmm.DeviceBuffer) alive.
        flat = torch.as_tensor(frame, device=device)
    else:  # host memory where device memory was expected: still correct, one copy
        return _flat_from_host_frame(frame, device)
    if flat.dtype is not torch.uint8 or flat.dim() != 1:
        flat = flat.reshape(-1).view(torch.uint8)
    return flat.to(device)


def _flat_from_host_frame(frame, device: torch.device) -> torch.Tensor:
    """A ``uint8`` tensor on ``device`` with the frame's bytes (no copy for a CPU target)."""
    view = placement.host_bytes(frame)
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8, device=device)
    if view.readonly and device.type == "cpu":
        view = memoryview(bytearray(view))  # tensors are writable: never alias read-only bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only source, copied to the GPU below
        flat = torch.frombuffer(view, dtype=torch.uint8)
    return flat.to(device)


# --- the two families ------------------------------------------------------------------------


def cuda_serialize_tensor(t: torch.Tensor) -> tuple[dict, list]:
    """Device frames: the tensor's own bytes (a dense tensor is not copied)."""
    if t.device.type != "cuda":
        raise NotImplementedError("host tensors go by the 'dask' family")
    header, frames = _dumps(t, _device_frame)
    # UCX synchronizes only the default stream before sending: finish our stream's work
    # (a contiguous() copy, or the producer's kernels on the current stream) first.
    torch.cuda.current_stream(t.device).synchronize()
    return header, frames


def cuda_deserialize_tensor(header: dict, frames: list) -> torch.Tensor:
    return _loads(header, frames, _flat_from_device_frame)


def dask_serialize_tensor(t: torch.Tensor) -> tuple[dict, list]:
    """Host frames: a CPU tensor's own memory, a CUDA tensor's bytes copied to the host."""
    return _dumps(t, _host_frame)


def dask_deserialize_tensor(header: dict, frames: list) -> torch.Tensor:
    return _loads(header, frames, _flat_from_host_frame)


def register() -> None:
    """Register ours over distributed's own torch serializers (idempotent)."""
    try:  # distributed's module first, so that ours, registered after, win
        import distributed.protocol.torch as upstream
    except ImportError:
        upstream = None
    for kind in _KINDS:
        cuda_serialize.register(kind, cuda_serialize_tensor)
        cuda_deserialize.register(kind, cuda_deserialize_tensor)
        dask_serialize.register(kind, dask_serialize_tensor)
        dask_deserialize.register(kind, dask_deserialize_tensor)
    # Drop lookups cached for tensor subclasses before we were registered.
    stale = set()
    if upstream is not None:
        stale = {
            getattr(upstream, name, None)
            for name in (
                "serialize_torch_Tensor",
                "deserialize_torch_Tensor",
                "serialize_torch_Parameters",
                "deserialize_torch_Parameters",
            )
        }
        stale.discard(None)
    for dispatch in (cuda_serialize, cuda_deserialize, dask_serialize, dask_deserialize):
        for cls, func in list(registered_types(dispatch).items()):
            if isinstance(cls, type) and issubclass(cls, torch.Tensor) and cls not in _KINDS:
                if func in stale:
                    del registered_types(dispatch)[cls]


def is_registered() -> bool:
    return all(
        registered_types(dispatch).get(torch.Tensor) is func
        for dispatch, func in (
            (cuda_serialize, cuda_serialize_tensor),
            (cuda_deserialize, cuda_deserialize_tensor),
            (dask_serialize, dask_serialize_tensor),
            (dask_deserialize, dask_deserialize_tensor),
        )
    )

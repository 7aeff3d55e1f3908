"""What GPU a process sees, asked without creating a CUDA context where that can be avoided,
and a worker's wait for each task's stream where its GPU libraries use per-thread streams.

Used by the plugin on workers and by the CPU/GPU switch; imports CUDA bindings only when
called, so the package imports on machines with no GPU stack at all.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    total: int
    free: int
    uuid: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def gpus_hidden() -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` hides every GPU from this process (asked of nothing
    else, so without starting CUDA)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and visible.strip() in ("", "-1")


def gpu_count() -> int:
    """How many CUDA GPUs this process may use, asked without creating a CUDA context.

    NVML answers where it can: it lists the devices at once, where CUDA's runtime first
    initializes its driver for every device, which a command would wait for before its
    cluster starts. ``CUDA_VISIBLE_DEVICES`` is read as CUDA reads it (indices or
    UUIDs, up to the first entry that names no device); where NVML cannot say as CUDA would
    (MIG instances, no NVML), CUDA's runtime is asked.

    Returns
    -------
    int
        The devices CUDA lists, as ``CUDA_VISIBLE_DEVICES`` leaves them; 0 where none is
        visible or no CUDA stack is installed.

    Examples
    --------
    >>> from dask_gpu_interop import gpu_count
    >>> gpu_count() >= 0
    True
    """
    if gpus_hidden():
        return 0
    counted = _nvml_count(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if counted is not None:
        return counted
    try:
        from cuda.bindings import runtime
    except ImportError:
        return 0
    err, count = runtime.cudaGetDeviceCount()
    return int(count) if err == runtime.cudaError_t.cudaSuccess else 0


def _nvml_count(visible: str | None) -> int | None:
    """The devices CUDA would list under ``visible`` (``CUDA_VISIBLE_DEVICES``, None: unset),
    counted from NVML's list; None where NVML cannot say: not installed or not answering, a
    GPU in MIG mode (CUDA lists its instances, NVML the GPU), an entry that is neither an index
    nor a GPU's UUID (an instance's, say)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        if any(_mig_enabled(pynvml, handle) for handle in handles):
            return None
        uuids = [_text(pynvml.nvmlDeviceGetUUID(handle)) for handle in handles]
    except pynvml.NVMLError:
        return None
    if visible is None:
        return len(uuids)
    chosen: list[int] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.lstrip("+-").isdigit():
            found = [int(entry)] if 0 <= int(entry) < len(uuids) else []
        elif entry.upper().startswith("GPU-"):  # a UUID, or its start where that names one
            found = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(entry.lower())]
        else:  # a MIG instance, or a spelling left to CUDA
            return None
        if len(found) != 1 or found[0] in chosen:
            break  # CUDA lists the devices before the first entry that names none
        chosen.append(found[0])
    return len(chosen)


def _mig_enabled(pynvml, handle) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # a GPU without MIG
        return False
    return bool(current)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def current_device() -> DeviceInfo:
    """The current device of this process (creates the CUDA context if there is none)."""
    from cuda.bindings import runtime

    index = _check(runtime.cudaGetDevice(), "cudaGetDevice")
    _check(runtime.cudaFree(0), "cudaFree(0) (creating the CUDA context)")
    free, total = _check(runtime.cudaMemGetInfo(), "cudaMemGetInfo")
    props = _check(runtime.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    try:
        uuid = bytes(props.uuid.bytes).hex()
    except (AttributeError, TypeError):
        uuid = ""
    return DeviceInfo(index=int(index), name=name.rstrip("\x00"), total=int(total), free=int(free), uuid=uuid)


def memory_info() -> tuple[int, int]:
    """(free, total) bytes on the current device."""
    from cuda.bindings import runtime

    free, total = _check(runtime.cudaMemGetInfo(), "cudaMemGetInfo")
    return int(free), int(total)


def _check(result, what: str):
    from cuda.bindings import runtime

    err, *values = result
    if err != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"{what} failed: {runtime.cudaGetErrorString(err)[1].decode()}")
    return values[0] if len(values) == 1 else tuple(values)


# The variables by which cuDF and CuPy put a thread's work on its own default stream
# (:mod:`dask_gpu_interop.worker.gpu_workers` sets them for GPU workers).
PER_THREAD_STREAMS = ("CUDF_PER_THREAD_STREAM", "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM")


def per_thread_streams(env=None) -> bool:
    """Whether a GPU library of this process puts its work on per-thread streams."""
    env = os.environ if env is None else env
    return any(env.get(name, "0") not in ("", "0") for name in PER_THREAD_STREAMS)


def synchronize() -> None:
    """Wait for the device work this thread queued on its per-thread default stream."""
    from cuda.bindings import runtime

    (status,) = runtime.cudaStreamSynchronize(runtime.cudaStreamPerThread)
    if status != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"waiting for this thread's CUDA stream failed: {status.name}")


def waiting_call(function, *args, **kwargs):
    """``function(*args, **kwargs)``, then wait for this thread's stream (on success)."""
    result = function(*args, **kwargs)
    synchronize()
    return result


def wait_for_streams(worker) -> bool:
    """Make ``worker`` wait for each task's stream after it runs, where its GPU libraries use
    per-thread streams; True when it does (from now on)."""
    if not per_thread_streams():
        return False
    from .compat import wrap_default_executor

    return wrap_default_executor(worker, waiting_call)

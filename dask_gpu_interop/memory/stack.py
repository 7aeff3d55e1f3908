"""The RMM resource stack of one worker: planned from a config, built, installed, restored.

    base        PoolMemoryResource(CudaMemoryResource | ManagedMemoryResource)
                | ManagedMemoryResource | CudaAsyncViewMemoryResource(device's default pool)
    [limit]     LimitingResourceAdaptor          async pool with maximum_pool_size
    [failures]  FailureCallbackResourceAdaptor   records a refused allocation, for the
                                                 out-of-memory message (oom.py); not with
                                                 cuDF's spilling, which adds its own
    [log]       LoggingResourceAdaptor           log_directory
    [tasks]     StatisticsResourceAdaptor        statistics: its counters are pushed and popped
                                                 around tasks (tasks.py)
    [total]     StatisticsResourceAdaptor        statistics: everything, the current resource
    [cupy]...   StatisticsResourceAdaptor(total) statistics: one per framework with a Python
                                                 allocator hook, for per-framework numbers

``plan`` is pure (tested on CPUs); ``build`` turns a plan into RMM objects (tested on GPUs).
The device's default pool is used for the async mode so that XGBoost's ``use_cuda_async_pool``
and RMM draw from one pool.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dask.utils import format_bytes

from .. import frameworks as fw
from ..compat import cudf_spilling
from ..device import DeviceInfo
from .config import MemoryConfig
from .errors import GPUMemorySetupError
from .oom import FailureLog
from .sizes import ALIGNMENT

# Frameworks whose allocator we call ourselves, so they can get their own statistics adaptor.
OWN_ADAPTOR = ("cupy", "numba")
#: With cuDF's spilling and no maximum given, the pool may grow to this part of the device:
#: cuDF spills when the pool refuses, and a pool grown over the whole device would leave
#: nothing for what CUDA and libcudf allocate outside it (their failures do not spill).
SPILL_POOL_PART = 0.9


@dataclass(frozen=True)
class Plan:
    mode: str  # "pool" | "managed" | "async"
    pooled: bool
    initial: int | None  # bytes reserved up front (None: no pool)
    maximum: int | None  # bytes the pool may grow to (None: unbounded)
    release_threshold: int | None
    log_file: str | None
    statistics: bool
    frameworks: tuple[str, ...]  # to bind: installed and asked for
    skipped: dict = field(default_factory=dict)  # framework -> why it is not bound
    # Whether the stack records refused allocations. cuDF's spilling puts a failure callback
    # of its own (spill, then retry) on the current resource and refuses a stack that has one.
    failure_callback: bool = True


def plan(
    config: MemoryConfig,
    device: DeviceInfo,
    installed,
    worker_label: str = "worker",
) -> Plan:
    """Resolve sizes against ``device`` and frameworks against ``installed(name)``.

    Raises GPUMemorySetupError with what to change when the config cannot work here.
    """
    where = f"on {worker_label} ({device.name}, {format_bytes(device.total)} total, " \
        f"{format_bytes(device.free)} free)"
    mode = config.mode
    pooled = (mode == "pool" and config.pool) or (mode == "managed" and config.pool_size is not None)
    maximum = config.maximum_pool_size.resolve(device.total) if config.maximum_pool_size else None
    # cuDF's spilling as the plugin sets it, or as cuDF's own setting has it where it is left
    # (its failure callback then comes with cuDF's first buffer, and refuses one of ours)
    spilling = config.spill if config.spill is not None else (
        installed("cudf") and cudf_spilling())
    spill_cap = None
    if spilling and maximum is None and mode != "managed" and (pooled or mode == "async"):
        spill_cap = _align(int(device.total * SPILL_POOL_PART))
    if config.pool_size is not None:
        initial = config.pool_size.resolve(device.total)
    elif pooled:
        # RMM's own default: half of what is free, but never above the maximum.
        initial = _align(device.free // 2)
        if maximum is not None:
            initial = min(initial, maximum)
    else:
        initial = None

    if spill_cap is not None:
        maximum = max(spill_cap, initial or 0)
    if initial is not None and initial <= 0:
        raise GPUMemorySetupError(f"pool_size resolves to {initial} bytes {where}: give a larger size")
    if mode == "managed":
        if initial is not None and initial > device.free:
            raise GPUMemorySetupError(
                f"pool_size={config.pool_size} asks for {format_bytes(initial)} of managed memory "
                f"up front, more than is free {where}. Reserving more managed memory than the "
                "device has free can stall the GPU: lower pool_size (the pool can still grow "
                "past the device, up to maximum_pool_size)."
            )
    else:
        for option, size in (("pool_size", initial), ("maximum_pool_size", maximum)):
            if size is not None and size > device.total:
                raise GPUMemorySetupError(
                    f"{option} asks for {format_bytes(size)}, more than the device has {where}. "
                    "Give a smaller size or a fraction such as '0.8'; managed=True "
                    "oversubscribes the device if that is what you want."
                )
        if initial is not None and config.pool_size is not None and initial > device.free:
            raise GPUMemorySetupError(
                f"pool_size asks for {format_bytes(initial)} up front, but only "
                f"{format_bytes(device.free)} is free {where}: other processes hold the rest. "
                "Give a smaller pool_size."
            )
    if initial is not None and maximum is not None and maximum < initial:
        raise GPUMemorySetupError(
            f"maximum_pool_size ({format_bytes(maximum)}) is below pool_size "
            f"({format_bytes(initial)}) {where}: raise the maximum or lower the initial size."
        )
    release = config.release_threshold.resolve(device.total) if config.release_threshold else None
    if mode == "async" and release is None and initial is not None:
        release = initial  # keep the reserved memory in the pool instead of returning it at sync

    asked = config.frameworks
    chosen, skipped, missing = [], {}, []
    for name in asked if asked is not None else fw.DEFAULT:
        if installed(name):
            chosen.append(name)
        elif asked is not None:
            missing.append(name)
        else:
            skipped[name] = "not installed"
    if missing:
        hint = "; ".join(f"{n}: pip install {fw.PIP_NAMES[n]}" for n in missing)
        raise GPUMemorySetupError(
            f"frameworks {missing} were asked for but are not installed {where} ({hint}). "
            "Install them on every worker, or leave them out of frameworks=."
        )
    if config.spill is not None and "cudf" not in chosen:
        raise GPUMemorySetupError(
            f"spill={config.spill} is cuDF's spilling, but cuDF is not installed {where} "
            "(pip install cudf-cu13 or cudf-cu12), or it was left out of frameworks=."
        )

    log_file = None
    if config.log_directory is not None:
        log_file = os.path.join(config.log_directory, f"rmm_log.{_safe(worker_label)}.csv")

    return Plan(
        mode=mode,
        pooled=pooled,
        initial=initial,
        maximum=maximum,
        release_threshold=release,
        log_file=log_file,
        statistics=config.statistics,
        frameworks=tuple(chosen),
        skipped=skipped,
        failure_callback=not spilling,
    )


def _align(n: int) -> int:
    return n - n % ALIGNMENT


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


@dataclass
class Stack:
    """The RMM objects of an installed plan. Holding them keeps every resource alive."""

    plan: Plan
    base: object
    top: object  # the current device resource while installed
    total: object | None  # statistics of everything, or None
    tasks: object | None  # statistics whose counters TaskMemory pushes and pops, or None
    failures: FailureLog
    per_framework: dict  # framework -> resource its allocator uses
    pool: object | None  # the PoolMemoryResource, if any (for pool_size())
    async_pool_handle: object | None

    def live_bytes(self) -> int | None:
        """Bytes currently allocated through this stack (None without statistics)."""
        if self.total is None:
            return None
        return int(self.total.allocation_counts.current_bytes)

    def resource_for(self, framework: str):
        return self.per_framework.get(framework, self.top)

    def restore_release_threshold(self) -> None:
        """Set the async pool's release threshold back to the plan's, after a framework
        changed it (PyTorch raises it when its allocator first allocates on a device)."""
        if self.async_pool_handle is None or self.plan.release_threshold is None:
            return
        from cuda.bindings import runtime

        set_pool_attribute(
            self.async_pool_handle,
            runtime.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
            self.plan.release_threshold,
        )

    def description(self) -> str:
        names, mr = [], self.top
        while mr is not None:
            names.append(type(mr).__name__)
            mr = getattr(mr, "upstream_mr", None)
        return " > ".join(names)


def build(plan_: Plan) -> Stack:
    """Create the RMM resources for ``plan_`` (nothing is installed yet)."""
    import rmm

    pool = None
    handle = None
    if plan_.mode == "async":
        handle = _default_pool(plan_)
        base = rmm.mr.CudaAsyncViewMemoryResource(handle)
        if plan_.initial:
            _reserve(base, plan_.initial)
        mr = base
        if plan_.maximum is not None:
            mr = rmm.mr.LimitingResourceAdaptor(base, allocation_limit=plan_.maximum)
    else:
        upstream = (
            rmm.mr.ManagedMemoryResource() if plan_.mode == "managed" else rmm.mr.CudaMemoryResource()
        )
        if plan_.pooled:
            pool = rmm.mr.PoolMemoryResource(
                upstream, initial_pool_size=plan_.initial, maximum_pool_size=plan_.maximum
            )
            base = pool
        else:
            base = upstream
        mr = base
    failures = FailureLog()
    if plan_.failure_callback:
        mr = rmm.mr.FailureCallbackResourceAdaptor(mr, failures)
    if plan_.log_file is not None:
        os.makedirs(os.path.dirname(plan_.log_file) or ".", exist_ok=True)
        mr = rmm.mr.LoggingResourceAdaptor(mr, log_file_name=plan_.log_file)
    total = tasks = None
    per_framework = {}
    if plan_.statistics:
        tasks = mr = rmm.mr.StatisticsResourceAdaptor(mr)
        total = mr = rmm.mr.StatisticsResourceAdaptor(mr)
        for name in plan_.frameworks:
            if name in OWN_ADAPTOR:
                per_framework[name] = rmm.mr.StatisticsResourceAdaptor(total)
    return Stack(
        plan=plan_, base=base, top=mr, total=total, tasks=tasks, failures=failures,
        per_framework=per_framework, pool=pool, async_pool_handle=handle,
    )


def _default_pool(plan_: Plan):
    """The device's default CUDA pool, with the plan's release threshold set on it."""
    from cuda.bindings import runtime

    err, device = runtime.cudaGetDevice()
    err, handle = runtime.cudaDeviceGetDefaultMemPool(device)
    if err != runtime.cudaError_t.cudaSuccess:
        raise GPUMemorySetupError(
            "async_alloc=True needs CUDA's stream-ordered allocator, which this device or "
            f"driver does not offer ({runtime.cudaGetErrorString(err)[1].decode()}). "
            "Use the RMM pool instead (drop async_alloc)."
        )
    if plan_.release_threshold is not None:
        set_pool_attribute(
            handle, runtime.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold, plan_.release_threshold
        )
    return handle


def set_pool_attribute(handle, attr, value: int) -> None:
    """cudaMemPoolSetAttribute for a 64-bit attribute (the wrapper type moved between versions)."""
    from cuda.bindings import driver, runtime

    last = None
    for wrap in (getattr(driver, "cuuint64_t", None), getattr(runtime, "cuuint64_t", None), int):
        if wrap is None:
            continue
        try:
            (err,) = runtime.cudaMemPoolSetAttribute(handle, attr, wrap(value))
        except TypeError as exc:
            last = exc
            continue
        if err != runtime.cudaError_t.cudaSuccess:
            raise GPUMemorySetupError(f"cudaMemPoolSetAttribute({attr}, {value}) failed: {err}")
        return
    raise GPUMemorySetupError(f"cudaMemPoolSetAttribute({attr}) refused every value type: {last}")


def _reserve(resource, nbytes: int) -> None:
    """Grow the async pool to ``nbytes`` now (allocate and free), as RMM does for its own."""
    ptr = resource.allocate(nbytes)
    resource.deallocate(ptr, nbytes)


def async_pool_numbers(handle) -> dict:
    """Reserved/used/high-water bytes of a CUDA pool: covers RMM and XGBoost alike."""
    from cuda.bindings import runtime
    from cuda.bindings.runtime import cudaMemPoolAttr as A

    out = {}
    for key, attr in (
        ("reserved_bytes", A.cudaMemPoolAttrReservedMemCurrent),
        ("used_bytes", A.cudaMemPoolAttrUsedMemCurrent),
        ("used_high_bytes", A.cudaMemPoolAttrUsedMemHigh),
    ):
        err, value = runtime.cudaMemPoolGetAttribute(handle, attr)
        if err == runtime.cudaError_t.cudaSuccess:
            out[key] = int(value)
    return out

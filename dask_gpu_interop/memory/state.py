"""The memory state of one worker process: install a config, replace it, restore, describe.

One process has one current RMM resource per device, so this state is per process (a
``LocalCluster(processes=False)`` shares it between its workers).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from .. import _imports
from .. import frameworks as fw
from ..device import DeviceInfo
from . import conflicts
from . import stack as stack_mod
from .config import MemoryConfig
from .errors import GPUMemorySetupError
from .sizes import byte_text
from .tasks import RMMCounters, TaskMemory

logger = logging.getLogger("distributed.worker.gpu_interop")

_lock = threading.RLock()
_active: WorkerMemory | None = None
_no_gpu_logged = False


@dataclass
class WorkerMemory:
    """What the plugin installed in this process."""

    config: MemoryConfig
    owner: str | None  # plugin name; None once its owner was removed but buffers stayed live
    device: DeviceInfo
    plan: stack_mod.Plan
    stack: stack_mod.Stack
    previous: object  # the RMM resource current before the plugin
    bindings: dict = field(default_factory=dict)  # framework -> Binding
    hooks: list = field(default_factory=list)  # (module name, callback) not yet fired
    setup_seconds: float = 0.0
    installed_at: float = 0.0  # seconds since the epoch: when the resource was set up
    notes: list = field(default_factory=list)
    tasks: TaskMemory | None = None  # per-task device memory (with statistics)

    @property
    def mode(self) -> str:
        return self.plan.mode


def active() -> WorkerMemory | None:
    return _active


def log_no_gpu(label: str) -> None:
    """Say once per process that there is no GPU to set up."""
    global _no_gpu_logged
    if not _no_gpu_logged:
        logger.info("GPUMemoryPlugin on %s: no GPU visible, nothing to set up", label)
        _no_gpu_logged = True


def install(
    config: MemoryConfig, owner: str, *, worker=None, label: str = "worker", force: bool = False
) -> WorkerMemory:
    """Install ``config`` on this process's current device, or explain why not.

    Same config already active: adopt it (no-op). Anything that holds device memory the plugin
    cannot account for, or another owner of RMM: refuse unless ``force``. On any failure the
    previous resource stays current.
    """
    global _active
    import rmm

    from .. import device as device_mod

    with _lock:
        started = time.perf_counter()
        current = _active
        if current is not None and current.config == config:
            current.owner = owner
            return current
        problems = _conflicts(config, worker, current)
        if problems and not force:
            raise GPUMemorySetupError(f"GPUMemoryPlugin refused on {label}: " + " ".join(problems))

        device = device_mod.current_device()
        plan = stack_mod.plan(config, device, fw.is_installed, label)
        previous = current.previous if current is not None else rmm.mr.get_current_device_resource()
        if current is not None:
            _release(current, reason=f"replaced by {owner}", replacing=True)
            current = None  # drop the last reference, so the old pool returns its memory
            device = device_mod.current_device()
            plan = stack_mod.plan(config, device, fw.is_installed, label)
        try:
            stack = stack_mod.build(plan)
        except GPUMemorySetupError:
            raise
        except Exception as err:  # MemoryError, RMM's out-of-memory, CUDA errors
            raise GPUMemorySetupError(
                f"GPUMemoryPlugin could not create the {plan.mode} resource on {label} "
                f"(initial {byte_text(plan.initial)}, maximum {byte_text(plan.maximum)}, "
                f"{byte_text(device.free)} free): {type(err).__name__}: {err}. "
                "Give a smaller pool_size, or free the memory other processes hold."
            ) from err
        rmm.mr.set_current_device_resource(stack.top)
        state = WorkerMemory(
            config=config, owner=owner, device=device, plan=plan, stack=stack, previous=previous,
            notes=list(problems),
            tasks=TaskMemory(RMMCounters(stack.tasks)) if stack.tasks is not None else None,
        )
        # Read at an allocation failure; the reference is dropped at release (no cycle left).
        stack.failures.in_use = stack.live_bytes
        for name, why in plan.skipped.items():
            state.bindings[name] = fw.Binding(name, "skipped", why)
        _active = state
        try:
            _bind_frameworks(state, explicit=config.frameworks is not None, force=force)
        except Exception:
            _release(state, reason="setup failed")
            raise
        state.setup_seconds = time.perf_counter() - started
        state.installed_at = time.time()
        logger.info(
            "GPUMemoryPlugin %s on %s: %s (%s) on %s; frameworks: %s",
            owner, label, plan.mode, stack.description(), device.name,
            ", ".join(f"{n}={b.state}" for n, b in state.bindings.items()) or "none",
        )
        return state


def _conflicts(config: MemoryConfig, worker, current: WorkerMemory | None) -> list[str]:
    import rmm

    from ..frameworks import torch as torch_binder

    problems = []
    setting = conflicts.ucxx_pool_size()
    if setting:
        problems.append(conflicts.ucxx_message(setting))
    options = conflicts.dask_cuda_rmm_options(worker) if worker is not None else []
    if options:
        problems.append(conflicts.dask_cuda_message(options))
    ours = (current.stack.top,) if current is not None else ()
    foreign = conflicts.foreign_resource(rmm.mr.get_current_device_resource(), ours)
    if foreign and not options and not setting:
        problems.append(
            f"RMM's current resource is already a {foreign} that the plugin did not create "
            "(another library or plugin set it up). Remove that setup, or pass force=True to "
            "replace it."
        )
    if current is not None:
        live = current.stack.live_bytes()
        if live is None:
            problems.append(
                f"another configuration ({current.owner or 'a removed plugin'}) is active without "
                "statistics, so the plugin cannot tell whether its memory is in use. Unregister "
                "it once the work is done, or pass force=True."
            )
        elif live > 0:
            problems.append(
                f"another configuration ({current.owner or 'a removed plugin'}) is active with "
                f"{byte_text(live)} still allocated from it; replacing it under live buffers "
                "is unsafe. Free them (or restart the workers) first, or pass force=True."
            )
    wants_torch = config.frameworks is None or "torch" in config.frameworks
    if wants_torch and torch_binder.natively_initialized():
        problems.append(
            "PyTorch already initialized CUDA with its own caching allocator on this worker, "
            "so it cannot be moved onto the shared resource. Register the plugin before any "
            "PyTorch GPU work (or start workers with --preload dask_gpu_interop.preload), "
            "leave 'torch' out of frameworks=, or pass force=True to leave PyTorch outside."
        )
    return problems


def _bind_frameworks(state: WorkerMemory, *, explicit: bool, force: bool) -> None:
    """Bind each chosen framework now if imported, else when it is imported."""
    for name in state.plan.frameworks:
        binder = fw.binder(name)
        resource = state.stack.resource_for(name)
        prepare = getattr(binder, "prepare", None)
        if prepare is not None:
            prepare(state)
        if not getattr(binder, "BIND_ON_IMPORT", True):
            state.bindings[name] = binder.bind(None, resource, state)
            continue

        def on_import(module, name=name, binder=binder, resource=resource):
            _bind_one(state, name, binder, module, resource)

        state.bindings[name] = fw.Binding(name, fw.PENDING, "binds when first imported")
        state.hooks.append((fw.WATCHED_MODULE[name], on_import))
        _imports.when_imported(fw.WATCHED_MODULE[name], on_import)
        binding = state.bindings[name]
        if binding.state in (fw.OUTSIDE, fw.FAILED) and explicit and not force:
            raise GPUMemorySetupError(
                f"frameworks: {name} was asked for but cannot be bound: {binding.detail}"
            )


def _bind_one(state: WorkerMemory, name: str, binder, module, resource) -> None:
    if _active is not state:
        return  # this configuration was replaced before the framework was imported
    try:
        state.bindings[name] = binder.bind(module, resource, state)
    except Exception as err:  # a binding must never break the user's import
        logger.exception("GPUMemoryPlugin: binding %s failed", name)
        state.bindings[name] = fw.Binding(name, fw.FAILED, f"{type(err).__name__}: {err}")


def _release(
    state: WorkerMemory, reason: str, *, replacing: bool = False, closing: bool = False
) -> bool:
    """Unbind frameworks; restore the previous resource if nothing is allocated from ours.

    Returns True when the previous resource is current again. With live buffers the resource
    stays current (their frees must reach it), and the state stays visible in reports, unless
    ``replacing`` (forced): RMM buffers keep their own resource alive, so they stay safe.
    ``closing``: the worker is shutting down, so live buffers are expected (said at info).
    """
    global _active
    import rmm

    for module_name, callback in state.hooks:
        _imports.cancel(module_name, callback)
    state.hooks.clear()
    if state.tasks is not None:
        state.tasks.close()
    state.stack.failures.in_use = None
    for name, binding in list(state.bindings.items()):
        if binding.state in (fw.BOUND, fw.SHARED, fw.OUTSIDE, fw.PENDING):
            try:
                fw.binder(name).unbind()
            except Exception:
                logger.exception("GPUMemoryPlugin: unbinding %s failed", name)
    live = state.stack.live_bytes()
    if live == 0 or replacing:
        if rmm.mr.get_current_device_resource() is state.stack.top:
            rmm.mr.set_current_device_resource(state.previous)
        if _active is state:
            _active = None
        logger.info("GPUMemoryPlugin %s: released (%s)", state.owner, reason)
        return True
    state.owner = None
    state.notes.append(
        f"{reason}: {byte_text(live) if live else 'an unknown amount'} still allocated, "
        "so the resource stays current until those buffers are freed"
    )
    logger.log(logging.INFO if closing else logging.WARNING, "GPUMemoryPlugin: %s", state.notes[-1])
    return False


def uninstall(owner: str, *, closing: bool = False) -> bool:
    """Undo what ``owner`` installed, as far as it is safe (see ``_release``)."""
    with _lock:
        state = _active
        if state is None or state.owner != owner:
            return False
        return _release(state, reason=f"{owner} removed", closing=closing)

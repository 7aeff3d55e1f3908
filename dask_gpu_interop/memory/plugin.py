"""GPUMemoryPlugin: one RMM memory resource per worker, shared by every GPU framework."""

from __future__ import annotations

import inspect
import logging
import time

from distributed import WorkerPlugin

from .. import compat, device
from ..serialize import register as register_serializers
from . import conflicts, metrics, oom, state
from .config import OPTIONS, UNSET, MemoryConfig, _check_bool
from .errors import GPUMemorySetupError

logger = logging.getLogger("distributed.worker.gpu_interop")


class GPUMemoryPlugin(WorkerPlugin):
    """Set up one RMM memory resource on every worker and make the GPU frameworks use it.

    >>> client.register_plugin(GPUMemoryPlugin(pool_size="0.8", maximum_pool_size="0.95"))
    >>> client.register_plugin(GPUMemoryPlugin(managed=True))
    >>> client.register_plugin(GPUMemoryPlugin(async_alloc=True, release_threshold="10GB"))

    Resource, by options (sizes: bytes, "8GB"/"512MiB", or a fraction of the device, "0.8"):

    ======================================  =================================================
    (default)                               RMM pool on device memory; initial size: half of
                                            the free memory, grows up to the device
    ``pool_size=S, maximum_pool_size=M``    RMM pool on device memory, from S up to M
    ``managed=True``                        managed memory (may oversubscribe), no pool
    ``managed=True, pool_size=S``           RMM pool on managed memory
    ``async_alloc=True``                    CUDA's async pool (the device's default pool, so
                                            XGBoost can share it); ``release_threshold``
    ======================================  =================================================

    ``frameworks``: which of cupy, numba, torch, xgboost, jax, cudf to bind (default: every
    installed one). Each binds when first imported on the worker; ``memory_report(client)``
    says which allocate from the resource, which share its pool, and which stay outside.
    ``statistics``: RMM statistics adaptors, for current/peak bytes per worker and framework.
    ``spill``: cuDF's spilling. ``log_directory``: RMM allocation logs, one CSV per worker.
    ``jax_memory_fraction``: JAX's cap (it cannot allocate through RMM).
    Options left out come from dask config ``gpu-interop.memory.*``.

    Invalid options raise here, on the client. On a worker, setup refuses (and the error
    reaches ``register_plugin``) when a size does not fit the device, an asked-for framework is
    missing, or memory is already owned by someone else: dask-cuda's ``rmm_*`` options,
    distributed-ucxx's ``rmm.pool-size``, another configuration with live buffers, or PyTorch
    already on its own allocator. ``force=True`` replaces the other owner anyway.
    Registering the same configuration twice is a no-op; workers without a GPU are left alone.

    With statistics, every task's device memory is recorded (peak and what it left allocated,
    by task prefix, in ``memory_report``), and a task that runs the GPU out of memory fails
    with :class:`GPUOutOfMemoryError`, naming the pool, what was in use, the largest tasks and
    the option to change.
    """

    idempotent = True

    def __init__(self, *, force: bool = False, **options):
        self.config = MemoryConfig.from_options(**options)
        _check_bool(force, "force")
        self.force = force
        setting = conflicts.ucxx_pool_size()
        if setting and not force:
            raise ValueError(conflicts.ucxx_message(setting))
        # Equal configurations share a name, so registering one twice is a no-op.
        self.name = f"gpu-interop-memory-{self.config.digest()}"

    # help() and editors show the options by name, as if spelled out here.
    __init__.__signature__ = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
        *(inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=UNSET)
          for spec in OPTIONS),
        inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, default=False),
    ])

    def __repr__(self) -> str:
        defaults = MemoryConfig().options()
        given = {k: v for k, v in self.config.options().items() if v != defaults[k]}
        extra = ", force=True" if self.force else ""
        return f"GPUMemoryPlugin({', '.join(f'{k}={v!r}' for k, v in given.items())}{extra})"

    def install(self, worker) -> state.WorkerMemory | None:
        """Set up this worker's memory (None when it has no GPU). Raises GPUMemorySetupError."""
        label = str(getattr(worker, "address", None) or getattr(worker, "name", "worker"))
        register_serializers()  # so this worker can receive CUDA tensors, GPU or not
        metrics.register()  # GPU memory on the worker's /metrics (status only without a GPU)
        if device.gpu_count() == 0:
            state.log_no_gpu(label)
            return None
        try:
            import rmm  # noqa: F401
        except ImportError as err:
            raise GPUMemorySetupError(
                f"{label} sees a GPU but RMM is not installed ({err}). Install the GPU stack on "
                "every worker: pip install 'dask-gpu-interop[cuda13]' (or [cuda12])."
            ) from None
        return state.install(
            self.config, self.name, worker=worker, label=label, force=self.force
        )

    async def setup(self, worker) -> None:
        self._worker = worker
        try:
            self.install(worker)
        except Exception:
            await self._forget_failed_registration(worker)
            raise

    def teardown(self, worker) -> None:
        from distributed.core import Status

        closing = getattr(worker, "status", None) in (
            Status.closing, Status.closing_gracefully, Status.closed)
        state.uninstall(self.name, closing=closing)

    def transition(self, key, start, finish, **kwargs) -> None:
        """Record each task's device memory; explain a device out-of-memory error."""
        current = state.active()
        if current is None or current.owner != self.name or current.tasks is None:
            return
        record = current.tasks.transition(key, start, finish)
        if record is not None and finish == "error":
            self._explain_out_of_memory(key, record, current)

    def _explain_out_of_memory(self, key, record, current) -> None:
        worker = getattr(self, "_worker", None)
        if worker is None:
            return
        error = compat.task_error(worker, key)
        if error is None:
            return
        failure = current.stack.failures.since(time.monotonic() - record.seconds - 1.0)
        if not oom.is_device_oom(error, recent_failure=failure is not None):
            return
        stack = current.stack
        in_use = failure[1] if failure and failure[1] is not None else stack.live_bytes()
        message = oom.explain(
            error,
            key=record.key,
            worker=str(getattr(worker, "address", None) or getattr(worker, "name", "worker")),
            mode=current.mode,
            pool_bytes=int(stack.pool.pool_size()) if stack.pool is not None else current.plan.initial,
            maximum_bytes=current.plan.maximum,
            in_use_bytes=in_use,
            device_total=current.device.total,
            asked_bytes=failure[0] if failure is not None else None,
            largest=current.tasks.largest(3),
            overlapped=record.overlapped,
        )
        logger.error("%s", message)
        if not compat.replace_task_error(worker, key, oom.GPUOutOfMemoryError(message)):
            logger.warning("GPUMemoryPlugin: could not attach the explanation to %r's error", key)

    async def _forget_failed_registration(self, worker) -> None:
        """Take a failed registration back from the scheduler, so that it can be retried.

        The plugin is idempotent: without this, registering the same configuration again after
        fixing the cause would be skipped silently. Only while the worker is running (a
        registration from a client); a worker failing at start stops instead.
        """
        from distributed.core import Status

        if getattr(worker, "status", None) != Status.running:
            return
        try:
            await worker.scheduler.unregister_worker_plugin(name=self.name)
        except Exception as err:  # already taken back by another worker's failure
            logger.debug("GPUMemoryPlugin: unregistering %s after a failure: %s", self.name, err)

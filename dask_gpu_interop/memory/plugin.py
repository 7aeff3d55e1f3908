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

    Register it on a running cluster with ``client.register_plugin(plugin)``, give it to
    workers as they start with the :mod:`dask_gpu_interop.preload`, or let
    :func:`cluster_client` start a cluster with it. Every framework in ``frameworks`` is bound
    when it is first imported on the worker, so binding always comes before the framework's
    first allocation and setup does not import what a worker never uses.

    Options left out come from dask config (``gpu-interop.memory.pool-size``, or
    ``DASK_GPU_INTEROP__MEMORY__POOL_SIZE``); ``dask-gpu-interop config`` lists them with
    their defaults. Sizes are bytes (an int), a string with a unit (``"8GB"``, ``"512MiB"``),
    or a fraction of the device's memory (``0.8`` or ``"0.8"``).

    Parameters
    ----------
    pool_size : int, float, str or None
        Initial size of the RMM pool. Default: half the free memory for device pools, no pool
        for managed memory.
    maximum_pool_size : int, float, str or None
        Largest size the pool may grow to. Default: the whole device; with ``spill``, nine
        tenths of it (what CUDA and libcudf allocate outside the pool does not spill).
    pool : bool
        Device memory through an RMM pool (default). ``False``: cudaMalloc and cudaFree for
        every buffer, still counted, to compare the pool against.
    managed : bool
        Managed (unified) memory, so that work may oversubscribe the device; pooled only when
        ``pool_size`` is given.
    async_alloc : bool
        CUDA's stream-ordered pool (cudaMallocAsync) on the device's default pool, which
        PyTorch and XGBoost can share.
    release_threshold : int, float, str or None
        Async pool only: the memory the pool keeps when idle.
    frameworks : list of str, str or None
        Which of ``"cupy"``, ``"numba"``, ``"torch"``, ``"xgboost"``, ``"jax"``, ``"cudf"``
        to bind (a list, or ``"cupy,torch"``). Default: every installed one. A framework
        named here that is missing on a worker makes that worker refuse.
    statistics : bool
        Count current and peak bytes per worker, framework and task prefix (RMM statistics
        adaptors), for :func:`memory_report` and the out-of-memory message. Default: on.
    spill : bool or None
        cuDF's spilling to host memory: when the pool refuses an allocation, cuDF moves frames
        that no task is using to host memory and tries again, so that the results a worker
        holds may exceed its GPU. Default: cuDF's own setting. A client of such workers takes
        their cuDF results only with cuDF's spilling on (:func:`cluster_client` turns it on
        in its process).
    log_directory : str or None
        A directory for RMM allocation logs, one CSV per worker.
    jax_memory_fraction : float or None
        JAX cannot allocate through RMM: it is kept from preallocating and capped to this
        share of the device. Default: 0.2.
    force : bool
        Set up even where another owner holds the worker's memory (dask-cuda's ``rmm_*``
        options, distributed-ucxx's ``rmm.pool-size``, another configuration with live
        buffers, PyTorch already on its own allocator), replacing it.

    Attributes
    ----------
    config : MemoryConfig
        The validated options.
    name : str
        The plugin's name on the cluster: equal configurations share it, so registering one
        twice is a no-op. ``client.unregister_worker_plugin(plugin.name)`` unbinds the
        frameworks and restores each worker's previous resource (unless buffers are still
        allocated from the pool: then it stays, so that they can be freed safely).

    Raises
    ------
    OptionError
        An option's value cannot be used, or two options cannot go together. Raised here, on
        the client, naming the option where it was set.
    TypeError
        An unknown option.
    ValueError
        distributed-ucxx's ``rmm.pool-size`` is set in dask config (it would own the memory),
        unless ``force=True``.
    GPUMemorySetupError
        Raised on a worker, and by ``register_plugin``: a size does not fit the device, a
        framework asked for is not installed, RMM is missing where there is a GPU, or another
        owner holds the memory (see ``force``). The worker's previous resource is left as it
        was, and the failed registration is taken back so that it can be retried.

    Notes
    -----
    The resource on each worker, by options:

    ======================================  =================================================
    (default)                               RMM pool on device memory; initial size: half of
                                            the free memory, grows up to the device
    ``pool_size=S, maximum_pool_size=M``    RMM pool on device memory, from S up to M
    ``pool=False``                          cudaMalloc and cudaFree for every buffer, counted
    ``managed=True``                        managed memory (may oversubscribe), no pool
    ``managed=True, pool_size=S``           RMM pool on managed memory
    ``async_alloc=True``                    CUDA's async pool (the device's default pool, so
                                            XGBoost can share it); ``release_threshold``
    ======================================  =================================================

    Workers without a GPU are left alone; they say so in their log and in the report. With
    statistics, every task's device memory is recorded (its peak and what it left allocated,
    by task prefix), and a task that runs the GPU out of memory fails with
    :class:`GPUOutOfMemoryError`, naming the pool, what was in use, the largest tasks and the
    option to change.

    Examples
    --------
    >>> from distributed import Client
    >>> from dask_cuda import LocalCUDACluster
    >>> from dask_gpu_interop import GPUMemoryPlugin, memory_report
    >>> client = Client(LocalCUDACluster())
    >>> client.register_plugin(GPUMemoryPlugin(pool_size="0.8", maximum_pool_size="0.95"))
    >>> print(memory_report(client))

    Managed memory, or CUDA's async pool shared with XGBoost:

    >>> client.register_plugin(GPUMemoryPlugin(managed=True))
    >>> client.register_plugin(GPUMemoryPlugin(async_alloc=True, release_threshold="10GB"))
    """

    idempotent = True

    def __init__(self, *, force: bool = False, **options):
        self._configure(MemoryConfig.from_options(**options), force)

    @classmethod
    def from_config(cls, config: MemoryConfig, *, force: bool = False) -> GPUMemoryPlugin:
        """The plugin of a configuration already parsed and checked (``MemoryConfig``), as the
        commands' flags give it: the options are not read again.

        Parameters
        ----------
        config : MemoryConfig
            The options, from :meth:`MemoryConfig.from_options`.
        force : bool
            As the constructor takes it.

        Returns
        -------
        GPUMemoryPlugin
            The same plugin as ``GPUMemoryPlugin(**options)`` of the options ``config`` came
            from.
        """
        if not isinstance(config, MemoryConfig):
            raise TypeError(f"from_config() takes a MemoryConfig, not a {type(config).__name__}:"
                            " MemoryConfig.from_options(**options), or GPUMemoryPlugin(**options)")
        plugin = cls.__new__(cls)
        plugin._configure(config, force)
        return plugin

    def _configure(self, config: MemoryConfig, force: bool) -> None:
        self.config = config
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
        installed = state.install(
            self.config, self.name, worker=worker, label=label, force=self.force
        )
        # Per-thread streams: a task's kernels may outlive its function; each task waits.
        device.wait_for_streams(worker)
        return installed

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
            task_bytes=record.peak_bytes,
            stored_bytes=compat.device_data_bytes(worker),
            spilling=not current.plan.failure_callback,  # cuDF's spilling, as the plan has it
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

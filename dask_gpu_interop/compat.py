"""The private upstream APIs the library relies on, in one place.

Each is used because no public API does the job; ``tests/test_compat.py`` checks every one
against the installed release and fails saying what moved, so that an upgrade breaks here,
loudly, rather than somewhere deep in a worker. What the library knows of dask-cuda is here
too, each with the releases it was checked against: where dask-cuda is not installed, the
tests check it on stand-ins shaped like those releases' objects.
"""

from __future__ import annotations

import os
import sys

from distributed.threadpoolexecutor import ThreadPoolExecutor as _DaskThreadPoolExecutor

from ._imports import loaded


def lazy_registrations(dispatch) -> dict:
    """``{top-level module: registration}`` pending on a ``dask.utils.Dispatch``.

    Private: ``Dispatch._lazy``. We chain our serializers onto distributed's own lazy
    registrations, which the public ``register_lazy`` would silently replace.
    """
    return _dispatch_table(dispatch, "_lazy", "lazy_registrations")


def registered_types(dispatch) -> dict:
    """``{type: function}`` registered (or cached for subclasses) on a ``Dispatch``.

    Private: ``Dispatch._lookup``. Needed to drop lookups cached for tensor subclasses before
    our serializers were registered, and to tell whether ours are the ones in force.
    """
    return _dispatch_table(dispatch, "_lookup", "registered_types")


def _dispatch_table(dispatch, attribute: str, reader: str) -> dict:
    """The private dict ``dispatch.<attribute>``, or an error naming the ``reader`` to update."""
    table = getattr(dispatch, attribute, None)
    if not isinstance(table, dict):
        raise RuntimeError(
            f"dask.utils.Dispatch has no {attribute} dict any more: update "
            f"dask_gpu_interop.compat.{reader} for this dask release"
        )
    return table


def pending_worker_plugins(worker) -> tuple:
    """Plugins given to a ``distributed.Worker`` at creation, not yet set up.

    Private: ``Worker._pending_plugins``. dask-cuda passes its RMM setup this way, and it runs
    after preloads: the plugin looks here to refuse to fight it.
    """
    return tuple(getattr(worker, "_pending_plugins", ()))


def add_pending_worker_plugin(worker, plugin) -> None:
    """Have a starting ``distributed.Worker`` set up ``plugin`` after all its preloads, before
    it registers with the scheduler; a failure stops the worker.

    Private: ``Worker._pending_plugins``. dask-cuda's own preload, which creates the CUDA
    context on the worker's device, comes after user preloads: setting up memory in ours
    would create the context first (and dask-cuda warns that one already exists).
    """
    if not hasattr(worker, "_pending_plugins"):
        raise RuntimeError(
            "distributed.Worker has no _pending_plugins any more: update "
            "dask_gpu_interop.compat.add_pending_worker_plugin for this distributed release")
    worker._pending_plugins = (*worker._pending_plugins, plugin)


def remove_pending_worker_plugins(worker, plugins) -> None:
    """Take ``plugins`` (the objects themselves) out of those a starting ``distributed.Worker``
    will set up; call from a preload's ``dask_setup``.

    Private: ``Worker._pending_plugins``, as :func:`add_pending_worker_plugin`.
    """
    if not hasattr(worker, "_pending_plugins"):
        raise RuntimeError(
            "distributed.Worker has no _pending_plugins any more: update "
            "dask_gpu_interop.compat.remove_pending_worker_plugins for this distributed release")
    worker._pending_plugins = tuple(
        plugin for plugin in worker._pending_plugins
        if not any(plugin is removed for removed in plugins))


def keep_preload_arguments(worker, name: str, kept) -> None:
    """Leave the preload ``name`` of a starting ``distributed.Worker`` only those of its
    command-line arguments that are in ``kept``; call from an earlier preload's ``dask_setup``.

    Private: ``Worker.preloads``, whose items (``distributed.preloading.Preload``) have the
    ``name`` given to ``--preload`` and the ``argv`` list that each preload's ``start`` parses,
    in the order they were given. Checked against distributed 2024.12 to 2026.8.
    """
    for preload in getattr(worker, "preloads", ()):
        if getattr(preload, "name", "") == name:
            preload.argv = [arg for arg in preload.argv if arg in kept]


# dask-cuda's own worker preload, which ``dask cuda worker`` and ``LocalCUDACluster`` add after
# the user's and hand the same arguments, and the only flags its ``dask_setup`` takes.
# Checked against dask-cuda 25.10 to 26.08 (dask_cuda/initialize.py). dask-cuda 25.04 to
# 25.08, which the cuda12 extra allows, also take --protocol and the UCX flags
# (--enable-nvlink, ...), which these flags do not keep.
DASK_CUDA_PRELOAD = "dask_cuda.initialize"
DASK_CUDA_PRELOAD_FLAGS = ("--create-cuda-context", "--no-create-cuda-context")

# The attributes of dask-cuda's RMM worker plugin (``dask_cuda.plugins.RMMSetup``), each with
# the option a user passed to dask-cuda to set it. Checked against dask-cuda 25.04 to 26.08.
DASK_CUDA_RMM_OPTIONS = {
    "initial_pool_size": "rmm_pool_size / --rmm-pool-size",
    "managed_memory": "rmm_managed_memory / --rmm-managed-memory",
    "async_alloc": "rmm_async / --rmm-async",
    "release_threshold": "rmm_release_threshold / --rmm-release-threshold",
    "logging": "rmm_log_directory / --rmm-log-directory",
    "rmm_track_allocations": "rmm_track_allocations / --rmm-track-allocations",
    "external_lib_list": "rmm_allocator_external_lib_list",
}


def dask_cuda_rmm_settings(plugin) -> dict:
    """``{dask-cuda option: value}`` for each RMM option that ``plugin`` sets, when it is
    dask-cuda's RMM worker plugin; ``{}`` for any other plugin, or one that sets none.

    Private: ``dask_cuda.plugins.RMMSetup``, known by its class name and module (without
    importing dask-cuda), and its attributes (``DASK_CUDA_RMM_OPTIONS``); None and False are
    options left unset. Checked against dask-cuda 25.04 to 26.08.
    """
    cls = type(plugin)
    if cls.__name__ != "RMMSetup" or not cls.__module__.startswith("dask_cuda"):
        return {}
    settings = {}
    for attr, option in DASK_CUDA_RMM_OPTIONS.items():
        value = getattr(plugin, attr, None)
        if value not in (None, False):
            settings[option] = value
    return settings


def cudf_frame_of_columns(cudf, series: list):
    """A cuDF DataFrame whose columns are the given Series' own columns (no copy), named 0..n.

    Private: ``DataFrame._from_data`` and ``Series._column``. The public constructor copies
    columns that are views of one 2-D buffer; ``None`` when these are gone.
    """
    from_data = getattr(cudf.DataFrame, "_from_data", None)
    if from_data is None or not all(hasattr(s, "_column") for s in series):
        return None
    return from_data({j: s._column for j, s in enumerate(series)})


def jax_backend_started() -> bool:
    """Whether JAX has started its backends (after which its memory settings are fixed).

    Private: ``jax._src.xla_bridge._backends``. JAX has no public "initialized?" question
    that does not itself start the backends.
    """

    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:
        return False
    return bool(getattr(xla_bridge, "_backends", None))


def python_api_handle() -> int:
    """The handle of the running interpreter's C API, for a private ``ctypes.PyDLL`` of it.

    Private: ``ctypes.pythonapi._handle``. Setting argtypes on the shared ``ctypes.pythonapi``
    would change how every other library's calls through it convert.
    """
    import ctypes

    return ctypes.pythonapi._handle


def task_error(worker, key):
    """The exception a task on ``worker`` erred with (None if unknown), as the client gets it.

    Private: ``WorkerState.tasks[key].exception``, a ``Serialize`` of the pickled exception
    that ``error_message`` made. No public hook lets a plugin read a task's error on the
    worker before it is sent.
    """
    from distributed.protocol import pickle

    ts = _task_state(worker, key)
    data = getattr(getattr(ts, "exception", None), "data", None)
    if not isinstance(data, (bytes, bytearray)):
        return None
    try:
        return pickle.loads(data)
    except Exception:
        return None


def replace_task_error(worker, key, exception: BaseException) -> bool:
    """Make the client get ``exception`` for a task that just erred; False when it cannot.

    Private: the task state's ``exception`` (its ``Serialize`` is shared with the task-erred
    message not yet sent, so replacing its data in place changes what the client gets) and
    ``exception_text``. Call from a worker plugin's ``transition`` to "error".
    """
    from distributed.protocol import pickle

    ts = _task_state(worker, key)
    holder = getattr(ts, "exception", None)
    if ts is None or not hasattr(holder, "data"):
        return False
    holder.data = pickle.dumps(exception)
    ts.exception_text = repr(exception)
    return True


def _task_state(worker, key):
    tasks = getattr(getattr(worker, "state", None), "tasks", None)
    if tasks is None:
        raise RuntimeError(
            "distributed.Worker has no state.tasks any more: update "
            "dask_gpu_interop.compat.task_error for this distributed release")
    return tasks.get(key)


def device_host_file(device_fraction: float, host_bytes: int) -> tuple:
    """dask-cuda's spilling data store for a worker of device 0, as a Worker's ``data=``:
    results move from device to host memory above ``device_fraction`` of the device's, and to
    disk above ``host_bytes``. dask-cuda builds it inside ``LocalCUDACluster``; its
    ``DeviceHostFile`` and ``parse_device_memory_limit`` are the parts that every release
    has."""
    from dask_cuda.device_host_file import DeviceHostFile
    from dask_cuda.utils import parse_device_memory_limit

    limit = parse_device_memory_limit(device_fraction, device_index=0)
    return DeviceHostFile, {"device_memory_limit": limit, "memory_limit": host_bytes}


def local_cuda_cluster(plugins, **kwargs):
    """A dask-cuda ``LocalCUDACluster(**kwargs)`` whose every worker is also given ``plugins``
    (worker plugins, set up after the worker's preloads and before it joins), after dask-cuda's
    own.

    Private: ``LocalCUDACluster.new_worker_spec`` sets each worker's ``plugins`` option to
    dask-cuda's own (CPU affinity, RMM, cuDF, pre-import), so plugins given among its keyword
    arguments are dropped; the spec it returns is extended here. Read from dask-cuda's
    dask_cuda/local_cuda_cluster.py; tests/cluster/test_local_gpu.py runs it on GPUs.
    """
    from dask_cuda import LocalCUDACluster

    given = tuple(plugins)

    class _LocalCUDACluster(LocalCUDACluster):
        def new_worker_spec(self):
            spec = super().new_worker_spec()
            for worker in spec.values():
                options = worker.setdefault("options", {})
                options["plugins"] = (*options.get("plugins", ()), *given)
            return spec

    _LocalCUDACluster.__name__ = _LocalCUDACluster.__qualname__ = "LocalCUDACluster"
    return _LocalCUDACluster(**kwargs)



class CallingThreadPoolExecutor(_DaskThreadPoolExecutor):
    """distributed's ``ThreadPoolExecutor`` that runs each submitted function through
    ``call(function, *args, **kwargs)``. distributed runs a task in an executor whose type's
    name holds "ThreadPoolExecutor" the way it runs it in its own (thread state, metrics)."""

    def __init__(self, call, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._call = call

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(self._call, fn, *args, **kwargs)


def wrap_default_executor(worker, call) -> bool:
    """Run ``worker``'s tasks through ``call(function, *args)`` from now on: its default
    executor (``worker.executors["default"]``, distributed's ``ThreadPoolExecutor``) replaced
    by one of as many threads that does so; the old one ends once its tasks are done. False,
    and nothing changed, where the worker runs tasks in an executor of another kind."""
    current = getattr(worker, "executors", {}).get("default")
    if isinstance(current, CallingThreadPoolExecutor):
        return True
    if type(current) is not _DaskThreadPoolExecutor:
        return False
    worker.executors["default"] = CallingThreadPoolExecutor(
        call, current._max_workers, thread_name_prefix=current._thread_name_prefix)
    current.shutdown(wait=False)
    return True


def device_results_moved(worker) -> dict | None:
    """The device results ``worker``'s data store moved to host memory and to disk:
    ``{"host_keys", "host_bytes", "disk_keys", "disk_bytes"}`` (sizes from the worker's task
    states); None where the store does not keep device results apart (a plain dict).

    Private: dask-cuda's ``DeviceHostFile.device_keys`` (every device result it holds),
    ``.device`` (those still on the device) and ``.disk`` (checked against 26.10).
    """
    data = getattr(worker, "data", None)
    device_keys, on_device = getattr(data, "device_keys", None), getattr(data, "device", None)
    if device_keys is None or on_device is None:
        return None
    tasks = worker.state.tasks
    moved = [key for key in list(device_keys) if key not in on_device]
    disk = getattr(data, "disk", None)
    on_disk = [key for key in moved if disk is not None and key in disk]

    def size(keys):
        return sum(getattr(tasks.get(key), "nbytes", 0) or 0 for key in keys)

    return {"host_keys": len(moved) - len(on_disk), "host_bytes": size(moved) - size(on_disk),
            "disk_keys": len(on_disk), "disk_bytes": size(on_disk)}  # fmt: skip


def cudf_spilling() -> bool:
    """Whether cuDF's spilling is on in this process: cuDF's option where cuDF is imported,
    else (not imported, or still importing in another thread: a worker's start does not
    wait for it) the ``CUDF_SPILL`` environment variable, read as cuDF reads it ("on",
    "true" or a number other than 0; "off", "false", "0" or unset: off)."""
    cudf = loaded("cudf", wait=False)
    if cudf is not None:
        return bool(cudf.get_option("spill"))
    value = os.environ.get("CUDF_SPILL", "").strip().lower()
    if value in ("on", "true"):
        return True
    try:
        return int(value) != 0
    except ValueError:
        return False


def cudf_spilled() -> dict | None:
    """The buffers cuDF's spilling holds in host memory in this process, ``{"host_buffers",
    "host_bytes"}``; None where cuDF is not imported or its spilling is off.

    Private: cuDF's ``spill_manager.get_global_manager().buffers()`` and each buffer's
    ``is_spilled`` and ``size`` (checked against 26.10).
    """
    cudf = loaded("cudf", wait=False)  # still importing: it holds nothing yet
    if cudf is None or not cudf.get_option("spill"):
        return None
    from cudf.core.buffer.spill_manager import get_global_manager

    manager = get_global_manager()
    if manager is None:
        return None
    buffers = [buffer for buffer in manager.buffers() if buffer.is_spilled]
    return {"host_buffers": len(buffers), "host_bytes": sum(buffer.size for buffer in buffers)}


def device_data_bytes(worker) -> int | None:
    """Bytes of the results ``worker`` keeps in device memory, where its data store tells them
    from those in host memory; None where it does not (a plain dict).

    Private: dask-cuda's ``DeviceHostFile.device`` (checked against 26.06 to 26.10), the
    mapping of the results it holds on the device, which a ``LocalCUDACluster``'s workers and
    an in-process GPU worker (:func:`device_host_file`) store their results in.
    """
    from collections.abc import Mapping

    from dask.sizeof import sizeof

    device = getattr(getattr(worker, "data", None), "device", None)
    if not isinstance(device, Mapping):
        return None
    try:
        return int(sum(sizeof(value) for value in list(device.values())))
    except RuntimeError:  # changed by the worker meanwhile
        return None

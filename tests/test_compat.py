"""Each private upstream API in ``dask_gpu_interop.compat`` against the installed release: a
failure here says which upstream moved what, before a worker meets it."""

import asyncio
import ctypes
import importlib.util
import sys
import types

import pytest
from dask.utils import Dispatch
from distributed import Scheduler, Worker, WorkerPlugin
from distributed.protocol.cuda import cuda_serialize
from distributed.protocol.serialize import dask_serialize

from dask_gpu_interop import compat
from tests.dask_cuda_stand_ins import (
    HAVE_DASK_CUDA,
    NO_DASK_CUDA,
    RMMSetup,
    start_in_process_worker,
    write_preload,
)


def test_dispatch_keeps_lazy_registrations_by_module():
    dispatch = Dispatch("probe")

    def register_numbers():
        pass

    dispatch.register_lazy("numbers", register_numbers)
    assert compat.lazy_registrations(dispatch)["numbers"] is register_numbers, (
        "dask.utils.Dispatch._lazy no longer maps module names to their registrations")


def test_dispatch_lookup_is_a_type_table_we_can_edit():
    dispatch = Dispatch("probe")
    dispatch.register(int, str)
    table = compat.registered_types(dispatch)
    assert table[int] is str, "dask.utils.Dispatch._lookup no longer maps types to functions"
    del table[int]
    with pytest.raises(TypeError):
        dispatch(1)  # forgetting a type through the table must take effect


def test_distributed_serializer_families_are_dispatches():
    for family in (cuda_serialize, dask_serialize):
        assert isinstance(family, Dispatch), f"distributed's {family} is no Dispatch any more"
        assert isinstance(compat.lazy_registrations(family), dict)
        assert isinstance(compat.registered_types(family), dict)


def test_a_plugin_given_at_worker_creation_is_pending_before_start():
    class Probe(WorkerPlugin):
        name = "probe"

    probe = Probe()

    async def check():
        async with Scheduler(dashboard_address=":0") as scheduler:
            worker = Worker(scheduler.address, plugins=[probe], dashboard_address=":0")
            pending = compat.pending_worker_plugins(worker)
            await worker.close()
            return pending

    pending = asyncio.run(check())
    assert probe in pending, (
        "distributed.Worker._pending_plugins no longer holds plugins passed at creation: the "
        "check for dask-cuda's RMM setup (memory/conflicts.py) cannot see them")


def test_python_api_handle_is_the_interpreters():
    api = ctypes.PyDLL(None, handle=compat.python_api_handle())
    api.Py_IsInitialized.restype = ctypes.c_int
    assert api.Py_IsInitialized() == 1


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
def test_jax_backends_are_seen_once_started():
    import jax

    jax.devices()
    assert compat.jax_backend_started(), (
        "jax._src.xla_bridge._backends is gone: update compat.jax_backend_started")


@pytest.mark.gpu
def test_cudf_frame_of_columns_keeps_each_column_without_a_copy():
    from tests.gpu_helpers import require

    require("cudf")
    import cudf
    import cupy

    series = [cudf.Series(cupy.arange(4, dtype="float32") + i) for i in range(3)]
    frame = compat.cudf_frame_of_columns(cudf, series)
    assert frame is not None, "cudf.DataFrame._from_data or Series._column is gone"
    for j, s in enumerate(series):
        assert (frame[j].__cuda_array_interface__["data"][0]
                == s.__cuda_array_interface__["data"][0])


def test_a_plugin_added_while_preloading_is_set_up_before_the_worker_registers():
    class Probe(WorkerPlugin):
        name = "probe-late"

        def setup(self, worker):
            self.seen_status = str(worker.status)

    probe = Probe()

    async def check():
        async with Scheduler(dashboard_address=":0") as scheduler:
            worker = Worker(scheduler.address, dashboard_address=":0")
            compat.add_pending_worker_plugin(worker, probe)
            async with worker:
                return sorted(worker.plugins), len(scheduler.workers)

    names, workers = asyncio.run(check())
    assert "probe-late" in names and workers == 1
    assert probe.seen_status != "Status.running"  # set up while the worker was starting


def _fails():
    raise KeyError("probe")


def test_a_failed_tasks_error_can_be_read_and_replaced_on_the_worker():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        future = client.submit(_fails, key="probe-1")
        with pytest.raises(KeyError):
            future.result()
        (worker,) = cluster.workers.values()
        error = compat.task_error(worker, "probe-1")
        assert isinstance(error, KeyError), (
            "distributed's worker TaskState.exception is no longer a Serialize of the pickled "
            "exception: update dask_gpu_interop.compat.task_error")
        assert compat.replace_task_error(worker, "probe-1", ValueError("replaced"))
        assert isinstance(compat.task_error(worker, "probe-1"), ValueError)
        assert compat.task_error(worker, "no-such-key") is None


CUTTING_PRELOAD = '''
import click

from dask_gpu_interop import compat


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def dask_setup(worker, argv):
    compat.keep_preload_arguments(worker, "probe_initialize", ("--create-cuda-context",))
'''


def test_a_preload_leaves_a_later_one_only_the_arguments_it_takes(tmp_path, monkeypatch):
    """As dask-cuda starts workers: every preload gets the same arguments, its own last."""
    monkeypatch.syspath_prepend(str(tmp_path))
    write_preload(tmp_path, "probe_cutting", CUTTING_PRELOAD)
    write_preload(tmp_path, "probe_initialize")
    start_in_process_worker(["probe_cutting", "probe_initialize"],
                            ["--gpu-pool-size", "0.5", "--create-cuda-context"])
    seen = sys.modules.pop("probe_initialize").seen
    sys.modules.pop("probe_cutting")
    assert seen == [True], (
        "a preload that sets a later preload's argv (distributed.Worker.preloads[].argv) no "
        "longer changes what that preload's dask_setup parses: update "
        "dask_gpu_interop.compat.keep_preload_arguments for this distributed release")


def test_keep_preload_arguments_leaves_other_preloads_alone():
    ours = types.SimpleNamespace(name="dask_gpu_interop.preload", argv=["--gpu-managed", "-x"])
    theirs = types.SimpleNamespace(name="dask_cuda.initialize", argv=["--gpu-managed", "-x"])
    worker = types.SimpleNamespace(preloads=[ours, theirs])
    compat.keep_preload_arguments(worker, "dask_cuda.initialize", ("-x",))
    assert ours.argv == ["--gpu-managed", "-x"] and theirs.argv == ["-x"]


@pytest.mark.skipif(not HAVE_DASK_CUDA, reason=NO_DASK_CUDA)
def test_dask_cudas_preload_is_named_and_takes_the_flags_we_leave_it():
    from dask_cuda import initialize
    from dask_cuda.utils import get_preload_options

    assert get_preload_options()["preload"] == [compat.DASK_CUDA_PRELOAD]
    flags = {flag for param in initialize.dask_setup.params
             for flag in (*param.opts, *param.secondary_opts)}
    assert flags == set(compat.DASK_CUDA_PRELOAD_FLAGS), (
        f"dask_cuda.initialize takes {sorted(flags)}: update compat.DASK_CUDA_PRELOAD_FLAGS")


def rmm_setup_classes():
    classes = [pytest.param(RMMSetup, id="stand-in")]
    if HAVE_DASK_CUDA:
        from dask_cuda.plugins import RMMSetup as real

        classes.append(pytest.param(real, id="dask-cuda"))
    else:
        classes.append(pytest.param(None, id="dask-cuda", marks=pytest.mark.skip(NO_DASK_CUDA)))
    return classes


UNSET = dict(initial_pool_size=None, maximum_pool_size=None, managed_memory=False,
             async_alloc=False, release_threshold=None, log_directory=None,
             track_allocations=False, external_lib_list=None)


@pytest.mark.parametrize("cls", rmm_setup_classes())
def test_dask_cudas_rmm_options_are_read_from_its_plugin(cls):
    assert compat.dask_cuda_rmm_settings(cls(**UNSET)) == {}
    pool = cls(**{**UNSET, "initial_pool_size": "1GB", "managed_memory": True,
                  "log_directory": "/tmp/rmm", "track_allocations": True,
                  "external_lib_list": ["cupy"]})
    assert compat.dask_cuda_rmm_settings(pool) == {
        "rmm_pool_size / --rmm-pool-size": "1GB",
        "rmm_managed_memory / --rmm-managed-memory": True,
        "rmm_log_directory / --rmm-log-directory": True,
        "rmm_track_allocations / --rmm-track-allocations": True,
        "rmm_allocator_external_lib_list": ["cupy"],
    }, "dask_cuda.plugins.RMMSetup's attributes moved: update compat.DASK_CUDA_RMM_OPTIONS"
    async_pool = cls(**{**UNSET, "async_alloc": True, "release_threshold": "2GB"})
    assert compat.dask_cuda_rmm_settings(async_pool) == {
        "rmm_async / --rmm-async": True,
        "rmm_release_threshold / --rmm-release-threshold": "2GB",
    }


def test_only_dask_cudas_plugin_is_read_as_dask_cudas():
    imposter = type("RMMSetup", (), {"__module__": "my_project"})()
    imposter.initial_pool_size = "1GB"
    assert compat.dask_cuda_rmm_settings(imposter) == {}
    other = type("CPUAffinity", (), {"__module__": "dask_cuda.plugins"})()
    other.initial_pool_size = "1GB"
    assert compat.dask_cuda_rmm_settings(other) == {}


def test_an_in_process_gpu_workers_store_is_dask_cudas_device_host_file(monkeypatch):
    """The store is built from dask-cuda's two parts as LocalCUDACluster builds it: here with
    stand-ins of them (the real limit needs a GPU's size), below against their signatures."""
    calls = []

    class DeviceHostFile:
        pass

    def parse_device_memory_limit(limit, device_index=0, alignment_size=1):
        calls.append((limit, device_index))
        return int(limit * 1000)

    for name, members in (("dask_cuda.device_host_file", {"DeviceHostFile": DeviceHostFile}),
                          ("dask_cuda.utils",
                           {"parse_device_memory_limit": parse_device_memory_limit})):
        module = types.ModuleType(name)
        module.__dict__.update(members)
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "dask_cuda", types.ModuleType("dask_cuda"))
    assert compat.device_host_file(0.8, 12345) == (
        DeviceHostFile, {"device_memory_limit": 800, "memory_limit": 12345})
    assert calls == [(0.8, 0)]


@pytest.mark.skipif(not HAVE_DASK_CUDA, reason=NO_DASK_CUDA)
def test_dask_cudas_device_host_file_takes_what_the_store_gives_it():
    import inspect

    from dask_cuda.device_host_file import DeviceHostFile
    from dask_cuda.utils import parse_device_memory_limit

    taken = inspect.signature(DeviceHostFile).parameters
    assert {"worker_local_directory", "device_memory_limit", "memory_limit"} <= set(taken)
    assert "device_index" in inspect.signature(parse_device_memory_limit).parameters


def _thread_name():
    import threading

    return threading.current_thread().name


def test_a_workers_tasks_can_be_run_through_a_call_on_the_same_threads():
    from distributed import Client, LocalCluster
    from distributed.threadpoolexecutor import ThreadPoolExecutor

    calls = []

    def call(function, *args, **kwargs):
        result = function(*args, **kwargs)
        calls.append(_thread_name())
        return result

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        (worker,) = cluster.workers.values()
        before = worker.executors["default"]
        assert type(before) is ThreadPoolExecutor, (
            "distributed's worker default executor is no longer its ThreadPoolExecutor: update "
            "dask_gpu_interop.compat.wrap_default_executor")
        assert compat.wrap_default_executor(worker, call)
        after = worker.executors["default"]
        assert after is not before and after._max_workers == 2
        assert compat.wrap_default_executor(worker, call)  # once is enough
        assert worker.executors["default"] is after
        names = client.gather(client.map(lambda i: _thread_name(), range(4), pure=False))
        assert client.submit(sum, [1, 2]).result() == 3
        assert len(calls) == 5 and set(calls) == set(names) | set(calls[-1:])
        assert all("Dask-Default-Threads" in name for name in calls)
        assert worker.state.nthreads == 2


def test_an_executor_of_another_kind_is_left_alone():
    from concurrent.futures import ThreadPoolExecutor

    class Stand:
        executors = {"default": ThreadPoolExecutor(1)}

    stand = Stand()
    assert not compat.wrap_default_executor(stand, lambda f, *a: f(*a))
    assert isinstance(stand.executors["default"], ThreadPoolExecutor)

"""Each private upstream API in ``dask_gpu_interop.compat`` against the installed release: a
failure here says which upstream moved what, before a worker meets it."""

import asyncio
import ctypes
import importlib.util

import pytest
from dask.utils import Dispatch
from distributed import Scheduler, Worker, WorkerPlugin
from distributed.protocol.cuda import cuda_serialize
from distributed.protocol.serialize import dask_serialize

from dask_gpu_interop import compat


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

"""Stand-ins for the dask-cuda objects that ``dask_gpu_interop.compat`` knows, shaped as in
dask-cuda 26.08, for tests on machines without dask-cuda."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import sys

HAVE_DASK_CUDA = importlib.util.find_spec("dask_cuda") is not None
NO_DASK_CUDA = "dask-cuda is not installed: the check against its own objects runs where it is"


class RMMSetup:
    """``dask_cuda.plugins.RMMSetup``: its constructor and the attributes it sets (its setup,
    which needs a GPU, is left out)."""

    def __init__(self, initial_pool_size=None, maximum_pool_size=None, managed_memory=False,
                 async_alloc=False, release_threshold=None, log_directory=None,
                 track_allocations=False, external_lib_list=None):
        self.initial_pool_size = initial_pool_size
        self.maximum_pool_size = maximum_pool_size
        self.managed_memory = managed_memory
        self.async_alloc = async_alloc
        self.release_threshold = release_threshold
        self.logging = log_directory is not None
        self.log_directory = log_directory
        self.rmm_track_allocations = track_allocations
        self.external_lib_list = external_lib_list


RMMSetup.__module__ = "dask_cuda.plugins"


class LocalCUDACluster:
    """``dask_cuda.LocalCUDACluster`` as far as the library drives it: its keyword arguments
    (``kwargs``), and each worker's spec made by ``new_worker_spec``, whose ``plugins`` option
    is set to dask-cuda's own (``worker_spec``); no process starts."""

    def __init__(self, n_workers=None, **kwargs):
        self.kwargs = {"n_workers": n_workers, **kwargs}
        options = {key: kwargs[key] for key in ("preload", "preload_argv", "plugins")
                   if key in kwargs}
        self.new_spec = {"cls": "Nanny", "options": options}
        self.worker_spec = {}
        for _ in range(n_workers or 1):
            self.worker_spec.update(self.new_worker_spec())

    def new_worker_spec(self):
        spec = copy.deepcopy(self.new_spec)
        spec["options"].update({"env": {"CUDA_VISIBLE_DEVICES": str(len(self.worker_spec))},
                                "plugins": {RMMSetup()}})
        return {len(self.worker_spec): spec}

# dask_cuda/initialize.py's dask_setup: the only flags it takes; each call's value in `seen`.
INITIALIZE_PRELOAD = '''
import click

seen = []


@click.command()
@click.option("--create-cuda-context/--no-create-cuda-context", default=False)
def dask_setup(worker, create_cuda_context):
    seen.append(create_cuda_context)
'''


def write_preload(directory, name: str, source: str = INITIALIZE_PRELOAD) -> None:
    """Make ``name`` an importable preload module (``directory`` must be on ``sys.path``)."""
    sys.modules.pop(name, None)
    (directory / f"{name}.py").write_text(source)


def start_in_process_worker(preload: list[str], preload_argv: list[str]) -> list[str]:
    """Start an in-process worker with ``preload`` handed ``preload_argv`` each, as dask-cuda
    starts its workers, and stop it; the names of its plugins."""
    from distributed import Scheduler, Worker

    async def start():
        async with Scheduler(dashboard_address=":0") as scheduler:
            async with Worker(scheduler.address, dashboard_address=":0", preload=preload,
                              preload_argv=preload_argv) as worker:
                return sorted(worker.plugins)

    return asyncio.run(start())

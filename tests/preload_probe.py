"""A worker preload for tests: marks the worker it ran on."""


def dask_setup(worker):
    worker.preload_probe_ran = True

"""XGBoost: share one pool with RMM where the build allows it.

XGBoost's PyPI wheels are built without RMM (``use_rmm`` does nothing). With the plugin's
async mode, RMM draws from the device's default CUDA pool and XGBoost's
``use_cuda_async_pool`` makes XGBoost allocate from that same pool. XGBoost's global config is
per thread, and ``xgboost.dask`` applies the *client's* config on the workers, so the setting
belongs on the client: ``xgboost.config_context(**dask_gpu_interop.xgboost_config(client))``
(``memory/xgboost_pool.py``, which asks each worker's memory state for ``config_for``).

``xgboost.dask`` makes each worker print a "got rank" line when training starts, from C++ to
its standard error, which no XGBoost setting turns off: :func:`without_xgboost_rank_lines`
leaves them out of a program's output.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading

from . import BOUND, OUTSIDE, SHARED, Binding


def config_for(mode: str | None, built_with_rmm: bool) -> dict:
    """XGBoost global config that makes it allocate from the worker's pool in ``mode``."""
    if built_with_rmm:
        return {"use_rmm": True}
    if mode == "async":
        return {"use_cuda_async_pool": True}
    return {}


def bind(xgboost, resource, stack) -> Binding:
    built_with_rmm = bool(xgboost.build_info().get("USE_RMM", False))
    config = config_for(stack.plan.mode, built_with_rmm)
    how = "under xgboost.config_context(**dask_gpu_interop.xgboost_config(client)) on the client"
    if built_with_rmm:
        return Binding("xgboost", BOUND, f"built with RMM: allocates through RMM {how}")
    if config:
        return Binding(
            "xgboost",
            SHARED,
            "draws from the device's default CUDA pool, the one RMM's async mode uses, when "
            f"trained {how}; counted in the CUDA pool numbers, not RMM's",
        )
    return Binding(
        "xgboost",
        OUTSIDE,
        "XGBoost's PyPI wheels are built without RMM, so it keeps its own memory; "
        "async_alloc=True makes it share one pool with RMM",
    )


def unbind() -> None:
    """Nothing was changed in XGBoost itself."""


# What XGBoost writes for each worker: "[10:31:05] Task [xgboost.dask-0]:ADDRESS got rank 0"
# (xgboost.dask), "[10:31:05] Task train_streamed-000000 got rank 0" (train_streamed)
_RANK_LINE = re.compile(
    rb"\[[\d:]+\] Task (\[xgboost\.dask-[^\]]*\]:\S+|train_streamed-\d+) got rank \d+")


def _dropped(text: bytes) -> bytes:
    """``text`` without the rank lines, nor the empty lines they leave."""
    text, count = _RANK_LINE.subn(b"", text)
    return re.sub(rb"(?m)^\n", b"", text) if count else text


@contextlib.contextmanager
def without_xgboost_rank_lines(fd: int = 2):
    """Leave out the "got rank" lines ``xgboost.dask`` (and :func:`train_streamed`) make each
    worker print.

    Each worker writes its line from C++ to its standard error when training starts. In the
    block, this process's standard error goes through a filter that drops them, and so does
    that of the processes started in it (a local cluster's workers, in this process or
    their own: enter the block before the cluster starts); everything else passes, and this
    process's standard error is itself again after the block.

    Parameters
    ----------
    fd : int
        The file descriptor filtered: 2, standard error, where XGBoost writes them.

    Yields
    ------
    None

    Examples
    --------
    >>> from dask_gpu_interop import cluster_client, without_xgboost_rank_lines
    >>> with without_xgboost_rank_lines(), cluster_client() as (client, device):  # doctest: +SKIP
    ...     booster = xgboost.dask.train(client, params, dtrain)["booster"]
    """
    try:
        saved = os.dup(fd)
    except OSError:  # no standard error to filter
        yield
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)

    def forward():  # until the last process holding the pipe ends
        pending = b""
        while chunk := os.read(read_end, 1 << 16):
            pending = _dropped(pending + chunk)
            cut = pending.rfind(b"\n") + 1  # hold a last line that may still be one of them
            os.write(saved, pending[:cut])
            pending = pending[cut:]
        os.write(saved, _dropped(pending))
        os.close(read_end)
        os.close(saved)

    forwarder = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, fd)
        # the last lines, where nothing else holds the pipe (a process started in the block,
        # such as multiprocessing's resource tracker, may hold it until this one exits)
        forwarder.join(0.2)

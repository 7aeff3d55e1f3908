"""XGBoost: share one pool with RMM where the build allows it.

XGBoost's PyPI wheels are built without RMM (``use_rmm`` does nothing). With the plugin's
async mode, RMM draws from the device's default CUDA pool and XGBoost's
``use_cuda_async_pool`` makes XGBoost allocate from that same pool. XGBoost's global config is
per thread, and ``xgboost.dask`` applies the *client's* config on the workers, so the setting
belongs on the client: ``xgboost.config_context(**dask_gpu_interop.xgboost_config(client))``
(``memory/xgboost_pool.py``, which asks each worker's memory state for ``config_for``).
"""

from __future__ import annotations

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

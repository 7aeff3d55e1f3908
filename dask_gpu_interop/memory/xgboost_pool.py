"""XGBoost in the workers' memory pool: the config that puts it there, asked of each worker.

XGBoost's global config is per thread, and ``xgboost.dask`` carries the client's config to the
workers, so the config is set on the client; what it must be depends on each worker's memory
mode (:func:`dask_gpu_interop.frameworks.xgboost.config_for`).
"""

from __future__ import annotations

from ..frameworks.xgboost import config_for
from . import state


def _worker_config() -> dict:
    current = state.active()
    mode = current.mode if current is not None else None
    try:
        import xgboost
    except ImportError:
        return {}
    return config_for(mode, bool(xgboost.build_info().get("USE_RMM", False)))


def xgboost_config(client=None) -> dict:
    """XGBoost's global config that puts its GPU memory in the workers' shared pool.

    XGBoost's config is per thread, and ``xgboost.dask`` carries the client's config to the
    workers, so the setting belongs on the client, around the ``xgboost.dask`` calls. In the
    plugin's async mode it is ``{"use_cuda_async_pool": True}`` (XGBoost then allocates from
    the device's default CUDA pool, the one RMM's async mode uses); with an XGBoost built with
    RMM it is ``{"use_rmm": True}``; in pool and managed modes, with XGBoost's PyPI wheels
    (built without RMM), XGBoost cannot share the pool and the config is empty.

    Parameters
    ----------
    client : distributed.Client or None
        The cluster's client: the config is asked of every worker. None: this process's own
        (on a worker, its plugin's mode).

    Returns
    -------
    dict
        Keyword arguments for ``xgboost.config_context``; empty where XGBoost cannot share
        the pool, where XGBoost is not installed, or where the workers disagree.

    Examples
    --------
    >>> import xgboost
    >>> from dask_gpu_interop import GPUMemoryPlugin, xgboost_config
    >>> client.register_plugin(GPUMemoryPlugin(async_alloc=True))
    >>> with xgboost.config_context(**xgboost_config(client)):
    ...     booster = xgboost.dask.train(client, params, dtrain)["booster"]
    """
    if client is None:
        return _worker_config()
    from .._client import require_client

    configs = list(require_client(client, "xgboost_config").run(_worker_config).values())
    if configs and all(c == configs[0] for c in configs):
        return configs[0]
    return {}

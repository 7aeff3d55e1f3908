"""The library's shuffle: an all-to-all of dask DataFrames whose partitions stay on their
workers' GPUs (:func:`shuffle`, :func:`shuffle_merge`), and the setting that keeps dask's own
shuffles of cuDF frames on the GPUs (:func:`shuffle_config`).

Its modules: :mod:`.driver` (the call, its retries and its statistics), :mod:`.plan` (which
worker does what, and the settings in dask config), :mod:`.graph` (the plan's tasks),
:mod:`.tasks` (what runs on the workers), :mod:`.inbox` (the direct exchange between
workers), :mod:`.merge`, :mod:`.checks` (the arguments) and :mod:`.dask_method` (dask's own
shuffle method).
"""

from __future__ import annotations

from .dask_method import shuffle_config
from .driver import ShuffleError, ShuffleStats, shuffle
from .merge import shuffle_merge

__all__ = ["ShuffleError", "ShuffleStats", "shuffle", "shuffle_config", "shuffle_merge"]

"""Batches: the partitions of a dask collection, each made on a worker when it is wanted.

On the client, :func:`batch_graphs` turns a lazy collection (a dask DataFrame, or a list of
``dask.delayed`` objects) into one graph per batch, culled to what that batch needs. On the
worker, :class:`LocalBatches` runs those graphs in the calling thread: a batch is computed
each time it is asked for and nothing of it is kept, except the results that several of the
worker's batches share (a lookup table that every partition of a quarter joins, say), which
are computed once, at the first batch that needs them, and kept until the worker's work ends.
"""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import dataclass, field


class NotLazyError(TypeError):
    """:func:`~dask_gpu_interop.train_streamed` was given a persisted collection.

    Raised on the client before any work: the collection's partitions are results the
    cluster holds already, so there is nothing to make a batch at a time; ``xgboost.dask``
    trains on them as they lie. Give the lazy collection (before ``persist``) instead.

    Examples
    --------
    >>> from dask_gpu_interop import NotLazyError, train_streamed
    >>> try:  # doctest: +SKIP
    ...     train_streamed(client, params, frame.persist(), label="y")
    ... except NotLazyError as err:
    ...     print(err)
    """


def _delayed_of(data) -> list:
    """The Delayed objects of ``data``: a dask DataFrame's or Series' partitions, or ``data``
    itself when it is a list of Delayed objects."""
    from dask.delayed import Delayed

    if hasattr(data, "to_delayed") and hasattr(data, "npartitions"):
        return list(data.to_delayed())
    if isinstance(data, (list, tuple)) and data and all(isinstance(d, Delayed) for d in data):
        return list(data)
    what = type(data).__name__
    if isinstance(data, (list, tuple)) and not data:
        raise ValueError("no batches: give a dask DataFrame with partitions, or a non-empty "
                         "list of dask.delayed objects")
    raise TypeError(f"batches from a {what}: give a dask DataFrame (each partition is a batch) "
                    "or a list of dask.delayed objects, each computing to a DataFrame (or to "
                    "a (DataFrame, info) pair)")


def piece(value, index: int, count: int):
    """Rows ``index`` of ``count`` equal runs of a batch's frame (its info with the first)."""
    frame, info = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
    rows = len(frame)
    part = frame.iloc[index * rows // count:(index + 1) * rows // count]
    return part if info is None and not isinstance(value, tuple) else (
        part, info if index == 0 else None)


def spread_over(data, count: int) -> list:
    """``data``'s batches, those of a collection with fewer than ``count`` cut into row runs
    (:func:`piece`) so that there are ``count``: batch ``i`` of them is made on worker ``i``,
    and no worker is left without one."""
    import dask

    delayed = _delayed_of(data)
    if len(delayed) >= count:
        return delayed
    out = []
    for k in range(count):
        source = delayed[k % len(delayed)]
        pieces = count // len(delayed) + (k % len(delayed) < count % len(delayed))
        out.append(dask.delayed(piece, pure=False)(source, k // len(delayed), pieces))
    return out


@dataclass
class BatchGraphs:
    """Graphs of batches: one merged task graph, and each batch's key in it."""

    graph: dict
    keys: list
    dependencies: dict = field(default_factory=dict)

    def subset(self, indices) -> BatchGraphs:
        """The graph of the batches at ``indices`` only (culled to what they need)."""
        from dask.optimization import cull

        keys = [self.keys[i] for i in indices]
        if not keys:
            return BatchGraphs({}, [])
        graph, dependencies = cull(self.graph, keys)
        return BatchGraphs(graph, keys, dependencies)

    def dumps(self) -> bytes:
        """The graphs pickled: carried to a worker as opaque bytes, so that dask does not
        take the tasks inside them for tasks of its own."""
        import cloudpickle  # functions defined in a script or a notebook travel by value

        return cloudpickle.dumps((self.graph, self.keys, self.dependencies),
                                 protocol=pickle.HIGHEST_PROTOCOL)


def batch_graphs(data) -> BatchGraphs:
    """The batches of ``data`` as graphs; NotLazyError where a batch depends on results the
    cluster already holds."""
    import dask
    from dask.optimization import cull

    delayed = _delayed_of(data)
    graph: dict = {}
    for d in delayed:
        graph.update(dask.utils.ensure_dict(d.__dask_graph__()))
    keys = [d.key for d in delayed]
    culled, dependencies = cull(graph, keys)
    if _outside(culled):
        raise NotLazyError(
            "these batches are already computed in the cluster's memory (a persisted "
            "collection): give the lazy collection, whose partitions are then made on the "
            "workers one at a time, or train the persisted one with xgboost.dask")
    return BatchGraphs(culled, keys, dependencies)


def _outside(graph: dict) -> bool:
    """Whether a task of ``graph`` reads a key the graph does not make (a persisted result,
    which the scheduler holds as a future)."""
    try:
        from dask._task_spec import convert_legacy_graph
    except ImportError:  # dask without task objects: every key is in the graph it culled
        return False
    converted = convert_legacy_graph(graph)
    return any(dep not in converted for task in converted.values()
               for dep in getattr(task, "dependencies", ()))


def _dependents(dependencies: dict) -> dict:
    out: dict = {key: set() for key in dependencies}
    for key, deps in dependencies.items():
        for dep in deps:
            out.setdefault(dep, set()).add(key)
    return out


def _needed_by(key, dependencies: dict) -> set:
    """``key`` and every key it depends on, transitively."""
    seen, stack = set(), [key]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(dependencies.get(current, ()))
    return seen


class LocalBatches:
    """Batches computed in this thread from their graphs (see the module's description).

    ``computed`` counts the batches made, ``seconds`` the time spent making them."""

    def __init__(self, dumped: bytes):
        self.graph, self.keys, self.dependencies = pickle.loads(dumped)
        self._needs = [_needed_by(key, self.dependencies) for key in self.keys]
        uses: dict = {}
        for needed in self._needs:
            for key in needed:
                uses[key] = uses.get(key, 0) + 1
        shared = {key for key, count in uses.items() if count > 1}
        dependents = _dependents(self.dependencies)
        # Kept: the shared results that a key of one batch alone reads (the frontier); the
        # shared keys beneath them are freed once the frontier is made.
        self.kept = {key for key in shared
                     if key in self.keys or any(d not in shared for d in dependents.get(key, ()))}
        self._values: dict = {}
        self._lock = threading.Lock()  # batches are made in several threads at once
        self.computed = 0
        self.seconds = 0.0

    def __len__(self) -> int:
        return len(self.keys)

    def compute(self, index: int):
        """The value of batch ``index``, computed now."""
        import dask.local

        started = time.perf_counter()
        needed = self._needs[index]
        with self._lock:  # a shared result is made once, by the first batch that needs it
            missing = [key for key in self.kept if key in needed and key not in self._values]
            if missing:
                graph = {key: self.graph[key] for key in set().union(
                    *(_needed_by(key, self.dependencies) for key in missing))}
                graph.update({key: value for key, value in self._values.items()
                              if key in graph})
                self._values.update(zip(missing, dask.local.get_sync(graph, missing),
                                        strict=True))
            values = {key: self._values[key] for key in needed if key in self._values}
        graph = {key: self.graph[key] for key in needed if key not in values}
        graph.update(values)
        value = dask.local.get_sync(graph, self.keys[index])
        with self._lock:
            self.computed += 1
            self.seconds += time.perf_counter() - started
        return value

    def release(self) -> None:
        """Forget the kept shared results."""
        self._values.clear()

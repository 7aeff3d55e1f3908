"""XGBoost's data iterator over a worker's batches, each made when XGBoost asks for it.

XGBoost builds a quantized matrix from an iterator in two passes (one to sketch each
feature's quantiles, one to quantize the rows), and asks for the batches again at each. The
iterator makes a batch at every request and drops it once XGBoost has read it, so that no
more than the batch being read and the next one (made meanwhile in a thread of its own) are
held. The first pass records what each batch reported (its ``info``) and its rows.
"""

from __future__ import annotations

import contextvars
import time
from concurrent.futures import ThreadPoolExecutor

from .batches import LocalBatches


def _split(value, label: str, features: list[str] | None):
    """(features, label column, info, rows) of a batch's value: a frame, or (frame, info)."""
    info = None
    if isinstance(value, tuple) and len(value) == 2:
        value, info = value
    columns = getattr(value, "columns", None)
    if columns is None:
        raise TypeError(f"a batch computed to a {type(value).__name__}: each batch must be a "
                        "DataFrame (pandas or cuDF), or a (DataFrame, info) pair")
    if label not in columns:
        raise KeyError(f"label={label!r}: a batch has no such column (it has "
                       f"{', '.join(map(str, columns))})")
    names = features if features is not None else [c for c in columns if c != label]
    return value[names], value[label], info, len(value)


def make_iterator(batches: LocalBatches, label: str, features: list[str] | None, *,
                  gpu: bool, prefetch: int = 1, keep: bool = False,
                  cache_prefix: str | None = None):
    """A ``xgboost.DataIter`` over ``batches`` (see the module's description): ``prefetch``
    batches made ahead, each in a thread of its own, while XGBoost reads the current one;
    ``keep``: each batch kept from its first making for the later passes (where the batches
    fit in memory); with ``cache_prefix``, one for XGBoost's external-memory matrix, its cache
    named by it."""
    import xgboost

    class BatchIterator(xgboost.DataIter):
        def __init__(self):
            options = {"release_data": True}
            if cache_prefix is not None:
                options["cache_prefix"] = cache_prefix
                if gpu:  # the pages in host memory, not in files
                    options["on_host"] = True
            super().__init__(**options)
            self.position = 0
            self.infos: list = [None] * len(batches)
            self.rows: list[int] = [0] * len(batches)
            self.passes: list[float] = []  # seconds of each whole pass over the batches
            self._pass_started: float | None = None
            self._pending: dict = {}  # index -> the future of a batch being made ahead
            self._kept: list | None = [None] * len(batches) if keep else None
            self._pool = (ThreadPoolExecutor(prefetch, thread_name_prefix="batch")
                          if prefetch else None)

        def _make(self, index: int):
            value = batches.compute(index)
            X, y, info, rows = _split(value, label, features)
            if gpu:  # made on this thread's stream: complete before another thread reads it
                from ..device import per_thread_streams, synchronize

                if per_thread_streams():
                    synchronize()
            return X, y, info, rows

        def _ahead(self, index: int) -> None:
            """Batches ``index + 1`` to ``index + prefetch`` being made, each once."""
            if self._pool is None or (self._kept is not None and self.passes):
                return  # nothing made ahead: kept batches are read back after the first pass
            for ahead in range(index + 1, min(index + 1 + prefetch, len(batches))):
                if ahead not in self._pending:
                    # in this thread's context: a batch may ask for its worker (get_worker)
                    self._pending[ahead] = self._pool.submit(
                        contextvars.copy_context().run, self._make, ahead)

        def next(self, input_data) -> bool:
            if self._pass_started is None:
                self._pass_started = time.perf_counter()
            index = self.position
            if index >= len(batches):
                self.passes.append(time.perf_counter() - self._pass_started)
                self._pass_started = None
                return False
            pending = self._pending.pop(index, None)
            if self._kept is not None and self._kept[index] is not None:
                X, y, info, rows = self._kept[index]
            else:
                self._ahead(index)
                X, y, info, rows = pending.result() if pending is not None else self._make(index)
                if self._kept is not None:
                    self._kept[index] = X, y, info, rows
            if not self.passes:
                self.infos[index], self.rows[index] = info, rows
            input_data(data=X, label=y)
            del X, y
            self.position = index + 1
            return True

        def reset(self) -> None:
            pending, self._pending = self._pending, {}
            for future in pending.values():  # a pass cut short: its batches are not wanted
                future.exception()  # waited for; what it raised is of no use now
            self.position = 0
            self._pass_started = None

        def close(self) -> None:
            """Stop the threads that make batches ahead (waiting for those being made), and
            drop the batches kept."""
            self._pending = {}
            self._kept = None
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    return BatchIterator()

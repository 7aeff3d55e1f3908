"""A block of work in which the scheduler moves no task to another worker.

Dask's scheduler first gives a task to a worker that holds its inputs; its work stealing then
moves queued tasks from busy workers to idle ones. That is right for throughput, but some
libraries act on *where* results end up: ``xgboost.dask`` selects the columns of each
partition and pairs features with labels in tasks of its own, and then trains each worker on
the pairs that worker holds. A pair stolen to another worker moves rows between workers, can
leave a worker with an empty matrix, and makes two runs on the same data and seed train
different models. Paused stealing keeps every such task next to its data.

The scheduler's stealing is paused, not turned off: what was queued stays, and it resumes
when the block ends (also on an error), unless another client's block still holds it. A
client that goes without ending its block (closed, or its process killed) lets go of it as
the scheduler removes the client: the pause never outlives the client that made it.
"""

from __future__ import annotations

import contextlib

from .._client import require_client

EXTENSION = "stealing"  # distributed's work-stealing extension, and its periodic callback
HOLDERS = "_dask_gpu_interop_stealing_holders"  # {client: its blocks holding it}, on the scheduler
PLUGIN = "dask-gpu-interop-stealing-pause"  # ends a client's holds when the client goes


def _scheduler_calls():
    """(pause, resume), to run on the scheduler. Made here, they travel by value, with the
    scheduler plugin they add: the scheduler's environment need not have this package."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    extension, holders_name, plugin_name = EXTENSION, HOLDERS, PLUGIN

    def holders_of(scheduler) -> dict:
        holders = getattr(scheduler, holders_name, None)
        if not isinstance(holders, dict):
            holders = {}
            setattr(scheduler, holders_name, holders)
        return holders

    class EndsWithItsClient(SchedulerPlugin):
        """A client that goes (closed, or its process killed) lets go of its blocks: stealing
        resumes when no other client's block holds it."""

        name = plugin_name

        def remove_client(self, scheduler, client) -> None:
            holders = holders_of(scheduler)
            if holders.pop(client, 0) and not holders:
                scheduler.loop.add_callback(scheduler.extensions[extension].start)

    async def pause(client: str, dask_scheduler=None) -> bool:
        """Pause the scheduler's work stealing (once in-flight moves are settled) and count
        this block of ``client``'s; False where the scheduler has no work stealing running."""
        stealing = dask_scheduler.extensions.get(extension)
        holders = holders_of(dask_scheduler)
        if stealing is None or (not holders and
                                extension not in dask_scheduler.periodic_callbacks):
            return False  # off by its configuration or by another's hand: not ours to resume
        if client not in dask_scheduler.clients:
            return False  # the client went already: nothing would end the pause
        dask_scheduler.add_plugin(EndsWithItsClient(), name=plugin_name, idempotent=True)
        holders[client] = holders.get(client, 0) + 1
        await stealing.stop()
        return True

    async def resume(client: str, dask_scheduler=None) -> None:
        """This block of ``client``'s has ended: resume work stealing when no block holds
        it."""
        holders = holders_of(dask_scheduler)
        left = holders.pop(client, 0) - 1
        if left > 0:
            holders[client] = left
        if not holders:
            await dask_scheduler.extensions[extension].start()

    return pause, resume


@contextlib.contextmanager
def without_work_stealing(client):
    """A ``with`` block in which ``client``'s scheduler moves no queued task to another
    worker: each runs on the worker it was given, next to its inputs (see the module's
    description). The cluster's other clients are affected for as long as the block lasts,
    and no longer than ``client`` does: a client that goes (its process killed, say) lets go
    of its block as the scheduler removes it.
    A scheduler that blocks the functions clients send it (``run_function`` in its
    ``distributed.scheduler.blocked-handlers``) keeps its work stealing.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster whose scheduler pauses its work stealing.

    Yields
    ------
    None

    Raises
    ------
    TypeError
        ``client`` is not a ``distributed.Client`` (a cluster object, say).

    Examples
    --------
    >>> import xgboost.dask as dxgb
    >>> from dask_gpu_interop import without_work_stealing
    >>> with without_work_stealing(client):  # doctest: +SKIP
    ...     matrix = dxgb.DaskQuantileDMatrix(client, features, label)
    """
    require_client(client, "without_work_stealing")
    pause, resume = _scheduler_calls()
    try:
        paused = client.run_on_scheduler(pause, client.id)
    except ValueError:  # a scheduler that blocks the functions sent to it: stealing as it is
        paused = False
    try:
        yield
    finally:
        if paused:
            client.run_on_scheduler(resume, client.id)

"""What the example's local workers leave to the command: a task that fails is reported once,
by the command (in one line, for the mistakes it knows, such as a full disk), not also as a
"Compute Failed" block in each worker's log; nor are the tasks cancelled, and the scheduler
gone, when the command stops its cluster while they run (Ctrl-C)."""

from __future__ import annotations

import logging

LOGGERS = ("distributed.worker", "distributed.worker.state_machine")
DROPPED = ("Compute Failed", "Failed to communicate with scheduler during heartbeat")


class TaskFailures(logging.Filter):
    """Drops a worker's records of a task that failed or was cancelled."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not text.startswith(DROPPED) and "ended with CancelledError" not in text


def leave_task_failures_to_the_client(dask_worker=None) -> None:
    """On a worker (``client.run``): its log without the records of failed tasks."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TaskFailures) for f in logger.filters):
            logger.addFilter(TaskFailures())

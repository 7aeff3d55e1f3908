"""Import modules in the background while there is other waiting to do.

A command waits seconds for its cluster to start, and seconds more for imports it needs only
once the cluster is up: cuDF (the client describes the feature table with it, each worker's
first task needs it) and dask.dataframe (the ETL's graph). Started while the cluster starts
(client) and as soon as the workers are up (workers), the imports overlap the start instead of
following it. Python's import lock makes a later ``import`` wait for the one in flight, so
nothing is imported twice.
"""

from __future__ import annotations

import importlib
import threading


def import_in_background(module: str = "cudf") -> None:
    """Start importing ``module`` in a daemon thread; an error is left for the real import."""

    def run():
        try:
            importlib.import_module(module)
        except Exception:  # the task that needs it raises it with its own context
            pass

    threading.Thread(target=run, name=f"import-{module}", daemon=True).start()


def workers(client, module: str = "cudf") -> None:
    """Have every worker of ``client`` start importing ``module`` now."""
    client.run(import_in_background, module)

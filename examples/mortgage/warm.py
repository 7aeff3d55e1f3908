"""Import cuDF in the background while there is other waiting to do.

A fresh process spends about 2.5 s importing cuDF. The client needs it to describe the feature
table; each worker needs it for its first task. Started while the cluster starts (client) and
as soon as the workers are up (workers), the two imports no longer follow one another: the
`etl` command on 9 GiB took 1-2 s less in all, and its ETL line half as long, since part of
the import now falls in the cluster's start (benchmarks/results/
mortgage-1xH100-background-import.md). Python's import lock makes a later ``import cudf`` wait
for the one in flight, so nothing is imported twice.
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

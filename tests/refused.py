"""A Client that must fail to connect, finalized at once.

A Client whose construction fails is left half-built, for the garbage collector. Collected
later, its close can run inside another Client's start and wait forever for the lock that
start holds (distributed's LoopRunner lock is one for all clients): a test would hang. Here it
is collected before the test goes on, and it never becomes dask's default scheduler.
"""

from __future__ import annotations

import gc

from distributed import Client


def refused(*args, **kwargs) -> tuple[type, str]:
    """``(the error's type, its message)`` of ``Client(*args, **kwargs)``, which must fail."""
    try:
        Client(*args, set_as_default=False, **kwargs)
    except Exception as err:  # its traceback holds the half-built Client: keep none of it
        failure = type(err), str(err)
    else:
        raise AssertionError(f"a Client connected to {args or kwargs}")
    gc.collect()
    return failure

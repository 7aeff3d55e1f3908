"""JAX: it has no external allocator, so keep it from preallocating and cap it.

JAX reads these variables when its GPU backend starts (on first use, not on import): set
before that, they stop its default 75% preallocation and cap its share of the device.
"""

from __future__ import annotations

import os

from ..compat import jax_backend_started
from . import OUTSIDE, Binding

BIND_ON_IMPORT = False
_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")
# Newer JAX also reads XLA_CLIENT_MEM_FRACTION and refuses to start if both names are set (seen
# with jax 0.11.2), while the older name works from jax 0.4 to 0.11: set it only when the user
# has set neither.
_FRACTION_NAMES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
_saved: dict | None = None
_ours: set = set()  # variables this module set


def backend_started() -> bool:
    return jax_backend_started()


def bind(module, resource, stack) -> Binding:
    global _saved
    fraction = stack.config.jax_memory_fraction
    if backend_started():
        return Binding(
            "jax",
            OUTSIDE,
            "JAX started its GPU backend before the plugin ran: its preallocation stands; "
            "start workers with --preload dask_gpu_interop.preload to cap it",
        )
    if _saved is None:
        _saved = {name: os.environ.get(name) for name in _VARIABLES}
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    cap = "no cap"
    user_set = [name for name in _FRACTION_NAMES if name in os.environ and name not in _ours]
    if user_set:
        cap = f"capped by {user_set[0]}={os.environ[user_set[0]]} (set before the plugin)"
    elif fraction is not None:
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:g}"
        _ours.add("XLA_PYTHON_CLIENT_MEM_FRACTION")
        cap = f"capped at {fraction:.0%} of the device"
    return Binding(
        "jax", OUTSIDE, f"JAX cannot allocate through RMM: no preallocation, {cap}"
    )


def unbind() -> None:
    global _saved
    if _saved is None:
        return
    _ours.clear()
    for name, value in _saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved = None

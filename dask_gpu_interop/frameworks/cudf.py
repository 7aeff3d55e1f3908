"""cuDF: allocates through RMM's current device resource natively; the plugin sets spilling."""

from __future__ import annotations

from . import BOUND, Binding


def bind(cudf, resource, stack) -> Binding:
    detail = "allocates through RMM's current resource natively (counted under 'rmm')"
    spill = stack.config.spill
    if spill is not None:
        cudf.set_option("spill", spill)
        detail += f"; spilling {'on' if spill else 'off'}"
    return Binding("cudf", BOUND, detail)


def unbind() -> None:
    """cuDF's spill setting is left as the plugin set it: buffers may already be spillable."""

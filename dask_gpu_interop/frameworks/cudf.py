"""cuDF: allocates through RMM's current device resource natively; the plugin sets spilling.

With cuDF's spilling on, a refusal of the pool is no error: cuDF's failure callback moves
frames to host memory and the allocation is tried again. RMM logs each refusal as an error
line all the same, one for every allocation a frame larger than the GPU needed cured, so while
cuDF handles them RMM's log keeps to critical messages; a refusal that spilling cannot cure
still reaches the task as an out-of-memory error, explained by the plugin.
"""

from __future__ import annotations

from . import BOUND, Binding

#: RMM's log level before the binding quieted it (restored at unbinding).
_QUIETED: list = []


def bind(cudf, resource, stack) -> Binding:
    detail = "allocates through RMM's current resource natively (counted under 'rmm')"
    spill = stack.config.spill
    if spill is not None:
        cudf.set_option("spill", spill)
        detail += f"; spilling {'on' if spill else 'off'}"
    if not stack.plan.failure_callback and _quiet_refusals():
        detail += "; RMM's refusals, which spilling handles, are not logged as errors"
    return Binding("cudf", BOUND, detail)


def unbind() -> None:
    """cuDF's spill setting is left as the plugin set it: buffers may already be spillable.
    RMM's log level is put back."""
    if _QUIETED:
        import rmm

        rmm.set_logging_level(_QUIETED.pop())


def _quiet_refusals() -> bool:
    """RMM's log at critical messages only, where this RMM says how; whether it is."""
    import rmm

    levels = getattr(rmm, "level_enum", None)
    if _QUIETED or levels is None or not hasattr(rmm, "set_logging_level"):
        return bool(_QUIETED)
    try:
        before = rmm.get_logging_level()
        rmm.set_logging_level(levels.critical)
    except Exception:  # the log's level is a nicety: never a reason for the binding to fail
        return False
    _QUIETED.append(before)
    return True

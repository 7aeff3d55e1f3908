"""Register our serializers with distributed lazily, the way distributed registers its own.

distributed keeps one lazy registration per top-level module and per dispatcher
(``Dispatch.register_lazy``), run the first time an object of that module is serialized.
Registering ours for "torch" plainly would replace distributed's own (and its
``nn.Module``/``nn.Parameter`` support) or be overridden by it, depending on order. So we
chain: our registration runs whatever was pending for that module first, then ours, which
therefore wins. Where the module's registrations already ran (it was imported and used), ours
are registered at once; otherwise nothing is imported until an object needs it.
"""

from __future__ import annotations

import importlib
import sys
import threading

from ..compat import lazy_registrations
from . import dask_cuda

#: Our serializer modules, by the top-level modules whose objects they serialize.
FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "jax": ("jax", "jaxlib"),
    "cudf": ("cudf",),
}

_MARK = "_dask_gpu_interop_framework"
_lock = threading.Lock()


def _dispatchers():
    from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    return cuda_serialize, cuda_deserialize, dask_serialize, dask_deserialize


def load(framework: str) -> None:
    """Import our serializer module for ``framework`` and register it now."""
    importlib.import_module(f"{__package__}.{framework}").register()


def register(frameworks=None) -> None:
    """Register our serializers (all of :data:`FRAMEWORKS` by default) in this process.

    Call it in every process that sends or receives: the client (importing the package does)
    and each worker (the plugin and the preload do). Safe to call again.
    """
    names = tuple(FRAMEWORKS) if frameworks is None else tuple(frameworks)
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"no serializers for {unknown}; choose from {sorted(FRAMEWORKS)}")
    with _lock:
        dask_cuda.register()
        for framework in names:
            now = False
            for toplevel in FRAMEWORKS[framework]:
                for dispatch in _dispatchers():
                    now |= _install(dispatch, toplevel, framework)
            if now:
                load(framework)


def _install(dispatch, toplevel: str, framework: str) -> bool:
    """Chain ours onto ``dispatch``'s lazy entry for ``toplevel``; True: register right now."""
    previous = lazy_registrations(dispatch).get(toplevel)
    if getattr(previous, _MARK, None) == framework:
        return False
    if previous is None and toplevel in sys.modules:
        # Imported and its lazy registrations (if any) already ran: nothing to chain onto.
        return True

    def register_lazily():
        if previous is not None:
            previous()
        load(framework)

    setattr(register_lazily, _MARK, framework)
    dispatch.register_lazy(toplevel, register_lazily)
    return False


def registered(framework: str) -> bool:
    """Whether our serializers for ``framework`` are registered, or will be lazily."""
    for toplevel in FRAMEWORKS[framework]:
        for dispatch in _dispatchers():
            if getattr(lazy_registrations(dispatch).get(toplevel), _MARK, None) == framework:
                continue
            module = sys.modules.get(f"{__package__}.{framework}")
            if module is None or not module.is_registered():
                return False
    return True

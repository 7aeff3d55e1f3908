"""One small module per framework: bind it to the worker's RMM resource, unbind it, report it.

Nothing here imports a framework: each binds when user code first imports it (see
``_imports.when_imported``), so the plugin's setup stays fast and binds before any allocation.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field

# Framework name -> the module whose import triggers the binding.
WATCHED_MODULE = {
    "cupy": "cupy",
    "numba": "numba.cuda",
    "torch": "torch",
    "xgboost": "xgboost",
    "jax": "jax",
    "cudf": "cudf",
}
KNOWN = tuple(WATCHED_MODULE)
# Bound by default when installed. cuDF is always on RMM; it is listed for spilling and reports.
DEFAULT = ("cupy", "numba", "torch", "xgboost", "jax", "cudf")
ALIASES = {"pytorch": "torch", "numba-cuda": "numba", "numba.cuda": "numba", "jaxlib": "jax"}
PIP_NAMES = {
    "cupy": "cupy-cuda13x (or cupy-cuda12x)",
    "numba": "numba-cuda[cu13] (or [cu12])",
    "torch": "torch",
    "xgboost": "xgboost",
    "jax": "jax[cuda13] (or [cuda12])",
    "cudf": "cudf-cu13 (or cudf-cu12)",
}

# States a framework can be in on a worker.
BOUND = "bound"  # allocates from the worker's RMM resource, counted in its statistics
SHARED = "shared"  # same physical pool as RMM, outside RMM's statistics
OUTSIDE = "outside"  # keeps its own memory
PENDING = "pending"  # installed, not imported yet: binds on import
FAILED = "failed"


@dataclass
class Binding:
    """How one framework allocates on this worker, in words a user can act on."""

    framework: str
    state: str
    detail: str = ""
    numbers: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"state": self.state, "detail": self.detail, **self.numbers}


def normalize_names(value) -> tuple[str, ...] | None:
    """Validate a user's ``frameworks=`` value: None (all installed), names, or 'a,b'."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        names = list(value)
    else:
        raise TypeError(
            f"frameworks={value!r}: expected a list of names such as ['cupy', 'torch'], "
            "a comma-separated string, or None for every installed one"
        )
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"frameworks: {name!r} is not a name; known names: {', '.join(KNOWN)}")
        key = ALIASES.get(name.strip().lower(), name.strip().lower())
        if key not in WATCHED_MODULE:
            raise ValueError(
                f"frameworks: unknown framework {name!r}; known names: {', '.join(KNOWN)}"
            )
        if key not in out:
            out.append(key)
    return tuple(out)


def is_installed(name: str) -> bool:
    """Whether the framework can be imported here, without importing it (or its parent)."""
    top, _, sub = WATCHED_MODULE[name].partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if not sub:
        return True
    return any(
        os.path.isdir(os.path.join(location, sub))
        for location in (spec.submodule_search_locations or ())
    )


def binder(name: str):
    """The module of this package that binds ``name``."""
    return importlib.import_module(f"{__name__}.{name}")

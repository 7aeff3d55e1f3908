"""The plugin's options: parsed and validated once, on the client, when the plugin is built.

Every check here runs before a worker is touched; what can only be known on a worker (the
device's size, which libraries are installed there) is checked in ``stack.plan``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

from .. import _config
from ..frameworks import normalize_names
from .sizes import Size, parse_size

UNSET = object()  # "not given": take the default from dask config

# Option name -> dask config key under gpu-interop.memory
CONFIG_KEYS = {
    "pool_size": "pool-size",
    "maximum_pool_size": "maximum-pool-size",
    "managed": "managed",
    "async_alloc": "async",
    "release_threshold": "release-threshold",
    "frameworks": "frameworks",
    "statistics": "statistics",
    "spill": "spill",
    "log_directory": "log-directory",
    "jax_memory_fraction": "jax-memory-fraction",
}


@dataclass(frozen=True)
class MemoryConfig:
    """A validated memory configuration. Build it with :meth:`from_options`."""

    pool_size: Size | None = None
    maximum_pool_size: Size | None = None
    managed: bool = False
    async_alloc: bool = False
    release_threshold: Size | None = None
    frameworks: tuple[str, ...] | None = None
    statistics: bool = True
    spill: bool | None = None
    log_directory: str | None = None
    jax_memory_fraction: float | None = 0.2

    @property
    def mode(self) -> str:
        """``"async"``, ``"managed"`` or ``"pool"``."""
        if self.async_alloc:
            return "async"
        return "managed" if self.managed else "pool"

    @classmethod
    def from_options(cls, **options) -> MemoryConfig:
        """Validate user options; those left ``UNSET`` come from ``gpu-interop.memory.*``."""
        unknown = set(options) - set(CONFIG_KEYS)
        if unknown:
            raise TypeError(
                f"unknown option(s) {sorted(unknown)}; known options: {sorted(CONFIG_KEYS)}"
            )
        values = {
            name: options[name]
            if options.get(name, UNSET) is not UNSET
            else _config.get(f"memory.{key}")
            for name, key in CONFIG_KEYS.items()
        }
        for flag in ("managed", "async_alloc", "statistics"):
            _check_bool(values[flag], flag)
        if values["spill"] is not None:
            _check_bool(values["spill"], "spill")

        config = cls(
            pool_size=parse_size(values["pool_size"], "pool_size"),
            maximum_pool_size=parse_size(values["maximum_pool_size"], "maximum_pool_size"),
            managed=values["managed"],
            async_alloc=values["async_alloc"],
            release_threshold=parse_size(
                values["release_threshold"], "release_threshold", allow_zero=True
            ),
            frameworks=normalize_names(values["frameworks"]),
            statistics=values["statistics"],
            spill=values["spill"],
            log_directory=_check_directory(values["log_directory"]),
            jax_memory_fraction=_check_fraction(values["jax_memory_fraction"]),
        )
        config._check_combinations()
        return config

    def _check_combinations(self) -> None:
        if self.managed and self.async_alloc:
            raise ValueError(
                "managed=True and async_alloc=True cannot be combined: CUDA's async pool does "
                "not hand out managed memory. Choose managed=True (oversubscription) or "
                "async_alloc=True (the CUDA async pool)."
            )
        if self.release_threshold is not None and not self.async_alloc:
            raise ValueError(
                "release_threshold applies only to the CUDA async pool: pass async_alloc=True "
                "with it, or drop release_threshold."
            )
        if self.maximum_pool_size is not None and self.managed and self.pool_size is None:
            raise ValueError(
                "maximum_pool_size needs a pool: managed memory is pooled only when pool_size "
                "is given. Add pool_size=..., or drop maximum_pool_size."
            )
        small, large = self.pool_size, self.maximum_pool_size
        if small and large and small.is_fraction == large.is_fraction and large.value < small.value:
            raise ValueError(
                f"maximum_pool_size ({large}) is smaller than pool_size ({small}): the maximum "
                "must be at least the initial size."
            )

    def options(self) -> dict:
        """The options as plain values (sizes as given), for logs, reports and the CLI."""
        out = {}
        for name in CONFIG_KEYS:
            value = getattr(self, name)
            if isinstance(value, Size):
                value = value.value if value.is_fraction else int(value.value)
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    def digest(self) -> str:
        """A short stable hash of the configuration: equal configs give equal plugin names."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _check_bool(value, option: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{option}={value!r}: expected True or False")


def _check_directory(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"log_directory={value!r}: expected a path (str), not {type(value).__name__}")
    text = os.fspath(value)
    if not text:
        raise ValueError("log_directory='': give a directory path, or None for no logs")
    return text


def _check_fraction(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"jax_memory_fraction={value!r}: expected a number in (0, 1] or None")
    if not 0 < value <= 1:
        raise ValueError(
            f"jax_memory_fraction={value!r}: must be in (0, 1] (the share of the device JAX may use)"
        )
    return float(value)

"""The plugin's options: declared once, parsed and validated once, on the client.

``MemoryConfig``'s fields are the one source of the memory options. Each field's metadata
gives its help text and how a user's value is parsed; from them come the plugin's keyword
arguments, the dask config defaults (``gpu-interop.memory.<name with dashes>``), the worker
preload's ``--gpu-*`` flags and the commands' ``--*`` flags (see :mod:`dask_gpu_interop.options`).
Adding an option is one new field.

Every check here runs before a worker is touched; what can only be known on a worker (the
device's size, which libraries are installed there) is checked in ``stack.plan``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import dask.config

from ..frameworks import normalize_names
from .sizes import Size, parse_size


class _Unset:
    """An option not given: its value comes from dask config."""

    def __repr__(self) -> str:
        return "<from dask config>"


UNSET = _Unset()
CONFIG_PREFIX = "gpu-interop.memory"
PRELOAD_PREFIX = "gpu-"  # the worker preload's flags: --gpu-pool-size


@dataclass(frozen=True)
class Kind:
    """How one kind of option is read from users and written back as plain data."""

    parse: Callable[[object, str], object]  # (user value, option name) -> field value
    plain: Callable[[object], object]  # field value -> int/float/str/bool/list/None
    flag: bool = False  # on the command line: --name/--no-name rather than --name VALUE
    text: type = str  # the command line's type for a value


def _check_bool(value, option: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{option}={value!r}: expected True or False")
    return value


def _check_optional_bool(value, option: str) -> bool | None:
    return None if value is None else _check_bool(value, option)


def _check_directory(value, option: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{option}={value!r}: expected a path (str), not {type(value).__name__}")
    text = os.fspath(value)
    if not text:
        raise ValueError(f"{option}='': give a directory path, or None for no logs")
    return text


def _check_fraction(value, option: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option}={value!r}: expected a number in (0, 1] or None")
    if not 0 < value <= 1:
        raise ValueError(f"{option}={value!r}: must be in (0, 1] (the share of the device)")
    return float(value)


def _plain_size(size: Size | None):
    if size is None:
        return None
    return size.value if size.is_fraction else int(size.value)


def _same(value):
    return list(value) if isinstance(value, tuple) else value


SIZE = Kind(lambda v, o: parse_size(v, o), _plain_size)
SIZE_OR_ZERO = Kind(lambda v, o: parse_size(v, o, allow_zero=True), _plain_size)
BOOL = Kind(_check_bool, _same, flag=True)
OPTIONAL_BOOL = Kind(_check_optional_bool, _same, flag=True)
NAMES = Kind(lambda v, o: normalize_names(v), _same)
PATH = Kind(_check_directory, _same)
FRACTION = Kind(_check_fraction, _same, text=float)


def _option(default, kind: Kind, help: str):
    return field(default=default, metadata={"kind": kind, "help": help})


@dataclass(frozen=True)
class MemoryConfig:
    """A validated memory configuration. Build it with :meth:`from_options`."""

    pool_size: Size | None = _option(
        None, SIZE,
        "Initial size of the RMM pool: bytes, a size such as '8GB', or a fraction of the "
        "device such as '0.8'. Default: half the free memory for device pools, no pool for "
        "managed memory.")
    maximum_pool_size: Size | None = _option(
        None, SIZE, "Largest the pool may grow to (same forms). Default: the whole device.")
    pool: bool = _option(
        True, BOOL,
        "Device memory through an RMM pool; False: cudaMalloc and cudaFree for every buffer "
        "(still counted), to compare against.")
    managed: bool = _option(
        False, BOOL, "Managed (unified) memory, so that work may oversubscribe the device.")
    async_alloc: bool = _option(
        False, BOOL,
        "CUDA's stream-ordered pool (cudaMallocAsync) on the device's default pool, shared "
        "with PyTorch and XGBoost.")
    release_threshold: Size | None = _option(
        None, SIZE_OR_ZERO, "Async pool only: memory kept in the pool when idle.")
    frameworks: tuple[str, ...] | None = _option(
        None, NAMES,
        "Which libraries allocate from the worker's resource: a list or 'a,b' of cupy, "
        "numba, torch, xgboost, jax, cudf. Default: every installed one.")
    statistics: bool = _option(
        True, BOOL, "Count current and peak bytes (RMM statistics) per worker, framework and task "
        "prefix, for the memory report and the out-of-memory message.")
    spill: bool | None = _option(
        None, OPTIONAL_BOOL, "cuDF's spilling to host memory. Default: cuDF's own setting.")
    log_directory: str | None = _option(
        None, PATH, "A directory for RMM allocation logs, one CSV per worker.")
    jax_memory_fraction: float | None = _option(
        0.2, FRACTION,
        "JAX cannot allocate through RMM: it is kept from preallocating and capped to this "
        "share of the device.")

    @property
    def mode(self) -> str:
        """``"async"``, ``"managed"`` or ``"pool"``."""
        if self.async_alloc:
            return "async"
        return "managed" if self.managed else "pool"

    @classmethod
    def from_options(cls, **options) -> MemoryConfig:
        """Validate user options; those left out or ``UNSET`` come from dask config."""
        known = option_names()
        unknown = set(options) - set(known)
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}; known options: {list(known)}")
        values = {}
        for spec in OPTIONS:
            value = options.get(spec.name, UNSET)
            if value is UNSET:
                value = dask.config.get(spec.config_key)
            values[spec.name] = spec.kind.parse(value, spec.name)
        config = cls(**values)
        config._check_combinations()
        return config

    def _check_combinations(self) -> None:
        if not self.pool:
            given = [name for name in ("pool_size", "maximum_pool_size", "managed", "async_alloc")
                     if getattr(self, name)]
            if given:
                raise ValueError(
                    f"pool=False (cudaMalloc for every buffer) cannot be combined with "
                    f"{', '.join(given)}: drop pool=False, or drop {given[0]}.")
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
        return {spec.name: spec.kind.plain(getattr(self, spec.name)) for spec in OPTIONS}

    def argv(self, prefix: str = "") -> list[str]:
        """The command-line flags that give this configuration back (``--{prefix}pool-size
        0.8 ...``); the worker preload's with ``PRELOAD_PREFIX``."""
        argv = []
        for spec in OPTIONS:
            value = spec.kind.plain(getattr(self, spec.name))
            if isinstance(value, bool):
                argv.append(spec.flag(prefix) if value else f"--no-{prefix}{spec.key}")
            elif isinstance(value, list):
                argv += [spec.flag(prefix), ",".join(value)]
            elif value is not None:
                argv += [spec.flag(prefix), str(value)]
        return argv

    def digest(self) -> str:
        """A short stable hash of the configuration: equal configs give equal plugin names."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class OptionSpec:
    """One memory option, as every place that spells it needs it."""

    name: str  # keyword argument and field: pool_size
    kind: Kind
    help: str
    default: object  # the field's default

    @property
    def key(self) -> str:
        """pool-size: the dask config key under gpu-interop.memory, and the flags' stem."""
        return self.name.replace("_", "-")

    @property
    def config_key(self) -> str:
        return f"{CONFIG_PREFIX}.{self.key}"

    @property
    def plain_default(self):
        return self.kind.plain(self.default)

    def flag(self, prefix: str = "") -> str:
        return f"--{prefix}{self.key}"


OPTIONS: tuple[OptionSpec, ...] = tuple(
    OptionSpec(f.name, f.metadata["kind"], f.metadata["help"], f.default)
    for f in dataclasses.fields(MemoryConfig)
)


def option_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in OPTIONS)


def config_defaults() -> dict:
    """``{"pool-size": None, ...}``: the defaults under ``gpu-interop.memory`` in dask config."""
    return {spec.key: spec.plain_default for spec in OPTIONS}

"""The plugin's options: declared once, parsed and validated once, on the client.

``MemoryConfig``'s fields are the one source of the memory options. Each field's metadata gives
its help text and how a user's value is parsed; from them come the plugin's keyword arguments,
the dask config defaults (``gpu-interop.memory.<name with dashes>``), the worker preload's
``--gpu-*`` flags and the commands' ``--*`` flags (see :mod:`dask_gpu_interop.cluster.options`).
Adding an option is one new field.

A value the plugin cannot use raises :class:`OptionError` (``errors``), which knows where each
value came from (the caller, dask config or an environment variable), so that every caller
says it in the words the user set it with: ``pool_size=`` for keywords, ``--pool-size`` for
flags.

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
from .errors import (
    CONFIG,
    CONFIG_PREFIX,
    DEFAULT,
    ENVIRONMENT,
    OptionError,
    OptionTypeError,
    Setting,
    literal,
)
from .sizes import Size, parse_size


class _Unset:
    """An option not given: its value comes from dask config."""

    def __repr__(self) -> str:
        return "<from dask config>"


UNSET = _Unset()
PRELOAD_PREFIX = "gpu-"  # the worker preload's flags: --gpu-pool-size

@dataclass(frozen=True)
class Kind:
    """How one kind of option is read from users and written back as plain data."""

    parse: Callable[[object], object]  # user value -> field value; TypeError/ValueError: why not
    plain: Callable[[object], object]  # field value -> int/float/str/bool/list/None
    flag: bool = False  # on the command line: --name/--no-name rather than --name VALUE
    text: type = str  # the command line's type for a value


def _parsed(kind: Kind, setting: Setting):
    """``setting``'s value parsed as ``kind``; OptionError naming it as it was set."""
    try:
        return kind.parse(setting.value)
    except (TypeError, ValueError) as err:
        error = OptionTypeError if isinstance(err, TypeError) else OptionError
        raise error(f"{{{setting.option}:=}}: {literal(str(err))}", setting) from None


def _bool(value) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected True or False")
    return value


def _optional_bool(value) -> bool | None:
    return None if value is None else _bool(value)


def _directory(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"expected a path (str), not {type(value).__name__}")
    text = os.fspath(value)
    if not text:
        raise ValueError("give a directory path, or leave it out for no logs")
    return text


def _fraction(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number in (0, 1] or None")
    if not 0 < value <= 1:
        raise ValueError("must be in (0, 1] (the share of the device)")
    return float(value)


def _names(value) -> tuple[str, ...] | None:
    try:
        return normalize_names(value)
    except (TypeError, ValueError) as err:
        # normalize_names starts its reasons with the keyword; the option is named by the caller
        reason = str(err).removeprefix(f"frameworks={value!r}: ").removeprefix("frameworks: ")
        raise type(err)(reason) from None


def _plain_size(size: Size | None):
    if size is None:
        return None
    return size.value if size.is_fraction else int(size.value)


def _same(value):
    return list(value) if isinstance(value, tuple) else value


SIZE = Kind(parse_size, _plain_size)
SIZE_OR_ZERO = Kind(lambda v: parse_size(v, allow_zero=True), _plain_size)
BOOL = Kind(_bool, _same, flag=True)
OPTIONAL_BOOL = Kind(_optional_bool, _same, flag=True)
NAMES = Kind(_names, _same)
PATH = Kind(_directory, _same)
FRACTION = Kind(_fraction, _same, text=float)


def _check_bool(value, option: str) -> bool:
    """``value`` of a keyword argument ``option`` outside MemoryConfig (the plugin's
    ``force``), checked as True or False."""
    return _parsed(BOOL, Setting(option, value))


def _option(default, kind: Kind, help: str):
    return field(default=default, metadata={"kind": kind, "help": help})


@dataclass(frozen=True)
class MemoryConfig:
    """A validated memory configuration: the options of :class:`GPUMemoryPlugin`.

    Build it with :meth:`from_options`, which reads the options left out from dask config and
    checks them, alone and together. Its fields are the one source of the memory options:
    the plugin's keyword arguments, the dask config keys under ``gpu-interop.memory``, the
    preload's ``--gpu-*`` flags and the commands' flags are all made from them. Frozen: equal
    configurations compare equal and have equal :meth:`digest`.

    Parameters
    ----------
    pool_size : Size or None
        Initial size of the RMM pool.
    maximum_pool_size : Size or None
        Largest size the pool may grow to.
    pool : bool
        Device memory through an RMM pool; False: cudaMalloc and cudaFree for every buffer.
    managed : bool
        Managed (unified) memory.
    async_alloc : bool
        CUDA's async pool on the device's default pool.
    release_threshold : Size or None
        Async pool only: the memory the pool keeps when idle.
    frameworks : tuple of str or None
        The frameworks to bind; None: every installed one.
    statistics : bool
        RMM statistics per worker, framework and task prefix.
    spill : bool or None
        cuDF's spilling; None: cuDF's own setting.
    log_directory : str or None
        A directory for RMM allocation logs.
    jax_memory_fraction : float or None
        JAX's cap, as a share of the device.

    See Also
    --------
    GPUMemoryPlugin : what each option does on the workers.

    Examples
    --------
    >>> from dask_gpu_interop import MemoryConfig
    >>> config = MemoryConfig.from_options(pool_size="0.8", maximum_pool_size="0.95")
    >>> config.mode
    'pool'
    >>> config.argv("gpu-")[:4]
    ['--gpu-pool-size', '0.8', '--gpu-maximum-pool-size', '0.95']
    """

    pool_size: Size | None = _option(
        None, SIZE,
        "Initial size of the RMM pool: bytes, a size such as '8GB', or a fraction of the "
        "device such as '0.8'. Default: half the free memory for device pools, no pool for "
        "managed memory.")
    maximum_pool_size: Size | None = _option(
        None, SIZE, "Largest the pool may grow to (same forms). Default: the whole device; "
        "with spill, nine tenths of it.")
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
        None, OPTIONAL_BOOL,
        "cuDF's spilling to host memory: when the pool refuses an allocation, cuDF moves "
        "frames that no task is using to host memory and tries again. Default: cuDF's own "
        "setting.")
    log_directory: str | None = _option(
        None, PATH, "A directory for RMM allocation logs, one CSV per worker.")
    jax_memory_fraction: float | None = _option(
        0.2, FRACTION,
        "JAX cannot allocate through RMM: it is kept from preallocating and capped to this "
        "share of the device.")

    @property
    def mode(self) -> str:
        """The kind of resource, ``"async"``, ``"managed"`` or ``"pool"``."""
        if self.async_alloc:
            return "async"
        return "managed" if self.managed else "pool"

    @classmethod
    def from_options(cls, **options) -> MemoryConfig:
        """Validate a user's options; those left out (or ``UNSET``) come from dask config.

        Parameters
        ----------
        **options
            The keyword arguments of :class:`GPUMemoryPlugin` (``pool_size="0.8"``, ...),
            without ``force``.

        Returns
        -------
        MemoryConfig
            The parsed options, checked alone and together.

        Raises
        ------
        OptionError
            A value that cannot be used, or options that cannot go together, named where
            each was set (the keyword, the dask config key or the environment variable).
        TypeError
            An unknown option (the message lists the known ones).

        Examples
        --------
        >>> from dask_gpu_interop import MemoryConfig
        >>> MemoryConfig.from_options(async_alloc=True, release_threshold="10GB").mode
        'async'
        """
        known = option_names()
        unknown = set(options) - set(known)
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}; known options: {list(known)}")
        settings = {spec.name: spec.setting(options.get(spec.name, UNSET)) for spec in OPTIONS}
        config = cls(**{spec.name: _parsed(spec.kind, settings[spec.name]) for spec in OPTIONS})
        config._check_combinations(settings)
        return config

    def _check_combinations(self, settings: dict[str, Setting]) -> None:
        def refuse(reason: str, *names: str):
            raise OptionError(reason, *(settings[name] for name in names))

        if not self.pool:
            given = [name for name in ("pool_size", "maximum_pool_size", "managed", "async_alloc")
                     if getattr(self, name)]
            if given:
                refuse("{pool:=} (cudaMalloc for every buffer) cannot be combined with "
                       + ", ".join(f"{{{name}}}" for name in given)
                       + f": drop {{pool:=}}, or drop {{{given[0]}}}.", "pool", *given)
        if self.managed and self.async_alloc:
            refuse("{managed:=} and {async_alloc:=} cannot be combined: CUDA's async pool does "
                   "not hand out managed memory. Choose {managed:=} (oversubscription) or "
                   "{async_alloc:=} (the CUDA async pool).", "managed", "async_alloc")
        if self.release_threshold is not None and not self.async_alloc:
            refuse("{release_threshold} applies only to the CUDA async pool: pass "
                   "{async_alloc:True} with it, or drop {release_threshold}.",
                   "release_threshold", "async_alloc")
        if self.maximum_pool_size is not None and self.managed and self.pool_size is None:
            refuse("{maximum_pool_size} needs a pool: managed memory is pooled only when "
                   "{pool_size} is given. Add {pool_size:...}, or drop {maximum_pool_size}.",
                   "maximum_pool_size", "pool_size")
        small, large = self.pool_size, self.maximum_pool_size
        if small and large and small.is_fraction == large.is_fraction and large.value < small.value:
            refuse(f"{{maximum_pool_size}} ({large}) is smaller than {{pool_size}} ({small}): "
                   "the maximum must be at least the initial size.",
                   "maximum_pool_size", "pool_size")

    def options(self) -> dict:
        """The options as plain values, for logs, reports and the command line.

        Returns
        -------
        dict
            ``{option: value}`` for every option: sizes as given (bytes as an int, a fraction
            as a float), lists for ``frameworks``, ``None`` where unset.
        """
        return {spec.name: spec.kind.plain(getattr(self, spec.name)) for spec in OPTIONS}

    def argv(self, prefix: str = "") -> list[str]:
        """The command-line flags that give this configuration back.

        Parameters
        ----------
        prefix : str
            The flags' prefix: ``""`` for the commands' (``--pool-size``), ``"gpu-"``
            (``PRELOAD_PREFIX``) for the worker preload's (``--gpu-pool-size``).

        Returns
        -------
        list of str
            The flags and their values, as a command line takes them; options that are
            ``None`` are left out, booleans are spelled ``--name`` or ``--no-name``.
        """
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
        """A short stable hash of the configuration: equal configs give equal plugin names.

        Returns
        -------
        str
            Ten hexadecimal digits, the same in every process for equal configurations.
        """
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

    def setting(self, value) -> Setting:
        """The option given ``value`` by the caller, or, when ``UNSET``, its dask config value
        and where that came from: an environment variable, a config key, or nobody."""
        if value is not UNSET:
            return Setting(self.name, value)
        value = dask.config.get(self.config_key)
        variable = _environment_variable(self.config_key, value)
        if variable:
            return Setting(self.name, value, ENVIRONMENT, variable)
        default = self.plain_default
        if type(value) is type(default) and value == default:
            return Setting(self.name, value, DEFAULT)
        return Setting(self.name, value, CONFIG)


def _environment_variable(key: str, value) -> str | None:
    """The ``DASK_*`` variable that gave dask config ``key`` its ``value``, if one did: dask
    reads ``DASK_GPU_INTEROP__MEMORY__POOL_SIZE`` as ``gpu-interop.memory.pool-size``."""
    wanted = key.replace("_", "-")
    for name, text in os.environ.items():
        if not name.startswith("DASK_"):
            continue
        if name[5:].lower().replace("__", ".").replace("_", "-") != wanted:
            continue
        if dask.config.get(key, None, config=dask.config.collect_env({name: text})) == value:
            return name
    return None


OPTIONS: tuple[OptionSpec, ...] = tuple(
    OptionSpec(f.name, f.metadata["kind"], f.metadata["help"], f.default)
    for f in dataclasses.fields(MemoryConfig)
)


class CheckedOptions(dict):
    """Memory options as a user gave them (keyword arguments of :class:`GPUMemoryPlugin`),
    with the :class:`MemoryConfig` they were parsed into: what the commands' flags give a
    program, so that the cluster it starts is configured from that one parse.

    It is a dict of the options as given, for the program to read; a copy (``dict(options)``,
    ``{**options, ...}``), or these options changed since, is read as options again.
    """

    def __init__(self, options: dict, config: MemoryConfig):
        super().__init__(options)
        self._given = dict(options)
        self._config = config

    def checked(self) -> MemoryConfig | None:
        """The configuration they were parsed into; None where they changed since."""
        return self._config if dict(self) == self._given else None


def option_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in OPTIONS)


def config_defaults() -> dict:
    """``{"pool-size": None, ...}``: the defaults under ``gpu-interop.memory`` in dask config."""
    return {spec.key: spec.plain_default for spec in OPTIONS}

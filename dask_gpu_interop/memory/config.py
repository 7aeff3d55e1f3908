"""The plugin's options: declared once, parsed and validated once, on the client.

``MemoryConfig``'s fields are the one source of the memory options. Each field's metadata
gives its help text and how a user's value is parsed; from them come the plugin's keyword
arguments, the dask config defaults (``gpu-interop.memory.<name with dashes>``), the worker
preload's ``--gpu-*`` flags and the commands' ``--*`` flags (see :mod:`dask_gpu_interop.options`).
Adding an option is one new field.

A value the plugin cannot use raises :class:`OptionError`, which knows where each value came
from (the caller, dask config or an environment variable), so that every caller says it in
the words the user set it with: ``pool_size=`` for keywords, ``--pool-size`` for flags.

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

# Where a value came from.
GIVEN = "given"  # passed by the caller: a keyword argument, or a command's flag
DEFAULT = "default"  # nobody set it (said in the caller's words, where it would be set)
CONFIG = "config"  # a dask config key: a YAML file, dask.config.set
ENVIRONMENT = "environment"  # a DASK_* environment variable


@dataclass(frozen=True)
class Setting:
    """One option as its user set it: the name, the value, and where the value came from."""

    option: str  # pool_size
    value: object
    source: str = GIVEN
    variable: str = ""  # ENVIRONMENT: the variable's name
    flag: str = ""  # the command-line flag, where it is not the option's name (--workers)

    def spell(self, flags: str | None, value: str = "") -> str:
        """The option in the words of where it was set, with ``value`` (a value as Python
        spells it, or "=" for the value it has) or without one.

        ``flags`` is how the caller spells what it was given: None for keyword arguments
        (``pool_size='8GB'``), else the flags' prefix ("": ``--pool-size '8GB'``)."""
        key = self.option.replace("_", "-")
        flag = self.flag or key
        if value == "=":
            value = repr(self.value)
            if self.source == ENVIRONMENT:  # as the user typed it
                value = os.environ.get(self.variable, value)
        if self.source == ENVIRONMENT:
            name = self.variable
        elif self.source == CONFIG:
            name = f"dask config {CONFIG_PREFIX}.{key}"
        elif flags is None:
            name = self.option
        elif value in ("True", "False"):
            return f"--{flags}{flag}" if value == "True" else f"--no-{flags}{flag}"
        else:
            return f"--{flags}{flag} {value}" if value else f"--{flags}{flag}"
        return f"{name}={value}" if value else name


class _Spelled:
    """A ``{name}`` field of a reason: ``format`` spells the option (see ``Setting.spell``)."""

    def __init__(self, setting: Setting, flags: str | None):
        self.setting, self.flags = setting, flags

    def __format__(self, value: str) -> str:
        return self.setting.spell(self.flags, value)


class Worded(Exception):
    """An error about options a user set, said in the user's words.

    ``reason`` names each option as ``{name}``, ``{name:=}`` (with the value it has) or
    ``{name:VALUE}`` (with VALUE, as Python spells it); ``settings`` says, for each, its value
    and where it came from. ``str(err)`` speaks of what the caller gave as keyword arguments
    (``pool_size='8GB'``); ``err.message(flags="")`` as command-line flags (``--pool-size
    '8GB'``), ``flags="gpu-"`` as the preload's (``--gpu-pool-size``). Options from dask config
    or the environment are named as they were set there, whoever asks.
    """

    def __init__(self, reason: str, *settings: Setting):
        super().__init__(reason, *settings)
        self.reason = reason
        self.settings = settings

    def message(self, flags: str | None = None) -> str:
        """The message, naming each option as the caller was given it.

        Parameters
        ----------
        flags : str or None
            None: keyword arguments (``pool_size='8GB'``), as ``str(err)`` says them. A
            string: command-line flags with that prefix (``""``: ``--pool-size '8GB'``,
            ``"gpu-"``: the preload's ``--gpu-pool-size '8GB'``). Options set in dask config
            or the environment are named as they were set there either way.

        Returns
        -------
        str
            One line: what is wrong and what to change.

        Examples
        --------
        >>> from dask_gpu_interop import GPUMemoryPlugin, OptionError
        >>> try:
        ...     GPUMemoryPlugin(pool_size="lots")
        ... except OptionError as err:
        ...     print(err.message(flags="gpu-"))
        --gpu-pool-size 'lots': not a size; use bytes (1073741824), a unit ('8GB', ...
        """
        if not self.settings:
            return self.reason
        return self.reason.format_map({s.option: _Spelled(s, flags) for s in self.settings})

    def __str__(self) -> str:
        return self.message()


class OptionError(Worded, ValueError):
    """A memory option's value the plugin cannot use, or options that cannot go together.

    A ``ValueError`` (an option of the wrong type raises a subclass that is also a
    ``TypeError``). Raised on the client, before any worker is touched, by
    :class:`GPUMemoryPlugin`, :meth:`MemoryConfig.from_options`, :func:`cluster_client` and
    :func:`local_cluster`. The message names each option where the user set it: the keyword,
    the dask config key or the ``DASK_GPU_INTEROP__MEMORY__*`` environment variable;
    :meth:`message` says it as command-line flags instead.

    Attributes
    ----------
    settings : tuple of Setting
        Every option the reason names, the one with the bad value first: each with its
        ``option``, ``value`` and ``source``.

    See Also
    --------
    MemoryConfig.from_options : where the options are checked.

    Examples
    --------
    >>> from dask_gpu_interop import GPUMemoryPlugin, OptionError
    >>> try:
    ...     GPUMemoryPlugin(managed=True, async_alloc=True)
    ... except OptionError as err:
    ...     print(err.option, err.value, err.source)
    managed True given
    """

    @property
    def option(self) -> str:
        """The first option named, the one with the bad value (``"pool_size"``)."""
        return self.settings[0].option

    @property
    def value(self):
        """That option's value, as it was given."""
        return self.settings[0].value

    @property
    def source(self) -> str:
        """Where that value came from, ``"given"`` (the caller), ``"config"`` (a dask config
        key), ``"environment"`` (a ``DASK_*`` variable) or ``"default"`` (nobody)."""
        return self.settings[0].source


class OptionTypeError(OptionError, TypeError):
    """An option's value of the wrong type (a ``TypeError`` too, as Python's own are)."""


def literal(text: str) -> str:
    """``text`` inside a reason, as it is: braces that are not option fields."""
    return text.replace("{", "{{").replace("}", "}}")


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


def option_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in OPTIONS)


def config_defaults() -> dict:
    """``{"pool-size": None, ...}``: the defaults under ``gpu-interop.memory`` in dask config."""
    return {spec.key: spec.plain_default for spec in OPTIONS}

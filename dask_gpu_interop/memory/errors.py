"""The memory options' errors, each naming an option as its user set it, and the error a
worker's setup raises.

An option's value carries where it came from (:class:`Setting`): the caller (a keyword
argument or a command's flag), a dask config key, a ``DASK_*`` environment variable, or
nobody. A :class:`Worded` error's reason names options as fields (``{pool_size:=}``), spelled
when the message is asked for: ``pool_size='8GB'`` for keywords, ``--pool-size '8GB'`` for
flags, the key or the variable where it was set there. :class:`OptionError` is the memory
options' (raised on the client, before any worker is touched); :class:`GPUMemorySetupError`
is raised on a worker and travels back to the caller of ``register_plugin``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CONFIG_PREFIX = "gpu-interop.memory"  # the memory options' place in dask config

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



class GPUMemorySetupError(RuntimeError):
    """The plugin could not (or would not) set up a worker's memory resource.

    A ``RuntimeError``, raised on the worker while it sets the plugin up, and so by
    ``client.register_plugin`` on the client (or, with the preload, it stops the worker with
    the same message). The worker's previous resource is left as it was, and a registration
    that failed is taken back so that it can be retried. The message names the worker and
    says what to change: a size that does not fit the device, a framework asked for that is
    not installed, RMM missing where there is a GPU, or another owner of the memory (dask-cuda's
    ``rmm_*`` options, distributed-ucxx's ``rmm.pool-size``, another configuration with live
    buffers, PyTorch already on its own allocator), which ``force=True`` replaces.

    See Also
    --------
    OptionError : options refused on the client, before any worker is touched.

    Examples
    --------
    >>> from dask_gpu_interop import GPUMemoryPlugin, GPUMemorySetupError
    >>> try:
    ...     client.register_plugin(GPUMemoryPlugin(pool_size="4TB"))
    ... except GPUMemorySetupError as err:
    ...     print(err)  # pool_size asks for 3.64 TiB, more than the device has on ...
    """

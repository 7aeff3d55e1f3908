"""Click options for commands that start or reach a cluster: where to run, and the memory.

Applications built on the library (the examples, your own scripts) take the same options the
same way::

    @click.command()
    @cluster_options
    def main(cluster):
        with cluster_client(**cluster) as (client, device):
            ...

The memory flags are made from ``MemoryConfig``'s fields (``--pool-size``, ``--managed``,
...; the worker preload's are the same with ``--gpu-``), so they cannot drift from the plugin's
keyword arguments. A bad value is refused before anything starts, in one line that names the
flag (or the dask config key or environment variable, when the value came from there).
"""

from __future__ import annotations

import functools
import warnings

import click

from ..memory.config import OPTIONS, CheckedOptions, MemoryConfig
from ..memory.errors import OptionError
from .checks import DEVICES, PROTOCOLS, ClusterError, check_local
from .session import LocalOnlyWarning


def with_options(options: list):
    """A decorator that adds click ``options`` to a command, in the order listed (for a list
    of options shared by several commands)."""

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def memory_click_options(prefix: str = "") -> list:
    """One click option per memory option (``--{prefix}pool-size`` ...), unset by default."""
    options = []
    for spec in OPTIONS:
        if spec.kind.flag:
            declaration = f"{spec.flag(prefix)}/--no-{prefix}{spec.key}"
            options.append(click.option(declaration, spec.name, default=None, help=spec.help))
        else:
            options.append(click.option(
                spec.flag(prefix), spec.name, type=spec.kind.text, default=None, help=spec.help))
    return options


def given_memory(kwargs: dict) -> dict:
    """Pop the memory options out of a command's ``kwargs``: those given, by option name."""
    memory = {spec.name: kwargs.pop(spec.name, None) for spec in OPTIONS}
    return {name: value for name, value in memory.items() if value is not None}


def memory_options(prefix: str = ""):
    """Add the memory flags; the command receives ``memory``: the options given (a dict),
    already checked together (``MemoryConfig``), for ``GPUMemoryPlugin(**memory)``. The dict
    carries the configuration they were parsed into, which :func:`.cluster_client` and
    :func:`.local_cluster` use as it is (they parse a changed one again)."""

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            memory = given_memory(kwargs)
            checked = CheckedOptions(memory, check_memory(memory, prefix))
            return command(*args, memory=checked, **kwargs)

        return with_options(memory_click_options(prefix))(wrapper)

    return decorate


def check_memory(memory: dict, prefix: str = "") -> MemoryConfig:
    """``MemoryConfig.from_options(**memory)`` for options given as ``--{prefix}*`` flags; a
    bad one is a click usage error naming the flag (or the config key or environment variable
    that set it)."""
    try:
        return MemoryConfig.from_options(**memory)
    except OptionError as err:
        raise click.UsageError(err.message(flags=prefix)) from None


def check_plot_path(path: str, flag: str) -> None:
    """A usage error naming ``flag``, before any work, unless a plot can be written at
    ``path``: its folder exists and may be written, and matplotlib is installed."""
    import importlib.util
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a folder: give a file name, e.g. memory.png",
                                 param_hint=flag)
    if not os.path.isdir(folder):
        raise click.BadParameter(f"{path}: the folder {folder} does not exist",
                                 param_hint=flag)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{path}: the folder {folder} is not writable here",
                                 param_hint=flag)
    if importlib.util.find_spec("matplotlib") is None:
        raise click.BadParameter(
            "plotting needs matplotlib: pip install 'dask-gpu-interop[plot]'", param_hint=flag)


def _note_local_only(scheduler: str, **given) -> None:
    """A note, on standard error, for the options of a local cluster given with --scheduler:
    the running cluster keeps its own workers, and they would go unheeded without a word."""
    flags = {"n_workers": "--workers", "threads_per_worker": "--threads-per-worker",
             "processes": "--processes/--no-processes", "protocol": "--protocol"}
    named = [flags[name] for name, value in given.items() if value is not None]
    if named:
        verb = "is" if len(named) == 1 else "are"
        click.echo(f"note: {', '.join(named)} {verb} for a local cluster; the running cluster "
                   f"at {scheduler} keeps the workers it has", err=True)


def cluster_options(command):
    """Add --scheduler/--device/--protocol/--workers/--threads-per-worker/--processes, the
    memory flags and --memory-plot.

    The command receives ``cluster``: keyword arguments for :func:`.session.cluster_client`.
    """

    @click.option("--scheduler", default=None, metavar="ADDRESS",
                  help="Run on this running cluster instead of starting a local one.")
    @click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
                  help="gpu: cuDF/CuPy on GPUs; cpu: pandas/NumPy; auto: GPUs when present.")
    @click.option("--protocol", type=click.Choice(PROTOCOLS), default="tcp", show_default=True,
                  help="Communication between workers of a local cluster (ucx: NVLink).")
    @click.option("--workers", "n_workers", type=click.IntRange(min=1), default=None,
                  help="Workers of a local cluster (default: one per GPU, or up to 4 on CPUs).")
    @click.option("--threads-per-worker", type=click.IntRange(min=1), default=None,
                  help="Threads of each local worker (default: 1 per GPU worker unless the "
                       "command sets more; the cores shared out on CPUs).")
    @click.option("--processes/--no-processes", default=None,
                  help="GPU workers of a local cluster in processes of their own (default: "
                       "one GPU's worker runs in the command's process; several GPUs' always "
                       "in processes).")
    @memory_options()
    @click.option("--memory-plot", type=click.Path(dir_okay=False), default=None, metavar="PNG",
                  help="Plot each worker's device memory over the run into this PNG.")
    @functools.wraps(command)
    def wrapper(*args, scheduler, device, protocol, n_workers, threads_per_worker, processes,
                memory, memory_plot, **kwargs):
        if scheduler is None:
            try:
                check_local(device, protocol, n_workers=n_workers, processes=processes)
            except ClusterError as err:
                raise click.UsageError(err.message(flags="")) from None
        else:
            _note_local_only(scheduler, n_workers=n_workers,
                             threads_per_worker=threads_per_worker, processes=processes,
                             protocol=None if protocol == "tcp" else protocol)
        if memory_plot is not None:
            check_plot_path(memory_plot, "--memory-plot")
        cluster = dict(
            scheduler=scheduler, device=device, protocol=protocol, n_workers=n_workers,
            threads_per_worker=threads_per_worker, memory=memory or None,
            memory_plot=memory_plot, processes=processes,
        )
        try:
            with warnings.catch_warnings():  # the note above said it in the flags' words
                warnings.simplefilter("ignore", LocalOnlyWarning)
                return command(*args, cluster=cluster, **kwargs)
        except ClusterError as err:
            raise click.ClickException(err.message(flags="")) from None

    return wrapper


#: The flags of :func:`cluster_options` that say which local cluster starts, and the
#: keyword of :func:`~dask_gpu_interop.prepare_local_cluster` each gives.
_PREPARED_BY = {"--scheduler": "scheduler", "--device": "device", "--protocol": "protocol",
                "--workers": "n_workers"}


def prepare_from_command_line(args: list[str] | None = None) -> bool:
    """:func:`~dask_gpu_interop.prepare_local_cluster` for the local cluster that a command
    line of :func:`cluster_options` asks for (``sys.argv[1:]`` by default), read before the
    command imports the rest of what it needs: call it first in the command's entry point, so
    that what it starts (the fork server of the worker processes; over UCX this process's UCX
    setup) works while the program imports its modules, plans its input and checks it.

    Nothing starts for ``--help``, a running cluster (``--scheduler``) or a value that
    :func:`cluster_options` would refuse: the command's own parsing then says what is wrong.

    Returns
    -------
    bool
        Whether something was started, as :func:`~dask_gpu_interop.prepare_local_cluster`
        says.

    Examples
    --------
    >>> # the entry point of a command, before its own imports
    >>> from dask_gpu_interop.cluster.options import prepare_from_command_line
    >>> prepare_from_command_line(["--device", "gpu", "--protocol", "ucx"])  # doctest: +SKIP
    True
    """
    import sys

    args = list(sys.argv[1:] if args is None else args)
    given: dict = {}
    position = 0
    while position < len(args):
        arg = args[position]
        if arg == "--":
            break
        if arg in ("--help", "-h"):
            return False
        flag, equals, value = arg.partition("=")
        if flag in _PREPARED_BY:
            if not equals:
                if position + 1 == len(args):
                    return False
                position += 1
                value = args[position]
            given[_PREPARED_BY[flag]] = value
        elif arg in ("--processes", "--no-processes"):
            given["processes"] = arg == "--processes"
        position += 1
    if given.get("device", "auto") not in DEVICES or given.get("protocol", "tcp") not in PROTOCOLS:
        return False
    if "n_workers" in given:
        if not given["n_workers"].isdigit() or int(given["n_workers"]) < 1:
            return False
        given["n_workers"] = int(given["n_workers"])
    from .local import prepare_local_cluster

    return prepare_local_cluster(**given)

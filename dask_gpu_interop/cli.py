"""``dask-gpu-interop``: the library's commands (also ``python -m dask_gpu_interop.cli``).

    dask-gpu-interop report --scheduler ADDRESS [--watch 2] [--json]   the memory report
    dask-gpu-interop config                                            the memory options
    dask-gpu-interop doctor [--scheduler ADDRESS]                      what to fix first
    dask-gpu-interop tls make DIR [--hostname node1 ...]               a CA and certificates
    dask-gpu-interop tls env DIR --role worker                         export lines for a shell
    dask-gpu-interop tls show DIR                                      names and expiry dates
    dask-gpu-interop wait-for-workers --scheduler-file F -n 4
    dask-gpu-interop memory-plot --scheduler ADDR --png memory.png [--duration 600]

Also ``python -m dask_gpu_interop``. The examples (``python -m examples.mortgage``, ...) live
beside the package, not in it.
"""

from __future__ import annotations

import json
import shlex
import time

import click

from . import tls as tls_mod
from ._client import cluster_workers
from .cluster import ClusterError
from .cluster.options import with_options
from .cluster.running import connect as connect_scheduler


@click.group()
@click.version_option(package_name="dask-gpu-interop")
def main():
    """One coherent GPU data-science machine out of a Dask cluster of GPUs."""


CONNECTION_OPTIONS = [
    click.option("--scheduler", default=None, metavar="ADDRESS", help="The scheduler's address."),
    click.option("--scheduler-file", default=None, type=click.Path(dir_okay=False),
                 help="The file `dask scheduler --scheduler-file` wrote."),
    click.option("--tls", "tls_dir", default=None, type=click.Path(file_okay=False),
                 help="Directory from `tls make`: connect with its client certificate "
                      "(otherwise dask config applies, e.g. DASK_CONFIG=DIR/client.yaml)."),
]


def connect(scheduler, scheduler_file, tls_dir, timeout):
    """:func:`.cluster.running.connect` with the values of ``CONNECTION_OPTIONS``: a Client,
    with the client certificate of ``tls_dir``; a click error that says what to change."""
    if (scheduler is None) == (scheduler_file is None):
        raise click.UsageError("give one of --scheduler ADDRESS or --scheduler-file FILE")
    try:
        security = tls_mod.security(tls_dir, "client") if tls_dir else None
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    try:
        return connect_scheduler(
            scheduler, scheduler_file=scheduler_file, security=security, timeout=timeout)
    except ClusterError as err:
        raise click.ClickException(err.message(flags="")) from None


@main.command()
@with_options(CONNECTION_OPTIONS)
@click.option("--watch", type=click.FloatRange(min=0.5), default=None, metavar="SECONDS",
              help="Refresh every SECONDS until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def report(scheduler, scheduler_file, tls_dir, watch, as_json):
    """Print the GPU memory report of a running cluster."""
    with connect(scheduler, scheduler_file, tls_dir, timeout="10s") as client:
        try:
            _report(client, watch, as_json)
        except KeyboardInterrupt:  # how a watch ends
            if not watch:
                raise


def _report(client, watch, as_json) -> None:
    from .memory.report import memory_report

    while True:
        try:
            rep = memory_report(client)
        except (OSError, TimeoutError) as err:  # the scheduler went away meanwhile
            raise click.ClickException(
                f"the scheduler at {client.scheduler.address} stopped answering "
                f"({type(err).__name__}): check that the cluster still runs") from None
        if as_json:
            click.echo(json.dumps(rep, default=str, indent=1))
        else:
            if watch:
                click.clear()
                click.echo(time.strftime("%H:%M:%S"))
            click.echo(str(rep))
        if not watch:
            return
        time.sleep(watch)


@main.command()
@with_options(CONNECTION_OPTIONS)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
def doctor(scheduler, scheduler_file, tls_dir, as_json):
    """Check this machine (and every worker of a cluster): driver, GPUs, the GPU stack and
    whether each of its libraries loads, what shares a worker's memory and each worker's memory
    plugin, UCX, and combinations known to break; a verdict and a fix each."""
    from . import doctor as doctor_mod

    if scheduler is None and scheduler_file is None:
        found = doctor_mod.report()
    else:
        with connect(scheduler, scheduler_file, tls_dir, timeout="10s") as client:
            found = doctor_mod.report(client)
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    for line in doctor_mod.lines(found):
        click.echo(line)
    if any(item["verdict"] == doctor_mod.FAIL for items in found.values() for item in items):
        raise SystemExit(1)


@main.command("config")
def config_command():
    """Print the memory options as dask config YAML, with their defaults and help."""
    from .memory.config import OPTIONS

    click.echo("# Set in a dask config file, or by environment, e.g.")
    click.echo("# DASK_GPU_INTEROP__MEMORY__POOL_SIZE=0.8; the same options as GPUMemoryPlugin's.")
    click.echo("gpu-interop:\n  memory:")
    for spec in OPTIONS:
        for line in _wrap(spec.help, 92):
            click.echo(f"    # {line}")
        click.echo(f"    {spec.key}: {json.dumps(spec.plain_default)}")


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)


@main.group("tls")
def tls():
    """TLS for a cluster: a private CA and certificates for scheduler, workers and client."""


@tls.command("make")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--hostname", "hostnames", multiple=True, metavar="NAME",
              help="A name or IP the scheduler/workers are reached at (repeatable). "
                   "localhost and 127.0.0.1 are always included.")
@click.option("--days", type=click.IntRange(min=1), default=tls_mod.DEFAULT_DAYS, show_default=True,
              help="Validity of the certificates.")
@click.option("--dashboard-https", is_flag=True,
              help="The role configs also serve dashboards and /metrics over HTTPS.")
@click.option("--keep-ca-key", is_flag=True,
              help="Also write the CA's private key (ca-key.pem); by default it is discarded.")
@click.option("--force", is_flag=True, help="Replace certificates already in DIRECTORY.")
def tls_make(directory, hostnames, days, dashboard_https, keep_ca_key, force):
    """Make a CA and certificates for scheduler, workers and client in DIRECTORY."""
    try:
        out = tls_mod.make_certificates(
            directory, hostnames=hostnames, days=days, overwrite=force,
            keep_ca_key=keep_ca_key, dashboard=dashboard_https,
        )
    except (FileExistsError, ValueError, ImportError) as err:
        raise click.ClickException(str(err)) from None
    except OSError as err:  # the folder changed under it, or the disk is full
        raise click.ClickException(f"the certificates cannot be written in {directory} "
                                   f"({err.strerror}): give another folder") from None
    click.echo(f"certificates in {out.directory} (valid {days} days)")
    click.echo(f"  scheduler/workers: DASK_CONFIG={out.directory}/scheduler.yaml (worker.yaml)")
    click.echo(f"  client:            DASK_CONFIG={out.directory}/client.yaml  "
               f"or  Client(address, security=dask_gpu_interop.tls.security({str(out.directory)!r}))")
    click.echo("  copy ca.pem and each role's .pem/-key.pem only to the machines of that role")


@tls.command("env")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option("--role", type=click.Choice(tls_mod.ROLES), default="client", show_default=True)
@click.option("--dashboard-https", is_flag=True, help="Also the dashboards' HTTPS settings.")
def tls_env(directory, role, dashboard_https):
    """Print `export DASK_...` lines for ROLE: eval "$(... tls env DIR --role worker)"."""
    try:
        env = tls_mod.tls_env(directory, role, dashboard=dashboard_https)
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    for key, value in env.items():
        click.echo(f"export {key}={shlex.quote(value)}")


@tls.command("show")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
def tls_show(directory):
    """Print each certificate's subject, names and expiry."""
    try:
        rows = tls_mod.describe(directory)
    except (FileNotFoundError, ImportError) as err:
        raise click.ClickException(str(err)) from None
    for row in rows:
        warn = "  EXPIRED" if row["days_left"] < 0 else ""
        names = ", ".join(row["names"]) or "-"
        click.echo(f"{row['role']:<10} {row['subject']:<45} expires {row['expires']}"
                   f" ({row['days_left']} days){warn}  names: {names}")


@main.command("wait-for-workers")
@with_options(CONNECTION_OPTIONS)
@click.option("-n", "--workers", "n_workers", type=click.IntRange(min=1), required=True,
              help="How many workers to wait for.")
@click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds to wait, for the scheduler and then the workers.")
def wait_for_workers(scheduler, scheduler_file, tls_dir, n_workers, timeout):
    """Wait until the cluster has N workers (exit status 1 on timeout)."""
    deadline = time.monotonic() + timeout
    if scheduler_file is not None:
        _wait_for_scheduler_file(scheduler_file, timeout, deadline)
    try:
        with connect(scheduler, scheduler_file, tls_dir, f"{timeout}s") as client:
            left = max(1.0, deadline - time.monotonic())
            try:
                client.wait_for_workers(n_workers, timeout=left)
            except TimeoutError:
                joined = len(cluster_workers(client))
                raise click.ClickException(
                    f"only {joined} of {n_workers} workers joined within {timeout:g} s: start "
                    "more, or wait longer (--timeout)") from None
            count = len(cluster_workers(client))
    except (OSError, TimeoutError) as err:
        raise click.ClickException(f"{type(err).__name__}: {err}") from None
    click.echo(f"{count} workers")


def _wait_for_scheduler_file(scheduler_file: str, timeout: float, deadline: float) -> None:
    """Until the scheduler has written ``scheduler_file``: said at once where it is not there
    yet, a click error where it cannot come (its folder does not exist) or did not come."""
    import os

    if os.path.exists(scheduler_file):
        return
    folder = os.path.dirname(os.path.abspath(scheduler_file))
    if not os.path.isdir(folder):
        raise click.ClickException(
            f"{scheduler_file}: the folder {folder} does not exist, so no scheduler writes its "
            "file there: check the path (the one given to dask scheduler --scheduler-file)")
    click.echo(f"waiting up to {timeout:g} s for the scheduler to write {scheduler_file}",
               err=True)
    while not os.path.exists(scheduler_file):
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"no scheduler file {scheduler_file} after {timeout:g} s: start the scheduler "
                f"with --scheduler-file {scheduler_file}, or check the path")
        time.sleep(0.5)


@main.command("memory-plot")
@with_options(CONNECTION_OPTIONS)
@click.option("--png", required=True, type=click.Path(dir_okay=False), help="Where to write the plot.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Seconds to record (default: until interrupted with Ctrl-C).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the samples as CSV.")
def memory_plot(scheduler, scheduler_file, tls_dir, png, interval, duration, csv_path):
    """Record each worker's GPU memory of a running cluster and plot it over time."""
    from .cluster.options import check_plot_path
    from .memory.timeline import MemoryTimeline, gpu_statuses

    check_plot_path(png, "--png")
    if csv_path:
        check_plot_path(csv_path, "--csv")

    with connect(scheduler, scheduler_file, tls_dir, "10s") as client:
        timeline = MemoryTimeline(client, interval=interval)
        with timeline:
            click.echo(f"recording every {interval:g} s" + ("" if duration else "; Ctrl-C to stop"))
            try:
                if duration:
                    time.sleep(duration)
                else:
                    _sleep_forever()
            except KeyboardInterrupt:
                pass
    if csv_path:
        timeline.to_frame().to_csv(csv_path, index=False)
    if timeline.plot(png) is None:
        statuses = gpu_statuses(timeline.to_frame())
        click.echo(f"{len(timeline.samples)} samples, none with GPU memory (the workers report: "
                   f"{statuses}): no plot written")
        return
    click.echo(f"{len(timeline.samples)} samples -> {png}")


def _sleep_forever():
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(prog_name="python -m dask_gpu_interop.cli")

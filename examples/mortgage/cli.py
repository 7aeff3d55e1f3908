"""``python -m examples.mortgage``: the whole job with no arguments; ``generate`` and ``etl``.

    python -m examples.mortgage                        # small synthetic dataset, local cluster
    python -m examples.mortgage --data DIR --device gpu --protocol ucx
    python -m examples.mortgage generate --out DIR --years 2000-2016 --size 10GB
    python -m examples.mortgage etl --perf 'DIR/perf/*' --acq DIR/acq --out features.parquet
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time

import click
from dask.utils import format_bytes, parse_bytes

from dask_gpu_interop.options import cluster_options

from . import etl as etl_mod
from . import generate as gen
from . import read, train

BAD_ROWS = click.Choice(read.POLICIES)


def _years(ctx, param, value):
    try:
        return gen.parse_years(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _size(ctx, param, value):
    if value is None:
        return None
    try:
        size = parse_bytes(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: write a size such as 500MB or 10GB ({exc})") from None
    if size <= 0:
        raise click.BadParameter(f"{value!r}: must be positive")
    return size


def _progress() -> bool:
    return sys.stdout.isatty()


def _spec(years, loans_per_quarter, size, seed, end_year, loans_per_part) -> gen.Spec:
    if size is not None:
        loans_per_quarter = gen.loans_for_size(size, *years, end_year=end_year, seed=seed)
    try:
        return gen.Spec(*years, loans_per_quarter=loans_per_quarter, seed=seed,
                        end_year=end_year, loans_per_part=loans_per_part)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _generated_lines(result: gen.Generated) -> list[str]:
    return [f"generated {format_bytes(result.bytes)} in {result.seconds:.2f} s: "
            f"{result.loans:,} loans, {result.rows:,} monthly rows, "
            f"{len(result.performance)} performance files, {len(result.acquisition)} "
            f"acquisition files, in {result.directory}"]


scale_options = [
    click.option("--years", default="2006-2007", show_default=True, callback=_years,
                 help="Vintages: a year or a range, e.g. 2000-2016."),
    click.option("--loans-per-quarter", type=click.IntRange(min=1), default=500,
                 show_default=True, help="Loans per quarter (about 300,000 at full scale)."),
    click.option("--size", default=None, callback=_size,
                 help="Aim at this much data (e.g. 10GB) instead of --loans-per-quarter."),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--end-year", type=int, default=None,
                 help="Last reporting year (default: the last vintage + 3)."),
    click.option("--loans-per-part", type=click.IntRange(min=1), default=10_000,
                 show_default=True, help="Loans per performance file part (memory per task)."),
]


def _apply(options):
    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


etl_options = [
    click.option("--partition-size", default=None,
                 help="Bytes of text per task (files are cut at loan boundaries) [default: "
                      f"{etl_mod.PARTITION_SIZES['gpu']} on GPUs, "
                      f"{etl_mod.PARTITION_SIZES['cpu']} on CPUs]"),
    click.option("--bad-rows", type=BAD_ROWS, default="error", show_default=True,
                 help="Rows that cannot be read: stop (error), drop with a warning, or drop "
                      "and count (skip)."),
]


@click.group(invoke_without_command=True)
@cluster_options
@_apply(scale_options)
@_apply(etl_options)
@click.option("--data", type=click.Path(exists=True, file_okay=False), default=None,
              help="Use these files (perf/, acq/, names.csv; synthetic or real) instead of "
                   "generating.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Generate here and keep the files (default: a temporary directory).")
@click.option("--rounds", type=click.IntRange(min=1), default=train.ROUNDS, show_default=True)
@click.option("--xgb-param", "xgb_params", multiple=True, metavar="KEY=VALUE",
              help="An XGBoost parameter over the notebook's (repeatable), e.g. "
                   "grow_policy=depthwise: faster on several GPUs.")
@click.option("--holdout", default=None, metavar="YYYYQn",
              help="Quarter to test on (default: the latest).")
@click.option("--features-out", type=click.Path(), default=None,
              help="Also write the feature table here (a Parquet directory).")
@click.option("--model-out", type=click.Path(dir_okay=False), default=None,
              help="Save the trained model here (XGBoost JSON).")
@click.pass_context
def mortgage(ctx, cluster, years, loans_per_quarter, size, seed, end_year, loans_per_part,
             partition_size, bad_rows, data, workdir, rounds, xgb_params, holdout, features_out,
             model_out):
    """The Fannie Mae mortgage ETL and XGBoost training on Dask (cuDF on GPUs, pandas on CPUs).

    With no sub-command: generate a small dataset (or use --data), start a local cluster (or
    use --scheduler), run the ETL and the training, and print the stage times, rows/s, the test
    AUC and each worker's peak memory. Options before a sub-command apply only to this job.
    """
    if ctx.invoked_subcommand is not None:
        return
    from dask_gpu_interop import cluster_client

    from . import job

    expected = _check_device(cluster)
    try:
        params = train.parse_params(xgb_params)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--xgb-param") from None
    spec = None if data else _spec(years, loans_per_quarter, size, seed, end_year,
                                   loans_per_part)
    the_plan = _plan(*_dataset(data), expected, partition_size) if data else None
    if cluster.get("scheduler") and not (data or workdir):
        click.echo("note: the workers write the generated files: with --scheduler, pass a "
                   "--workdir that they can see (or --data)", err=True)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        directory = data or workdir or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="mortgage-"))
        client, device = stack.enter_context(cluster_client(**cluster))
        click.echo(f"cluster: {len(client.scheduler_info()['workers'])} workers, device={device}")
        if the_plan is not None and device != expected and partition_size is None:
            the_plan = _plan(*_dataset(data), device, None)  # the cluster's device's default
        generate_seconds = None
        if spec is not None:
            click.echo(f"generating {len(spec.quarters)} quarters x "
                       f"{spec.loans_per_quarter:,} loans ...")
            try:
                made = gen.generate(directory, spec, overwrite=workdir is not None,
                                    progress=_progress())
            except FileExistsError as exc:
                raise click.UsageError(str(exc)) from None
            generate_seconds = made.seconds
            for line in _generated_lines(made):
                click.echo(line)
            the_plan = _plan(*_dataset(directory), device, partition_size)
        try:
            result = job.run(client, device, the_plan, None, bad_rows=bad_rows, rounds=rounds,
                             holdout=holdout, params=params, progress=_progress(),
                             echo=click.echo)
        except (read.BadRowsError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        if generate_seconds is not None:
            result.stages = {"generate": generate_seconds, **result.stages}
        if features_out:
            result.etl.frame.to_parquet(features_out, write_index=False)
            click.echo(f"feature table written to {features_out}")
        if model_out:
            result.training.booster.save_model(model_out)
            click.echo(f"model written to {model_out}")
        for line in result.lines():
            click.echo(line)
    click.echo(f"total: {time.perf_counter() - started:.2f} s")


def _check_device(cluster: dict) -> str:
    """The device asked for ("gpu" or "cpu"); fails before any work when it is not there (with
    what to do)."""
    from dask_gpu_interop import resolve_device

    try:
        return resolve_device(cluster.get("device", "auto"))
    except (RuntimeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def _plan(perf, acq, names, device, partition_size):
    try:
        return etl_mod.plan(perf, acq, names, etl_mod.partition_size_for(device, partition_size))
    except (FileNotFoundError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def _dataset(directory):
    try:
        return etl_mod.find_dataset(directory)
    except FileNotFoundError as exc:
        raise click.UsageError(str(exc)) from None


@mortgage.command()
@click.option("--out", "out", type=click.Path(file_okay=False), required=True,
              help="Directory for perf/, acq/ and names.csv.")
@_apply(scale_options)
@click.option("--overwrite", is_flag=True, help="Replace the files of an earlier dataset there.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Generate on this running cluster (its workers must see --out).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes of the local CPU cluster (default: one per core).")
def generate(out, years, loans_per_quarter, size, seed, end_year, loans_per_part, overwrite,
             scheduler, workers):
    """Write a synthetic dataset in the real files' layout, one task per file, in parallel."""
    from dask_gpu_interop import cluster_client

    spec = _spec(years, loans_per_quarter, size, seed, end_year, loans_per_part)
    try:
        gen.check_directory(out, overwrite)
    except FileExistsError as exc:
        raise click.UsageError(str(exc)) from None
    n_workers = workers or (None if scheduler else os.cpu_count())
    with cluster_client(scheduler, device="cpu", n_workers=n_workers, threads_per_worker=1):
        made = gen.generate(out, spec, overwrite=overwrite, progress=_progress())
    for line in _generated_lines(made):
        click.echo(line)


@mortgage.command()
@cluster_options
@click.option("--perf", required=True, help="Performance files: a file, a directory or a glob.")
@click.option("--acq", required=True, help="Acquisition files: a file, a directory or a glob.")
@click.option("--names", type=click.Path(exists=True, dir_okay=False), default=None,
              help="names.csv (seller name|short name, with a header).")
@click.option("--out", required=True, type=click.Path(),
              help="Where to write the feature table (a directory of Parquet files).")
@_apply(etl_options)
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists.")
def etl(cluster, perf, acq, names, out, partition_size, bad_rows, overwrite):
    """Write the feature table: the 45 features (float32) and delinquency_12 (int32)."""
    from dask_gpu_interop import cluster_client

    expected = _check_device(cluster)
    the_plan = _plan(perf, acq, names, expected, partition_size)
    try:
        etl_mod.check_output(out, overwrite)
    except FileExistsError as exc:
        raise click.UsageError(str(exc)) from None
    with cluster_client(**cluster) as (client, device):
        click.echo(f"cluster: {len(client.scheduler_info()['workers'])} workers, device={device}")
        if device != expected and partition_size is None:
            the_plan = _plan(perf, acq, names, device, None)  # the cluster's device's default
        try:
            result = etl_mod.write_plan(out, the_plan, device=device, bad_rows=bad_rows,
                                        overwrite=overwrite, progress=_progress())
        except (read.BadRowsError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"ETL: {result.summary()}")
    click.echo(f"feature table written to {os.path.abspath(out)}")

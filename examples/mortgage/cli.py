"""``python -m examples.mortgage``: the whole job with no arguments; ``generate`` and ``etl``.

    python -m examples.mortgage                        # small generated dataset, local cluster
    python -m examples.mortgage --data DIR --device gpu --protocol ucx
    python -m examples.mortgage generate --out DIR --size 10GB [--layout current]
    python -m examples.mortgage etl --data DIR --out features.parquet
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import click
from click.core import ParameterSource
from dask.utils import format_bytes, parse_bytes

from dask_gpu_interop import (
    ClusterError,
    check_workers_import,
    cluster_client,
    cluster_workers,
    gpu_count,
    import_in_background,
    prepare_local_cluster,
    resolve_device,
    without_xgboost_rank_lines,
    worker_starts,
)
from dask_gpu_interop.cluster.options import cluster_options, with_options
from dask_gpu_interop.worker.gpu_workers import environ as gpu_worker_environ

from ..command import EndsInOneLine, UserPath
from . import (
    cpu_workers,
    figures,
    files,
    loan_join,
    output,
    placement,
    read,
    schema,
    train,
    worker_logs,
)
from .progress import stage_line

# The ETL (dask.dataframe) and the test data's generator (pandas, pyarrow) are imported where a
# command runs, so that --help answers at once.


def _bad(param_hint, check, *args):
    """``check(*args)``, its ValueError as a bad value of the option ``param_hint``."""
    try:
        return check(*args)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=param_hint) from None


def _callback(convert):
    """A click callback that converts a given value, its ValueError as a bad value."""
    return lambda ctx, param, value: None if value is None else _bad(None, convert, value)


def _size(value: str) -> int:
    try:
        size = parse_bytes(value)
    except ValueError as exc:
        raise ValueError(f"{value!r}: write a size such as 500MB or 10GB ({exc})") from None
    if size <= 0:
        raise ValueError(f"{value!r}: must be positive")
    return size


def _usage(check, *args, **kwargs):
    """``check(*args, **kwargs)``, its ValueError or FileExistsError as a usage error."""
    try:
        return check(*args, **kwargs)
    except (ValueError, FileExistsError) as exc:
        raise click.UsageError(str(exc)) from None


def _spec(years, loans_per_quarter, size, seed, end_year, loans_per_part, layout):
    from .testdata import generate as gen

    if size is not None:
        loans_per_quarter = _bad("--size", gen.loans_for_size, size, *years, end_year, seed,
                                 layout)
    return _usage(gen.Spec, *years, loans_per_quarter=loans_per_quarter, seed=seed,
                  end_year=end_year, loans_per_part=loans_per_part)


def _text_of(spec, layout: str) -> tuple[int, bool]:
    """``(bytes, exact)``: about the bytes of text generating ``spec`` makes (at most the disk
    it needs), estimated on a sample; or, where a bound without the sample is enough to know
    that one GPU runs it, that bound (``exact`` False)."""
    from .testdata import generate as gen

    bound = gen.space_bound(spec, layout)
    if bound < ONE_GPU_TEXT:
        return bound, False
    return gen.space_needed(spec, layout), True


def _check_space(directory: str, spec, layout: str) -> None:
    from .testdata import generate as gen

    try:
        gen.check_space(directory, spec, layout)
    except OSError as exc:
        raise click.UsageError(str(exc)) from None


def _since_process_start() -> float:
    """Seconds since this process started (Python's start, the imports). On Linux from the
    kernel's clock since boot (to a hundredth of a second): a process's creation time as a
    date is the boot's date, whole seconds, plus that clock, and can be off by a second."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
            since_boot = float(uptime.read().split()[0])
        return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


def _check_workdir(workdir: str, overwrite: bool) -> None:
    """The job may generate into ``workdir``: new, empty, or an earlier generated dataset with
    ``overwrite`` (a usage error otherwise, saying how to use that dataset instead)."""
    try:
        output.check(workdir, what="generated dataset", overwrite=overwrite)
    except FileExistsError as exc:
        use = (f" (or --data {workdir} to use it as it is)"
               if output.held(workdir) == "generated dataset" else "")
        raise click.UsageError(f"{exc}{use}") from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _generated(result) -> str:
    return (f"generated {format_bytes(result.bytes)} in {result.seconds:.2f} s: "
            f"{result.loans:,} loans, {result.rows:,} monthly rows, {result.layout} layout, "
            f"in {result.directory}")


def _generate(directory, spec, layout, overwrite, processes):
    """The job's dataset: with ``processes``, in a pool of local processes (while the cluster
    starts, which a local cluster's workers could not do yet); else on the cluster."""
    from .testdata import generate as gen

    return gen.generate(directory, spec, layout=layout, overwrite=overwrite,
                        progress=not processes, processes=processes)


class _Group(EndsInOneLine, click.Group):
    """The job's group: a path where a sub-command should be is an unquoted glob; Ctrl-C and
    a full disk end any command in one line (what it had begun to write is removed as the
    error passes through ``output.Staged``)."""

    unfinished = "outputs"
    elsewhere = "write to another place"

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and os.path.exists(args[0]):
            raise click.UsageError(
                f"{args[0]!r} is not a command: --data takes one path, and the shell expanded a "
                "glob into several; quote the glob (--data 'DIR/*') or give the directory")
        return super().resolve_command(ctx, args)


scale_options = [
    click.option("--years", default="2006-2007", show_default=True,
                 callback=_callback(schema.parse_years),
                 help="Vintages: a year or a range, e.g. 2000-2016."),
    click.option("--loans-per-quarter", type=click.IntRange(min=1), default=500,
                 show_default=True, help="Loans per quarter (about 300,000 at full scale)."),
    click.option("--size", default=None, callback=_callback(_size),
                 help="Aim at this much data (e.g. 10GB) instead of --loans-per-quarter."),
    click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True),
    click.option("--end-year", type=int, default=None,
                 help="Last reporting year (default: the last vintage + 3)."),
    click.option("--loans-per-part", type=click.IntRange(min=1), default=10_000,
                 show_default=True, help="Loans per file part the generator writes at once."),
]
layout_option = click.option(
    "--layout", type=click.Choice(schema.DATASET_LAYOUTS), default="classic", show_default=True,
    help="classic: Performance_*/Acquisition_* files; current: one 108-column file a quarter.")
etl_options = [
    click.option("--partition-size", default=None,
                 callback=_callback(lambda value: files.partition_size_for("cpu", value)),
                 help="Bytes of text per task at most (small files packed, large ones cut at "
                      "loan boundaries, then into a multiple of the cluster's threads) "
                      f"[default: {files.PARTITION_SIZES['gpu']} on GPUs, "
                      f"{files.PARTITION_SIZES['cpu']} on CPUs]"),
    click.option("--bad-rows", type=click.Choice(read.POLICIES), default="error",
                 show_default=True,
                 help="Rows that cannot be read: stop (error), drop with a warning, or drop "
                      "and count (skip)."),
]
join_option = click.option(
    "--join", type=click.Choice(loan_join.JOINS), default=loan_join.DEFAULT, show_default=True,
    help="Classic layout: how performance rows meet their acquisition rows. quarter: each "
         "partition with its quarter's acquisition file (no data moves; a loan whose "
         "acquisition row is in another quarter's file gets -1). loan: both sides shuffled on "
         "loan_id between the workers with the library's all-to-all, whatever file holds a "
         "loan's row; dask: the same with dask's own shuffle. loan and dask hold the "
         "performance rows in the workers' memory until the shuffle ends (spilled to host "
         "memory by GPU workers where they must).")
json_option = click.option(
    "--json", "json_path", type=UserPath(dir_okay=False), default=None,
    help="Also write the run's figures to this file as JSON (stage seconds, the ETL's rows, "
         "bytes and partitions, ...); it replaces only an earlier figures file.")


def _nothing_before(ctx, command: str) -> None:
    """A usage error for the job's options given before a sub-command: the sub-command would
    run without them (``--data D etl`` would say that no data was given)."""
    given = [param.opts[0] for param in ctx.command.params
             if ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(
            f"{' '.join(given)} given before {command!r}: a command's options go after it "
            f"(python -m examples.mortgage {command} {' '.join(given)} ...); before a command "
            "they are the whole job's")


def _not_the_device(params: dict) -> None:
    """ValueError for XGBoost's ``device`` among the parameters: training sets it from the
    cluster's device, and would replace the one given without a word."""
    if "device" in params:
        raise ValueError(f"device={params['device']}: XGBoost trains on the workers' device, "
                         "which --device chooses (gpu or cpu); leave device out")


def _check_training(params: dict) -> None:
    """ValueError, saying why, for parameters the job cannot train or score with, which
    XGBoost would refuse only after the ETL: the job trains on XGBoost's quantized matrix
    (``QuantileDMatrix``) and reports the test AUC. Those it knows are told by name;
    then, once ``train.check_params`` has checked the names, :func:`_check_quantized` runs one
    round on a tiny quantized matrix, before any work."""
    method = params.get("tree_method")
    if method is not None and method not in ("hist", "auto"):
        raise ValueError(
            f"tree_method={method}: the job trains on XGBoost's quantized matrix "
            "(QuantileDMatrix), which only the hist method takes; leave tree_method out "
            "(hist)")
    if params.get("booster", "gbtree") not in ("gbtree", "dart"):
        raise ValueError(
            f"booster={params['booster']}: the job trains on XGBoost's quantized matrix "
            "(QuantileDMatrix), which only tree boosters take; leave booster out (gbtree), "
            "or give dart")
    metric = params.get("eval_metric")
    metrics = metric if isinstance(metric, list) else [metric]
    if metric is not None and "auc" not in metrics:
        raise ValueError(
            f"eval_metric={metric}: the job scores the model by its test AUC, which XGBoost "
            "computes as the metric auc; leave eval_metric out (auc), or give a list that "
            """holds it (--xgb-param 'eval_metric=["auc","logloss"]')""")


def _check_quantized(params: dict) -> None:
    """ValueError, with XGBoost's reason, unless one round trains on a tiny quantized matrix
    with ``params`` over the notebook's."""
    if not params:  # nothing to check: XGBoost is imported while the cluster starts
        return
    import warnings

    import numpy as np
    import xgboost

    rng = np.random.default_rng(0)
    tiny = xgboost.QuantileDMatrix(rng.random((8, 2), dtype=np.float32),
                                   label=np.arange(8) % 2)
    given = ", ".join(f"{key}={value}" for key, value in params.items())
    try:
        with warnings.catch_warnings():  # unknown names: refused already, by name
            warnings.simplefilter("ignore")
            xgboost.train({**train.PARAMS, **params, "device": "cpu"}, tiny, 1,
                          evals=[(tiny, "test")], verbose_eval=False)
    except xgboost.core.XGBoostError as exc:
        reason = re.sub(r"^\[[\d:]+\] \S+: ", "", str(exc).strip().splitlines()[0])
        raise ValueError(f"{given}: XGBoost cannot train the job's quantized matrix with it "
                         f"({reason})") from None


# What the job's models hold, so that --overwrite replaces a model it wrote and never another.
MODEL_MARK = ("written_by", "examples.mortgage")


def _is_our_model(path: str) -> bool:
    """Whether ``path`` holds a model an earlier run of the job wrote."""
    import xgboost

    try:
        return xgboost.Booster(model_file=path).attr(MODEL_MARK[0]) == MODEL_MARK[1]
    except xgboost.core.XGBoostError:
        return False


def _separate_outputs(outputs) -> None:
    """A usage error where two outputs (``(option, path, is a directory)``) name one path, or
    one lies inside a directory output, which is written and replaced whole."""
    given = [(option, path, os.path.realpath(path), folder)
             for option, path, folder in outputs if path]
    for option, path, real, _ in given:
        for other, other_path, other_real, folder in given:
            if other == option:
                continue
            if real == other_real:
                raise click.UsageError(f"{path} is given to both {option} and {other}: give "
                                       "each output a path of its own")
            if folder and os.path.commonpath([real, other_real]) == other_real:
                raise click.UsageError(
                    f"{option} {path} lies inside {other} {other_path}, a directory the "
                    "command writes (and replaces) whole: put it elsewhere")


def _written(write, path, *args) -> None:
    """``write(path, *args)``, its refusal (the place changed while the work ran) as one
    line."""
    try:
        write(path, *args)
    except (ValueError, FileExistsError) as exc:
        raise click.ClickException(str(exc)) from None


def _check_device(cluster: dict) -> str:
    """The device asked for ("gpu" or "cpu"), before anything starts (with what to do)."""
    if cluster.get("scheduler"):
        return cluster.get("device", "auto")  # the cluster's workers decide
    try:
        return resolve_device(cluster.get("device", "auto"))
    except (RuntimeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


# A local GPU worker runs two tasks at once: one task's reading (a file's bytes, Python)
# overlaps the other's kernels, each on its own CUDA stream (the library's GPU worker settings).
GPU_THREADS = 2


def _gpu_threads(cluster: dict, device: str) -> dict:
    """``cluster`` with two threads per local GPU worker; a --threads-per-worker given wins, a
    running cluster keeps its own."""
    if cluster.get("scheduler") or device != "gpu" or cluster.get("threads_per_worker"):
        return cluster
    return {**cluster, "threads_per_worker": GPU_THREADS}


# Text below which one GPU runs the commands faster than several: each further GPU's worker is
# a process that starts Python and the GPU stack, which the ETL's speed on more GPUs pays back
# only on more data (examples/mortgage/README.md: "How many GPUs").
ONE_GPU_TEXT = 20 * 2**30


def _gpus_for(cluster: dict, device: str, text_bytes) -> dict:
    """``cluster`` with one GPU worker where the data is below ``ONE_GPU_TEXT`` and several
    GPUs are visible (a local cluster, --workers not given), saying so; as it is otherwise.
    ``text_bytes``: the data's size, or a function giving ``(size, exact)``, called only
    where the choice depends on it (an estimate can take a sample)."""
    gpus = gpu_count() if device == "gpu" else 0
    if cluster.get("scheduler") or cluster.get("n_workers") or gpus < 2:
        return cluster
    size, exact = text_bytes() if callable(text_bytes) else (text_bytes, True)
    if size >= ONE_GPU_TEXT:
        return cluster
    click.echo(f"note: 1 of the {gpus} GPUs for {'' if exact else 'under '}"
               f"{format_bytes(size)} of text: more GPUs make the commands faster from about "
               f"{format_bytes(ONE_GPU_TEXT)} (--workers N to choose)")
    return {**cluster, "n_workers": 1}


def _join_note(cluster: dict, device: str, join: str) -> None:
    """A note where a join by loan will shuffle between local GPU workers over TCP: the batches
    then go through host memory, where UCX moves them device to device."""
    if (join == loan_join.DEFAULT or device != "gpu" or cluster.get("scheduler")
            or cluster.get("protocol", "tcp") != "tcp"):
        return
    if (cluster.get("n_workers") or gpu_count()) < 2:
        return
    click.echo(f"note: --join {join} moves rows between the GPUs through host memory over TCP; "
               "--protocol ucx moves them device to device")


def _shared_pool(cluster: dict) -> dict:
    """The whole job on a local GPU cluster: CUDA's async pool, which cuDF, CuPy and XGBoost's
    PyPI wheels all draw from (the ``etl`` command keeps the RMM pool: its ETL is faster there),
    unless a mode flag is given or the cluster is running already (--scheduler)."""
    memory = dict(cluster.get("memory") or {})
    if cluster.get("scheduler") or {"async_alloc", "managed", "pool"} & set(memory):
        return cluster
    return {**cluster, "memory": {**memory, "async_alloc": True}}


def _plan(data, perf, acq, names, device, partition_size, join=loan_join.DEFAULT) -> files.Plan:
    size = files.partition_size_for("gpu" if device == "gpu" else "cpu", partition_size)
    try:
        plan = files.plan(data, perf=perf, acq=acq, names=names, partition_size=size)
        loan_join.check(join, plan.layout)
    except (FileNotFoundError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    return plan


def _check_start(plan: files.Plan, bad_rows: str) -> None:
    """Under ``--bad-rows error``, stop before any work on a bad row among the first lines of a
    file (a header, a line cut short, text that is not UTF-8) or on its last line cut short,
    naming file and line, instead of after the whole ETL."""
    if bad_rows == "error":
        found = read.check_start(plan)
        if found:
            raise click.ClickException(str(read.BadRowsError(found)))


def _balanced(plan: files.Plan, client, device: str, partition_size) -> files.Plan:
    """``plan`` cut again for the cluster's worker threads (``files.balance``)."""
    size = files.partition_size_for("gpu" if device == "gpu" else "cpu", partition_size)
    return plan.balanced(sum(client.nthreads().values()), size)


def _imported(*modules: str) -> None:
    """Wait for ``modules`` (imported in the background since the cluster's start): the job's
    first steps need them, and the wait is a stage line of its own."""
    import importlib

    for module in modules:
        importlib.import_module(module)


def _prepare_cluster(cluster: dict, device: str) -> None:
    """What the library prepares for the local cluster to come (its worker processes' fork
    server), started now so that it works while the command goes on; with the CPU workers'
    settings, which their processes start with."""
    with cpu_workers.environ(cluster, device):
        prepare_local_cluster(**{**cluster, "device": device})


@contextlib.contextmanager
def _cluster(cluster: dict, expected: str, imports, training: str | None = None):
    """(client, device, starts) of the cluster, started with ``imports`` imported meanwhile
    (and cuDF on GPUs; on the workers, once they are up, the ETL's module and cuDF), the
    library's GPU worker settings in this process's environment first (a local GPU worker may
    run in it, and reads them as it imports cuDF); ``training``: the module that trains,
    imported on the workers too, and the workers' standard error without XGBoost's rank
    lines (a worker in this process writes them to this one's).
    ``starts``: when a local cluster's last worker to join took each step of its start
    (``worker_starts``), printed in a line; None for a running cluster."""
    since = time.time()
    with contextlib.ExitStack() as stack:
        if expected == "gpu" and not cluster.get("scheduler"):
            stack.enter_context(gpu_worker_environ())
        stack.enter_context(cpu_workers.environ(cluster, expected))
        for module in (*imports, *(["cudf"] if expected == "gpu" else [])):
            import_in_background(module)
        if training:
            stack.enter_context(without_xgboost_rank_lines())
        client, device = stack.enter_context(cluster_client(**cluster))
        _workers_ready(client, cluster, imports)
        # what the workers' first tasks import (to unpickle their function, then to run it),
        # imported while the client plans the work; for training, XGBoost's, imported while
        # the ETL runs instead of in the first task of XGBoost's matrix
        import_in_background(f"{__package__}.etl", *(["cudf"] if device == "gpu" else []),
                             *([training] if training else []), client=client)
        click.echo(f"cluster: {len(cluster_workers(client))} workers, device={device}")
        starts = None if cluster.get("scheduler") else worker_starts(client, since=since)
        if starts and starts[0].steps():
            click.echo(f"worker start (the last to join; seconds from the cluster's start): "
                       f"{', '.join(f'{k} {v:.2f}' for k, v in starts[0].steps().items())}")
        yield client, device, starts


def _workers_ready(client, cluster: dict, imports) -> None:
    """A running cluster's workers can import what the tasks call (ClusterError, before any
    work, where they cannot); a local cluster's leave a failed task to the command, which
    reports it once."""
    if cluster.get("scheduler"):
        check_workers_import(client, *imports)
    else:
        client.run(worker_logs.leave_task_failures_to_the_client)


@click.group(cls=_Group, invoke_without_command=True)
@cluster_options
@with_options(scale_options)
@layout_option
@with_options(etl_options)
@click.option("--data", type=UserPath(readable=False), default=None,
              help="Use these files (a directory, file or glob; either layout) instead of "
                   "generating.")
@click.option("--workdir", type=UserPath(file_okay=False), default=None,
              help="Generate here and keep the files (default: a temporary directory).")
@click.option("--rounds", type=click.IntRange(min=1), default=train.ROUNDS, show_default=True)
@click.option("--xgb-param", "xgb_params", multiple=True, metavar="KEY=VALUE",
              help="An XGBoost parameter over the notebook's (repeatable), e.g. "
                   "max_depth=10.")
@click.option("--holdout", default=None, metavar="YYYYQn",
              callback=lambda ctx, param, value: value and value.strip().upper(),
              help="Quarter to test on (default: the latest).")
@click.option("--features-out", type=UserPath(), default=None,
              help="Also write the feature table here (a Parquet directory).")
@click.option("--model-out", type=UserPath(dir_okay=False), default=None,
              help="Save the trained model here (XGBoost JSON).")
@click.option("--training-data", type=click.Choice(placement.CHOICES), default="auto",
              show_default=True,
              help="Where XGBoost's quantized matrix lives (the feature table is made a "
                   "partition at a time and never held): the GPUs' memory (device), or host "
                   "memory (host: XGBoost's external memory, its pages read over the bus); "
                   "auto: device when the matrix fits the GPUs.")
@click.option("--overwrite", is_flag=True,
              help="Replace what an earlier run wrote at --workdir, --features-out, "
                   "--model-out and --json, each by an output of the same kind (nothing "
                   "else).")
@join_option
@json_option
@click.pass_context
def mortgage(ctx, cluster, years, loans_per_quarter, size, seed, end_year, loans_per_part,
             layout, partition_size, bad_rows, data, workdir, rounds, xgb_params, holdout,
             features_out, model_out, training_data, overwrite, join, json_path):
    """The Fannie Mae mortgage ETL and XGBoost training on Dask (cuDF on GPUs, pandas on CPUs).

    With no sub-command: generate a small dataset (or use --data), start a local cluster (or
    use --scheduler), run the ETL and the training, and print the stage times, rows/s, the test
    AUC and each worker's peak memory. Options before a sub-command apply only to this job.
    """
    if ctx.invoked_subcommand is not None:
        _nothing_before(ctx, ctx.invoked_subcommand)
        return
    expected = _check_device(cluster)
    cluster = _gpu_threads(_shared_pool(cluster), expected)
    params = _bad("--xgb-param", train.parse_params, xgb_params)
    _bad("--xgb-param", _not_the_device, params)
    _bad("--xgb-param", _check_training, params)
    _bad("--xgb-param", train.check_params, params)
    _bad("--xgb-param", _check_quantized, params)
    spec = None if data else _spec(years, loans_per_quarter, size, seed, end_year,
                                   loans_per_part, layout)
    if join != loan_join.DEFAULT and not data and layout == schema.CURRENT.name:
        _usage(loan_join.check, join, schema.CURRENT)
    the_plan = _plan(data, None, None, None, expected, partition_size, join) if data else None
    if the_plan is not None:
        _check_start(the_plan, bad_rows)
    quarters = the_plan.quarters if data else [f"{y}Q{q}" for y, q in spec.quarters]
    _bad("--holdout", train.check_holdout, quarters, holdout)
    if workdir and data:
        raise click.UsageError("--workdir is where the job generates its data, and with --data "
                               "it generates none: leave --workdir out")
    if workdir:
        _check_workdir(workdir, overwrite)
    if spec is not None:
        _check_space(workdir or tempfile.gettempdir(), spec, layout)
    _separate_outputs([("--workdir", workdir, True), ("--features-out", features_out, True),
                       ("--model-out", model_out, False), ("--json", json_path, False)])
    inputs = [data] if data else [workdir] if workdir else []
    if features_out:
        _usage(output.check, features_out, what="feature table", overwrite=overwrite,
               inputs=inputs + (the_plan.inputs() if the_plan else []))
    if model_out:
        _usage(output.check_file, model_out, what="model", overwrite=overwrite,
               accept=_is_our_model)
    if json_path:
        _usage(figures.check, json_path, overwrite, "job")
    cluster = _gpus_for(cluster, expected, the_plan.input_bytes if the_plan else (
        lambda: _text_of(spec, layout)))
    _join_note(cluster, expected, join)
    _prepare_cluster(cluster, expected)
    if cluster.get("scheduler") and not (data or workdir):
        click.echo("note: the workers write the generated files: with --scheduler, pass a "
                   "--workdir that they can see (or --data)", err=True)
    # what trains: XGBoost from the ETL's partitions as they are made, on the workers;
    # xgboost.dask on a joined table held in their memory
    trainer = "xgboost" if join == loan_join.DEFAULT else "xgboost.dask"
    started = time.perf_counter()
    first = {"start": _since_process_start()}  # Python, the imports and the checks above
    with contextlib.ExitStack() as stack:
        directory = workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="mortgage-"))
        generating = None
        if spec is not None:
            click.echo(f"generating {len(spec.quarters)} quarters x "
                       f"{spec.loans_per_quarter:,} loans ...")
            if not cluster.get("scheduler"):  # local processes, while the cluster starts
                generating = stack.enter_context(ThreadPoolExecutor(1)).submit(
                    _generate, directory, spec, layout, overwrite, os.cpu_count())
        client, device, _ = stack.enter_context(
            _cluster(cluster, expected, (f"{__package__}.job", trainer), training=trainer))
        first["cluster start"] = time.perf_counter() - started
        if spec is not None:
            waiting = time.perf_counter()
            made = _usage(generating.result) if generating else _usage(
                _generate, directory, spec, layout, overwrite, None)
            first["generate"] = time.perf_counter() - waiting  # beyond the cluster's start
            click.echo(f"{_generated(made)}; waited {first['generate']:.2f} s for it after the "
                       "cluster started")
            the_plan = _plan(directory, None, None, None, device, partition_size, join)
        elif device != expected and partition_size is None:
            the_plan = _plan(data, None, None, None, device, None, join)  # the cluster's default
        the_plan = _balanced(the_plan, client, device, partition_size)
        waiting = time.perf_counter()  # for what is still importing since the cluster's start
        from . import job

        # waited for before the job's own imports: pandas imported in two threads at once
        # can be found half-initialized (its submodules import each other)
        _imported(trainer, *(["cudf"] if device == "gpu" else []))
        first["imports"] = time.perf_counter() - waiting

        try:
            result = job.run(client, device, the_plan, bad_rows=bad_rows, rounds=rounds,
                             holdout=holdout, params=params, progress=True,
                             echo=click.echo, training_data=training_data, join=join,
                             features_out=features_out, overwrite=overwrite, inputs=inputs)
        except (read.BadRowsError, ValueError, FileExistsError) as exc:
            raise click.ClickException(str(exc)) from None
        result.stages = {**first, **result.stages}
        if features_out:
            click.echo(f"feature table written to {os.path.abspath(features_out)}")
        writing = time.perf_counter()
        try:  # the place was checked before the work; another run may have written since
            if model_out:
                booster = result.training.booster
                booster.set_attr(**{MODEL_MARK[0]: MODEL_MARK[1]})  # a later run knows it
                output.replace_file(model_out, booster.save_model, what="model",
                                    overwrite=overwrite, accept=_is_our_model)
                click.echo(f"model written to {os.path.abspath(model_out)}")
        except (ValueError, FileExistsError) as exc:
            raise click.ClickException(str(exc)) from None
        if model_out:
            result.stages["outputs"] = time.perf_counter() - writing
        for line in result.lines():
            click.echo(line)
        stopping = time.perf_counter()
    stopped = time.perf_counter()
    total = first["start"] + stopped - started
    click.echo(stage_line("cluster stop", stopped - stopping))
    click.echo(stage_line("other", total - sum(result.stages.values()) - (stopped - stopping)))
    click.echo(f"total: {total:.2f} s since the command started")
    if json_path:
        _written(figures.write, json_path, figures.of_job(result, stopped - stopping, total),
                 overwrite, "job")


@mortgage.command()
@click.option("--out", "out", type=UserPath(file_okay=False), required=True,
              help="Directory for the files (classic: perf/, acq/ and names.csv).")
@with_options(scale_options)
@click.option("--layout", type=click.Choice([*schema.DATASET_LAYOUTS, "both"]), default="classic",
              show_default=True,
              help="classic, current (one 108-column file a quarter), or both from the same "
                   "loans (into OUT/classic and OUT/current).")
@click.option("--overwrite", is_flag=True, help="Replace the files of an earlier dataset there.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Generate on this running cluster (its workers must see --out).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes of the local CPU cluster (default: one per core).")
def generate(out, years, loans_per_quarter, size, seed, end_year, loans_per_part, layout,
             overwrite, scheduler, workers):
    """Write a synthetic dataset in either real layout, one task per file part, in parallel."""
    from .testdata import generate as gen

    spec = _spec(years, loans_per_quarter, size, seed, end_year, loans_per_part,
                 "current" if layout == "current" else "classic")
    _usage(gen.check_directory, out, overwrite, layout)
    _check_space(out, spec, layout)
    n_workers = workers or (None if scheduler else os.cpu_count())
    cluster = {"scheduler": scheduler}
    try:
        with cluster_client(scheduler, device="cpu", n_workers=n_workers,
                            threads_per_worker=None if scheduler else 1) as (client, _):
            _workers_ready(client, cluster, [gen.__name__])
            made = _usage(gen.generate, out, spec, layout=layout, overwrite=overwrite,
                          progress=True)
    except ClusterError as err:
        raise click.ClickException(err.message(flags="")) from None
    click.echo(_generated(made))


@mortgage.command()
@cluster_options
@click.option("--data", type=UserPath(readable=False), default=None,
              help="The files: a directory, a file or a glob, in either layout.")
@click.option("--perf", type=UserPath(readable=False), default=None,
              help="Classic performance files (file, directory, glob).")
@click.option("--acq", type=UserPath(readable=False), default=None,
              help="Classic acquisition files (file, directory, glob).")
@click.option("--names", type=UserPath(exists=True, dir_okay=False), default=None,
              help="names.csv (seller name|short name, with a header).")
@click.option("--out", required=True, type=UserPath(),
              help="Where to write the feature table (a directory of Parquet files).")
@with_options(etl_options)
@click.option("--overwrite", is_flag=True,
              help="Replace the feature table an earlier run wrote at --out (nothing else).")
@join_option
@json_option
@click.argument("more_data", nargs=-1, type=UserPath(readable=False),
                metavar="[MORE DATA]...")
def etl(cluster, data, perf, acq, names, out, partition_size, bad_rows, overwrite, join,
        json_path, more_data):
    """Write the feature table: the 45 features (float32) and delinquency_12 (int32).

    Paths after the options are more data, as an unquoted --data 'DIR/*' gives them."""
    if more_data and data is None:
        raise click.UsageError(
            f"{more_data[0]!r}: --perf and --acq take one path each, and the shell expanded a "
            "glob into several; quote the glob (--perf 'DIR/perf/*') or give the directory")
    if more_data:
        data = [data, *more_data]
    if data is None and (perf is None or acq is None):
        raise click.UsageError("give the files: --data PATH (either layout), or --perf and "
                               "--acq (the classic layout)")
    expected = _check_device(cluster)
    cluster = _gpu_threads(cluster, expected)
    the_plan = _plan(data, perf, acq, names, expected, partition_size, join)
    _check_start(the_plan, bad_rows)
    cluster = _gpus_for(cluster, expected, the_plan.input_bytes)
    _join_note(cluster, expected, join)
    _prepare_cluster(cluster, expected)
    given = [p for p in ([*data] if isinstance(data, list) else [data]) + [perf, acq, names] if p]
    _separate_outputs([("--out", out, True), ("--json", json_path, False)])
    _usage(output.check, out, what="feature table", overwrite=overwrite,
           inputs=given + the_plan.inputs())
    if json_path:
        _usage(figures.check, json_path, overwrite, "etl")
    started = time.perf_counter()
    stages = {"start": _since_process_start()}  # Python, the imports and the checks above
    with _cluster(cluster, expected, (f"{__package__}.etl",)) as (client, device, starts):
        stages["cluster start"] = time.perf_counter() - started
        working = time.perf_counter()
        if device != expected and partition_size is None:
            the_plan = _plan(data, perf, acq, names, device, None, join)  # the cluster's default
        the_plan = _balanced(the_plan, client, device, partition_size)
        try:
            from . import etl as etl_mod

            result = etl_mod.write(out, the_plan, device=device, bad_rows=bad_rows,
                                   overwrite=overwrite, progress=True, data=given, join=join)
        except (read.BadRowsError, ValueError, FileExistsError) as exc:
            raise click.ClickException(str(exc)) from None
        stages["ETL"] = time.perf_counter() - working  # the ETL line's, and its planning
        stopping = time.perf_counter()
    stopped = time.perf_counter()
    stages["cluster stop"] = stopped - stopping
    total = stages["start"] + stopped - started
    stages["other"] = total - sum(stages.values())
    for line in result.shuffles:
        click.echo(f"shuffle: {line}")
    click.echo(f"ETL: {result.summary()}")
    click.echo(f"feature table written to {os.path.abspath(out)}")
    click.echo("stage times:")
    for name, seconds in stages.items():
        click.echo(stage_line(name, seconds))
    click.echo(f"total: {total:.2f} s since the command started")
    if json_path:
        _written(figures.write, json_path, figures.of_etl(result, device, stages, total, starts),
                 overwrite, "etl")


if __name__ == "__main__":  # python -m examples.mortgage.cli: the same command
    from ..command import run

    run(mortgage, "python -m examples.mortgage")

"""``python -m examples.ecg``: find heartbeat outliers in an ECG on a Dask cluster.

With no arguments: 20 minutes of synthetic ECG with known abnormal beats, written as CSV into
``--out``, then the whole pipeline on a local cluster (GPUs when present), its per-stage times,
the beats found, the detection F1 and outlier ROC AUC, the memory report, and four pictures.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click
import numpy as np

from dask_gpu_interop import cluster_workers, gpu_count
from dask_gpu_interop.cluster.options import cluster_options

from .. import staging
from ..command import EndsInOneLine, UserPath

DEFAULT_MINUTES = 20
DEFAULT_RATE = 250.0
# The smallest chunk of a CSV: each is a task, with fixed costs, and the chunks' overlaps and
# peaks are stitched on the client (the default cut stays above it: at least 1 MiB).
MIN_BLOCKSIZE = 1_000_000


def _blocksize(value: str | None) -> int | None:
    """``--blocksize`` in bytes (None where not given); a usage error for a value that is not
    a size, or too small a one."""
    if value is None:
        return None
    from dask.utils import parse_bytes

    try:
        size = parse_bytes(value)
    except (ValueError, TypeError):
        raise click.BadParameter(f"{value!r} is not a size: write one such as 16MB or 64MiB",
                                 param_hint="--blocksize") from None
    if size < MIN_BLOCKSIZE:
        raise click.BadParameter(
            f"{value!r} is below 1MB: each chunk is a task of its own, and smaller ones make "
            "the run take far longer; give at least 1MB, or leave it out (4 chunks per "
            "worker)", param_hint="--blocksize")
    return size


class _Command(EndsInOneLine, click.Command):
    """The command, whose Ctrl-C or full disk ends it in one line (the files it had begun are
    removed as the error passes through it)."""

    unfinished = "files"
    elsewhere = "give another --out"


@click.command("ecg", cls=_Command)
@cluster_options
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Length of the synthetic recording [default: {DEFAULT_MINUTES} minutes; "
                   "20 hours is the classic Holter size: 18M samples].")
@click.option("--csv", "csv_path", type=UserPath(exists=True, dir_okay=False),
              default=None,
              help="Your own recording: one value per line (a header line is allowed). The "
                   "workers must see the file at the same path.")
@click.option("--rate", type=click.FloatRange(min=50), default=None, metavar="HZ",
              help=f"Sampling rate in Hz: required with --csv [synthetic: {DEFAULT_RATE:g}].")
@click.option("--column", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --csv: which column (from 0) holds the ECG.")
@click.option("--out", "out_dir", type=UserPath(file_okay=False), default="ecg-output",
              show_default=True, help="Where the pictures (and the synthetic CSV) go.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the synthetic recording and of the training.")
@click.option("--blocksize", default=None, callback=lambda ctx, param, value: _blocksize(value),
              help="CSV bytes per chunk, at least 1MB, e.g. 64MB (a task per chunk) "
                   "[default: 4 chunks per worker, 1 MiB to 256 MiB each].")
@click.option("--json", "json_path", type=UserPath(dir_okay=False), default=None,
              help="Also write the run's figures to this file as JSON (each stage's seconds, "
                   "the beats, the scores); it replaces only an earlier figures file.")
def ecg(cluster, hours, csv_path, rate, column, out_dir, seed, blocksize, json_path):
    """Heartbeat outliers in an ECG: cuDF -> CuPy -> Numba -> PyTorch on GPUs, zero-copy."""
    from dask_gpu_interop import cluster_client, memory_report, resolve_device

    from . import detect, figures, outputs, plots, vae
    from .params import Params
    from .pipeline import evaluate, run, warm_up_in_background
    from .synthetic import make_and_write

    try:
        vae.check_installed()
    except ImportError as err:
        raise click.ClickException(str(err)) from None
    if csv_path is not None and hours is not None:
        raise click.UsageError("--hours makes a synthetic recording; it does not apply to --csv")
    if csv_path is not None and rate is None:
        raise click.UsageError("--csv needs --rate HZ: the sampling rate of your recording")
    if csv_path is None:
        seconds = (hours * 3600) if hours is not None else DEFAULT_MINUTES * 60
        rate = rate or DEFAULT_RATE
        _check_synthetic(seconds, rate, out_dir)
    else:
        _check_recording(csv_path, column)
    try:
        device = resolve_device(cluster["device"])  # before making any data
    except (ValueError, RuntimeError) as err:
        raise click.ClickException(str(err)) from err
    cluster = _one_gpu(cluster, device)
    written = [*([outputs.CSV] if csv_path is None else []), *outputs.PICTURES]
    made_out = False
    try:
        out = outputs.check(out_dir, written)
        if json_path and Path(json_path).resolve() in {(out / n).resolve() for n in written}:
            raise ValueError(f"--json {json_path} is one of the files the run writes into "
                             "--out: give the figures a name of their own")
        made_out = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        if json_path:
            figures.check(json_path)  # its folder may be --out, made now
    except (ValueError, OSError) as err:
        if made_out:
            out.rmdir()
        if isinstance(err, ValueError):
            raise click.UsageError(str(err)) from None
        raise click.UsageError(f"--out {out_dir} cannot be made ({err.strerror}): give "
                               "another folder") from None
    with contextlib.ExitStack() as stack:
        made = partial = None
        if csv_path is None:  # made and written in another process while the cluster starts
            with staging.uninterrupted():  # the file made, and its removal registered
                partial = outputs.begin(out, outputs.CSV)
                stack.callback(outputs.abandon, partial)  # unless renamed into place by then
        background = stack.enter_context(ProcessPoolExecutor(
            1, mp_context=_process_context(), initializer=_exit_on_interrupt))
        if partial is not None:
            made = background.submit(make_and_write, partial, seconds, rate, seed)
        with cluster_client(**_shared_pool(cluster)) as (client, device):
            client.run(warm_up_in_background, device)
            on_stage = _import_for_the_pictures(client, device)
            workers = len(cluster_workers(client))
            click.echo(f"cluster: {workers} workers, device={device}")
            truth, prep = None, {}
            if made is not None:
                waiting = time.perf_counter()
                truth, summary, took = made.result()  # the truth: beats and kinds, no signal
                try:
                    csv_path = outputs.finish(out, outputs.CSV, partial)
                except ValueError as err:  # another run wrote there since the check
                    raise click.ClickException(str(err)) from None
                prep["data"] = time.perf_counter() - waiting  # beyond the cluster's start
                click.echo(f"synthetic ECG: {summary}")
                click.echo(f"written to {csv_path} ({_size(csv_path)}); made in "
                           f"{took['generate']:.2f} s and written in {took['write csv']:.2f} s "
                           "while the cluster started")
            csv_path = Path(csv_path).resolve()
            try:
                result = run(csv_path, rate, device=device, params=Params(seed=seed),
                             column=column, blocksize=blocksize, on_stage=on_stage)
            except ValueError as err:  # the recording cannot be used: say why, no traceback
                text = str(err)
                raise click.ClickException(
                    text if text.startswith(str(csv_path)) else f"{csv_path}: {text}") from None
            report = memory_report(client)

    t0 = time.perf_counter()
    try:  # checked before the work; another run may have written there since
        pictures = plots.write_all(result, out, truth)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    plot_seconds = time.perf_counter() - t0

    click.echo(f"\nstages ({result.samples:,} samples in {result.chunks} chunks, "
               f"{result.seconds / 3600:.2f} h at {result.rate:g} Hz):")
    stages = {**prep, **result.times, "plots": plot_seconds}
    for name, seconds in stages.items():
        click.echo(f"  {name:<10} {seconds:8.3f} s")
    pipeline_total = sum(result.times.values())
    click.echo(f"  {'pipeline':<10} {pipeline_total:8.3f} s  (read to score)")
    beats = result.beats
    click.echo(f"\nbeats found: {len(beats):,} ({_bpm(result):.0f} bpm on average); "
               f"{int(beats.kept.sum()):,} embedded, {int((~beats.kept).sum()):,} pruned")
    doubts = detect.doubts(beats, result.rate)
    if doubts:
        click.echo("warning: these detections do not look like a heartbeat ("
                   + "; ".join(doubts) + "): check --rate and --column, and the recording")
    graph = " (each a CUDA graph)" if result.model.get("graphed") else ""
    click.echo(f"VAE: {int(result.train.sum()):,} beats trained on, {result.model['steps']} "
               f"steps{graph}, loss {result.model['history'][0]:.1f} -> {result.model['history'][-1]:.1f}; "
               f"{int(result.test.sum()):,} held out")
    held_flagged = int((result.flagged & result.test).sum())
    scores = None
    click.echo(f"outliers flagged: {int(result.flagged.sum()):,} of all embedded beats, "
               f"{held_flagged:,} of the held-out ones")
    if truth is not None:
        scores = evaluate(result, truth)
        d, o = scores["detection"], scores["outliers"]
        click.echo(f"detection: F1 {d['f1']:.4f} (precision {d['precision']:.4f}, recall "
                   f"{d['recall']:.4f}; within {d['tolerance_ms']:.0f} ms of a true beat)")
        click.echo(f"outliers:  ROC AUC {o['auc']:.4f} on {o['held_out']:,} held-out beats "
                   f"({o['abnormal']} injected abnormal); {o['flagged_abnormal']} of "
                   f"{o['flagged']} flagged are injected abnormal beats")
    else:
        click.echo("detection F1 and outlier AUC need a known truth: run without --csv to see "
                   "them on a synthetic recording")
    click.echo("\npictures:")
    for path in pictures:
        click.echo(f"  {path}")
    click.echo("\nmemory:")
    click.echo(str(report))
    if json_path:
        try:  # checked before the work; another run may have written there since
            figures.write(json_path, figures.of_run(result, workers, stages, scores))
        except ValueError as err:
            raise click.ClickException(str(err)) from None


# The shortest synthetic recording: shorter ones may hold too few beats to learn from and to
# score (a few seconds hold none at all).
MIN_SECONDS = 10.0
# Bytes of this process's memory that making the synthetic recording takes per sample, at
# most (its float64 arrays while it is drawn).
SYNTHETIC_BYTES = 64
# Bytes of CSV a synthetic sample takes at most: a value of four decimals and its line end.
CSV_BYTES = 8


def _check_synthetic(seconds: float, rate: float, out) -> None:
    """A usage error for a synthetic recording too short to find beats in, too large to make
    in this machine's memory, or to write into ``out``'s disk."""
    if seconds < MIN_SECONDS:
        raise click.UsageError(
            f"--hours {seconds / 3600:g} makes {seconds:.1f} s of recording, too short to "
            f"find beats to learn from and to score: give at least {MIN_SECONDS / 3600:.4f} "
            f"({MIN_SECONDS:g} s)")
    import psutil
    from dask.utils import format_bytes

    samples = seconds * rate
    needed, free = samples * SYNTHETIC_BYTES, psutil.virtual_memory().available
    if needed > free:
        raise click.UsageError(
            f"--hours {seconds / 3600:g} at --rate {rate:g} makes {samples:,.0f} samples, "
            f"about {format_bytes(needed)} of memory to make, and this machine has "
            f"{format_bytes(free)} available: give fewer --hours or a lower --rate")
    import shutil

    existing = os.path.abspath(out)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    disk = shutil.disk_usage(existing).free
    if samples * CSV_BYTES > disk:
        raise click.UsageError(
            f"--hours {seconds / 3600:g} at --rate {rate:g} makes about "
            f"{format_bytes(samples * CSV_BYTES)} of CSV, and {existing} has "
            f"{format_bytes(disk)} free: give fewer --hours, a lower --rate, or another --out")


def _check_recording(path, column: int) -> None:
    """One line, before any work, for a recording the reader cannot use (compressed, no
    such column, a value that is no number, no values at all)."""
    from .reader import check_file

    try:
        check_file(path, column)
    except ValueError as err:
        text = str(err)
        raise click.ClickException(
            text if text.startswith(str(path)) else f"{path}: {text}") from None


def _import_for_the_pictures(client, device: str):
    """Where GPU workers run in other processes (a worker in this one gets PyTorch from its
    warm-up), the pipeline's stage callback that starts importing what the pictures need here
    (PyTorch, to decode beats from the latent plane; matplotlib) in the background as the
    training begins: one worker trains while this process only waits, instead of importing
    after the pipeline, or beside the reading's tasks, which this process drives. None
    otherwise: CPU workers use every core, and an import beside them would slow them more than
    it saves."""
    from dask_gpu_interop import import_in_background

    if device != "gpu" or os.getpid() in client.run(os.getpid).values():
        return None

    def on_stage(name: str) -> None:
        if name == "train":
            import_in_background("torch", "matplotlib")

    return on_stage


def _exit_on_interrupt() -> None:
    """In the recording's process: a terminal's Ctrl-C ends it at once, without a traceback
    (the command stops and says so)."""
    import signal

    signal.signal(signal.SIGINT, _exit_now)


def _exit_now(signum, frame) -> None:
    os._exit(128 + signum)


def _process_context():
    """How the recording's process starts: forked while this process has one thread (at once,
    sharing the imports; the child uses no GPU library), else spawned."""
    import multiprocessing
    import sys
    import threading

    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _one_gpu(cluster: dict, device: str) -> dict:
    """``cluster`` with one GPU worker where several GPUs are visible (a local cluster,
    --workers not given), saying so; as it is otherwise. The VAE trains on one worker and the
    other stages take a few seconds of one GPU on a day's recording: each further GPU only
    adds a worker process to start (examples/ecg/README.md, "How many GPUs")."""
    gpus = gpu_count() if device == "gpu" else 0
    if cluster.get("scheduler") or cluster.get("n_workers") or gpus < 2:
        return cluster
    click.echo(f"note: 1 of the {gpus} GPUs: the pipeline runs no faster on more "
               "(--workers N to choose)")
    return {**cluster, "n_workers": 1}


def _shared_pool(cluster: dict) -> dict:
    """A local cluster's GPU worker on CUDA's async pool, unless a mode flag is given: cuDF,
    CuPy and Numba draw from it through RMM and PyTorch through its own cudaMallocAsync
    backend, with which the VAE's training step is captured as a CUDA graph. A running
    cluster (--scheduler) keeps its own setup."""
    memory = dict(cluster.get("memory") or {})
    if cluster.get("scheduler") or {"async_alloc", "managed", "pool"} & set(memory):
        return cluster
    return {**cluster, "memory": {**memory, "async_alloc": True}}


def _bpm(result) -> float:
    lengths = result.beats.lengths[result.beats.kept]
    return 60 * result.rate / float(np.mean(lengths)) if len(lengths) else math.nan


def _size(path) -> str:
    from dask.utils import format_bytes

    return format_bytes(Path(path).stat().st_size)


if __name__ == "__main__":  # python -m examples.ecg.cli: the same command
    from ..command import run

    run(ecg, "python -m examples.ecg")

"""What the host lets the mortgage ETL's task do on 1 to N GPUs at once, without dask: its
steps and the copies beneath them, each GPU's process working through the ETL's partitions.

    python -m benchmarks.examples.read_ceiling --data DIR [--gpus 1,2,4] [--threads 2] [--runs 2]
        [--modes task,features,read,csv,device,host]

The partitions are the etl command's own on a cluster of that many GPUs (``files.plan`` cut
for ``--threads`` threads a GPU, as the command cuts them for its workers' threads). One
process a GPU (``CUDA_VISIBLE_DEVICES``, the GPU workers' environment), ``--threads`` threads
in each, all taking partitions from one queue, as dask's workers take tasks; every process
warms up (imports, its GPU's context and pool, one small partition) before a barrier, and the
time runs from the barrier to the last process's end. Modes, from the whole task down:

- ``task``: the ETL's whole task (``etl.write_part``: its Parquet file written to a scratch
  folder), as the etl command's workers run it;
- ``features``: the task without its write (``etl.process_part``: the read, the features, the
  join to the quarter's acquisitions, loaded in every process before the clock);
- ``read``: the task's read step (``examples.mortgage.read.read``: cuDF's CSV reader, its
  columns parsed);
- ``csv``: libcudf's CSV reader alone on each piece (the fields as text, nothing parsed);
- ``device``: each partition's bytes read into pinned host memory and copied to the GPU;
- ``host``: each partition's bytes read from the files into host memory (the page cache's
  copy, nothing on the GPU).

The GPU modes allocate from a plain RMM pool (``common.as_gpu_worker``; the workers' is the
plugin's, with its statistics on top). A variable of the GPU workers' environment already set
(``KVIKIO_NTHREADS=2 python -m ...``) is kept, to compare settings.
When a mode's aggregate rate grows less than the GPUs, what that mode does is what slows the
ETL's tasks on that many GPUs; ``task`` against the etl command's ETL line on as many GPUs is
what dask and the cluster add. The harness (benchmarks/common.py) records the machine and the
commit and writes ``--out``/mortgage-read-ceiling-MACHINE.md (and .json).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import shutil
import threading
import time

from ..common import (
    Script,
    alternate,
    as_gpu_worker,
    header,
    median_range,
    require_dataset,
    say,
    summary,
)

MODES = ("task", "features", "read", "csv", "device", "host")
CHUNK = 64 * 2**20  # bytes a ``host`` or ``device`` read copies at a time


def partitions(directory: str, gpus: int, threads: int) -> list:
    """The etl command's partitions of ``directory`` on ``gpus`` GPUs of ``threads`` threads."""
    from examples.mortgage import files

    size = files.partition_size_for("gpu")
    return files.plan(directory, partition_size=size).balanced(gpus * threads, size).parts


def _read_bytes(part, buffer, device) -> int:
    """A partition's bytes through ``buffer`` (host memory), copied to ``device`` if given."""
    done = 0
    for piece in part.pieces:
        with open(piece.path, "rb", buffering=0) as f:
            offset = piece.start
            while offset < piece.stop:
                view = memoryview(buffer)[:min(CHUNK, piece.stop - offset)]
                count = os.preadv(f.fileno(), [view], offset)
                if count <= 0:
                    break
                if device is not None:
                    device[:count].set(buffer[:count])
                offset += count
                done += count
    return done


def _process(index: int, mode: str, directory: str, layout_names, threads: int, tasks,
             barrier, results, scratch: str) -> None:
    """One GPU's process: warm up, wait at ``barrier``, read partitions from ``tasks`` with
    ``threads`` threads; puts (index, start, stop, bytes) into ``results``."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
    gpu = mode != "host"
    as_gpu_worker(pool=gpu)  # the imports, the GPU's context and pool before the barrier
    from examples.mortgage import files, read

    plan = files.plan(directory)
    if gpu:
        import cupy
        import numpy

        cupy.zeros(1)

    def buffers():
        if mode == "device":
            pinned = cupy.cuda.alloc_pinned_memory(CHUNK)
            return (numpy.frombuffer(pinned, numpy.uint8, CHUNK),
                    cupy.empty(CHUNK, dtype=numpy.uint8))
        return bytearray(CHUNK), None

    acquisitions = {}
    if mode in ("features", "task"):  # every quarter's, as each task would find them
        from examples.mortgage import etl

        acquisitions = {quarter: etl.load_acquisitions(plan.acquisition_files(quarter), "gpu",
                                                       plan.names)[0]
                        for quarter in dict.fromkeys(plan.quarters)}
    written = itertools.count()

    def one(part, buffer, device) -> int:
        size = sum(p.stop - p.start for p in part.pieces)
        if mode == "features":
            table, _ = etl.process_part(part, plan.layout, acquisitions.get(part.quarter), "gpu",
                                        plan.names)
            cupy.cuda.get_current_stream().synchronize()
            del table
            return size
        if mode == "task":
            etl.write_part(os.path.join(scratch, f"part-{index}-{next(written)}.parquet"), part,
                           plan.layout, acquisitions.get(part.quarter), "gpu", plan.names)
            return size
        if mode == "csv":  # named as the ETL's reader names the fields
            by_name = {plan.layout.classic[c]: c for c in layout_names}
            names = [by_name.get(name, f"_{i}") for i, name in enumerate(plan.layout.names)]
            for piece in part.pieces:
                read.read_csv_gpu(piece.path, read._byte_range(piece), [*names, read.EXTRA],
                                  layout_names)
            cupy.cuda.get_current_stream().synchronize()
            return size
        if mode == "read":
            result = read.read(part.pieces, plan.layout, layout_names, "gpu", "skip", plan.names)
            cupy.cuda.get_current_stream().synchronize()
            del result
            return size
        return _read_bytes(part, buffer, device)

    if mode in ("read", "csv", "features", "task"):  # the reader's kernels before the clock
        small = files.plan(directory, partition_size="16MiB").parts[0]
        if mode in ("features", "task"):
            etl.process_part(small, plan.layout, acquisitions.get(small.quarter), "gpu",
                             plan.names)
        else:
            read.read(small.pieces, plan.layout, layout_names, "gpu", "skip", plan.names)
    done = [0] * threads

    def worker(slot: int) -> None:
        buffer, device = buffers()
        while (part := tasks.get()) is not None:  # None: no partition left
            done[slot] += one(part, buffer, device)

    barrier.wait()
    start = time.time()
    pool = [threading.Thread(target=worker, args=(slot,)) for slot in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    results.put((index, start, time.time(), sum(done)))


def measure_one(directory: str, gpus: int, threads: int, mode: str, scratch: str) -> dict:
    """One run of ``mode`` on ``gpus`` GPUs: the aggregate and each process's figures."""
    from examples.mortgage import schema

    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    parts = partitions(directory, gpus, threads)
    for part in [*parts, *[None] * (gpus * threads)]:  # then an end mark for every thread
        tasks.put(part)
    barrier = context.Barrier(gpus)
    processes = [context.Process(target=_process, args=(
        i, mode, directory, list(schema.PERFORMANCE_READ), threads, tasks, barrier, results,
        scratch))
        for i in range(gpus)]
    for process in processes:
        process.start()
    found = []
    while len(found) < gpus:
        try:
            found.append(results.get(timeout=1))
        except queue.Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if failed:
                for process in processes:
                    process.kill()
                raise RuntimeError(
                    f"a {mode} process on {gpus} GPUs ended with {failed[0]}") from None
    for process in processes:
        process.join()
    total = sum(f[3] for f in found)
    span = max(f[2] for f in found) - min(f[1] for f in found)
    return {"bytes": total, "seconds": span, "partitions": len(parts),
            "processes": [{"gpu": f[0], "seconds": f[2] - f[1], "bytes": f[3]}
                          for f in sorted(found)]}


def options(parser) -> None:
    parser.add_argument("--data", required=True, help="A dataset made by the README's generate.")
    parser.add_argument("--gpus", default="1,2,4", help="GPU counts, e.g. 1,2,4.")
    parser.add_argument("--threads", type=int, default=2, help="Threads a GPU's process.")
    parser.add_argument("--runs", type=int, default=2, help="Rounds of every mode and count.")
    parser.add_argument("--modes", default=",".join(MODES), help=f"Of {', '.join(MODES)}.")


def check(parser, args) -> None:
    try:
        args.gpu_counts = [int(n) for n in args.gpus.split(",")]
    except ValueError:
        parser.error(f"--gpus {args.gpus}: give GPU counts such as 1,2,4")
    if any(n < 1 for n in args.gpu_counts):
        parser.error(f"--gpus {args.gpus}: every count at least 1")
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.mode_list if m not in MODES]
    if unknown or not args.mode_list:
        parser.error(f"--modes {args.modes}: choose from {', '.join(MODES)}")
    if args.threads < 1 or args.runs < 1:
        parser.error("--threads and --runs: at least 1")


def measure(args, run) -> None:
    require_dataset(args.data)
    found = run.payload["runs"] = {}
    run.payload["threads"] = args.threads
    variants = [f"{mode} {gpus}" for gpus in args.gpu_counts for mode in args.mode_list]
    for _, name in alternate(variants, args.runs, rotate=True):
        mode, gpus = name.split()
        scratch = run.scratch()
        result = measure_one(args.data, int(gpus), args.threads, mode, scratch)
        shutil.rmtree(scratch, ignore_errors=True)
        found.setdefault(name, []).append(result)
        say(f"{name}: {result['bytes'] / result['seconds'] / 1e9:.2f} GB/s "
            f"({result['seconds']:.2f} s)")
        run.save()


def markdown(payload: dict) -> str:
    lines = [*header("The ETL's task and its steps on 1 to N GPUs at once, without dask",
                     payload["command"], payload["machine"], payload["commit"],
                     payload.get("date")), "",
             f"GB/s (10^9 bytes) of the partitions' input text, all processes together, median "
             f"(range) of the runs; {payload.get('threads')} threads a GPU. Per GPU: the "
             "aggregate over the GPU count; scaling: the aggregate over one GPU's.", "",
             "| mode | GPUs | partitions | GB/s | per GPU | scaling |",
             "| --- | --- | --- | --- | --- | --- |"]
    runs = payload.get("runs", {})
    for name, results in runs.items():
        mode, gpus = name.split()
        rates = [r["bytes"] / r["seconds"] / 1e9 for r in results]
        one = runs.get(f"{mode} 1")
        scaling = ""
        if one:
            base = summary(r["bytes"] / r["seconds"] for r in one)["median"]
            scaling = f"{summary(rates)['median'] * 1e9 / base:.2f}x"
        lines.append(f"| {mode} | {gpus} | {results[0]['partitions']} | {median_range(rates)} | "
                     f"{median_range([r / int(gpus) for r in rates])} | {scaling} |")
    return "\n".join(lines) + "\n"


def gpus(args) -> int:
    return max(args.gpu_counts)


SCRIPT = Script(__file__, __doc__, options=options, check=check, measure=measure,
                markdown=markdown, name="mortgage-read-ceiling", gpus=gpus)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

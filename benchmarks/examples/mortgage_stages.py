"""Where a partition's ETL spends its time and memory, in one process.

    python -m benchmarks.examples.mortgage_stages --data DIR [--device gpu] [--repeats 3]
        [--chunks 256MiB,1GiB] [--partitions 6] [--streams per-thread] [--io-threads 8]

The largest partition of the dataset in DIR (either layout) goes through the example's steps
one at a time, the device synchronized after each: libcudf's (or pyarrow's) reader, the number
columns' conversion, the text columns' decoding, the per-loan features and label, the feature
table; then the whole ``etl.process_part`` at each conversion chunk size, with its peak device
memory (RMM's statistics). Some steps are timed beside the ways not taken, so that a choice in
the example has its figure here. ``--partitions N`` also runs N partitions on one and on two
threads, as a local GPU worker does (the throughput, GB/s of text). ``--streams`` and
``--io-threads`` set what the example gives its local GPU workers (per-thread CUDA streams,
kvikio's threads), before cuDF and CuPy load. The first repeat includes what the first call
of each kernel costs; the table gives the median of the others. This explains the ETL's time;
the figure that counts is benchmarks.examples.mortgage's. The harness (benchmarks/common.py) records
the machine and the commit and writes the results file,
``--out``/mortgage-stages-DEVICE-LAYOUT[-TAG]-MACHINE.md (and .json).
"""

from __future__ import annotations

import os
import statistics
import time

from dask.utils import parse_bytes

from ..common import Script, alternate, header, median_range


def _sync(device: str) -> None:
    if device == "gpu":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


class Clock:
    """Seconds per step over the repeats."""

    def __init__(self, device: str):
        self.device, self.times = device, {}

    def __call__(self, name: str, function, *args, **kwargs):
        _sync(self.device)
        started = time.perf_counter()
        out = function(*args, **kwargs)
        _sync(self.device)
        self.times.setdefault(name, []).append(time.perf_counter() - started)
        return out


def _environment(streams: str, io_threads: int | None) -> dict:
    """The worker settings asked for, put in this process's environment before cuDF loads."""
    from dask_gpu_interop.worker import gpu_workers

    wanted = {}
    if streams == "per-thread":
        wanted = {k: gpu_workers.ENVIRON[k] for k in ("CUDF_PER_THREAD_STREAM",
                                                       "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM")}
    if io_threads:
        wanted["KVIKIO_NTHREADS"] = str(io_threads)
    os.environ.update(wanted)
    return wanted


def _setup_gpu():
    """The device memory as the plugin sets it up: an RMM pool, CuPy allocating from it."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    rmm.reinitialize(pool_allocator=True, initial_pool_size=2**35)
    cupy.cuda.set_allocator(rmm_cupy_allocator)


def _columns(plan):
    from examples.mortgage import schema

    if plan.layout.name == schema.CURRENT.name:
        return schema.PERFORMANCE_READ + schema.ACQUISITION_READ[1:]
    return schema.PERFORMANCE_READ


def _acquisitions(plan, quarter, device):
    from examples.mortgage import etl, schema

    if plan.layout.name == schema.CURRENT.name:
        return None
    return etl.load_acquisitions(plan.acquisition_files(quarter), device, plan.names)[0]


def profile(directory: str, device: str, repeats: int, chunks=()) -> dict:
    from examples.mortgage import etl, features, files, read, schema

    plan = files.plan(directory, partition_size=files.PARTITION_SIZES[device])
    part = max(plan.parts, key=lambda p: p.nbytes)
    current = plan.layout.name == schema.CURRENT.name
    columns = _columns(plan)
    acq = _acquisitions(plan, part.quarter, device)
    clock = Clock(device)
    peaks: dict[str, list] = {}
    chunk = read.CHUNK
    for _ in range(repeats):
        if not current:
            clock("acquisitions: one quarter's files", etl.load_acquisitions,
                  plan.acquisition_files(part.quarter), device, plan.names)
        if device == "gpu":
            _gpu_steps(clock, part, plan, columns)
        label = f", chunks of {chunk >> 20} MiB" if device == "gpu" else ""
        result = clock(f"read: the example's read(){label}", read.read,
                       part.pieces, plan.layout, columns, device, "skip", plan.names)
        perf = result.frame
        if current:
            acq = clock("acquisition view (current layout)", etl.acquisition_view, perf)
            perf = perf[list(schema.PERFORMANCE_READ)]
        perf = clock("features: per loan and the label", features.performance_features, perf)
        clock("feature table: join and last mile", features.feature_table, perf, acq)
        del perf, result
        sizes = [chunk, *(c for c in chunks if c != chunk)]  # the example's first
        for _, size in alternate(sizes, 1):
            read.CHUNK = size
            name = (f"whole partition (process_part), chunks of {size / 2**20:.0f} MiB"
                    + ("" if size == chunk else " (not taken)"))
            peaks.setdefault(name, []).append(_peak(clock, device, name, etl.process_part, part,
                                                    plan.layout, acq, device, plan.names))
        read.CHUNK = chunk
    return {"part": {"bytes": part.nbytes, "pieces": len(part.pieces), "quarter": part.quarter},
            "layout": plan.layout.name, "device": device, "times": clock.times,
            "peaks": peaks, "functions": _functions(etl.process_part, part, plan.layout, acq,
                                                    device, plan.names)}


def throughput(directory: str, device: str, count: int, thread_counts=(1, 2),
               rounds: int = 2) -> list[dict]:
    """``count`` partitions through ``etl.process_part`` on one, then two threads (the best
    of ``rounds``), as a local GPU worker runs them."""
    from concurrent.futures import ThreadPoolExecutor

    from examples.mortgage import etl, files

    plan = files.plan(directory, partition_size=files.PARTITION_SIZES[device])
    parts = plan.parts[:count]
    acqs = {q: _acquisitions(plan, q, device) for q in dict.fromkeys(p.quarter for p in parts)}
    text = sum(p.nbytes for p in parts)

    def task(part):
        return len(etl.process_part(part, plan.layout, acqs[part.quarter], device,
                                    plan.names)[0])

    task(parts[0])  # the first calls' costs
    out = []
    for threads in thread_counts:
        times = []
        for _ in range(rounds):
            _sync(device)
            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(task, parts))
            _sync(device)
            times.append(time.perf_counter() - started)
        out.append({"threads": threads, "partitions": len(parts), "bytes": text,
                    "seconds": times, "gb_per_s": text / min(times) / 1e9})
    return out


def _functions(function, *args, top: int = 30) -> str:
    """The functions one more call of ``function`` spent most time in, cumulatively
    (cProfile; a call that waits for the device counts the wait as its own)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(function, *args)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return text.getvalue()


def _peak(clock, device, name, function, *args):
    if device != "gpu":
        clock(name, function, *args)
        return None
    import rmm

    rmm.statistics.enable_statistics()
    rmm.statistics.push_statistics()
    clock(name, function, *args)
    return rmm.statistics.pop_statistics().peak_bytes


def _gpu_steps(clock, part, plan, columns):
    """libcudf's reader and the conversions, each timed alone, and the ways not taken."""
    import cudf

    from examples.mortgage import read

    layout = plan.layout
    by_name = {layout.classic[c]: c for c in columns}
    names = [by_name.get(n, f"_{i}") for i, n in enumerate(layout.names)] + [read.EXTRA]
    numbers, texts = read._kinds(columns)

    def read_text():
        import pylibcudf as plc

        tables = [read.read_csv_gpu(p.path, read._byte_range(p), names, columns)
                  for p in part.pieces]
        order = tables[0].column_names()
        table = (tables[0].tbl if len(tables) == 1
                 else plc.concatenate.concatenate([t.tbl for t in tables]))
        return dict(zip(order, table.columns(), strict=True))

    found = clock("libcudf's reader, the whole partition's text at once", read_text)
    rows = found["loan_id"].size()

    def stacked_numbers():
        return read._numbers_gpu([found[c] for c in numbers], rows)

    def column_numbers():
        return [cudf.Series.from_pylibcudf(found[c]).astype("float64").astype("float32")
                for c in numbers]

    def stacked_texts():
        uniques, codes = read._texts_gpu([found[c] for c in texts], rows)
        return read.decode(texts, uniques, codes, read.used_texts(codes, len(uniques)),
                           plan.names)

    clock("numbers: stacked, checked and parsed in one call each", stacked_numbers)
    clock("numbers: a column at a time, cuDF's astype (not taken)", column_numbers)
    clock("texts: stacked, encoded in one call, decoded by one lookup", stacked_texts)


def markdown(result: dict) -> str:
    part = result["part"]
    size = part["bytes"]
    lines = [*header(f"One partition's ETL, step by step ({result['device']}, "
                     f"{result['layout']})", result["command"], result["machine"],
                     result["commit"], result["date"],
                     used=1 if result["device"] == "gpu" else None, versions=False),
             f"- partition: {size / 2**20:.0f} MiB in {part['pieces']} piece(s), quarter "
             f"{part['quarter']}", f"- worker settings: {result.get('environment') or 'none'}",
             "", "| step | first run | median of the rest (min-max) | GB/s of text |",
             "| --- | --- | --- | --- |"]
    for name, times in result["times"].items():
        rest = times[1:] or times
        median = statistics.median(rest)
        lines.append(f"| {name} | {times[0] * 1e3:.1f} ms | "
                     f"{median_range([t * 1e3 for t in rest], '{:.1f}')} ms | "
                     f"{size / median / 1e9:.2f} |")
    for name, peaks in result["peaks"].items():
        peaks = [p for p in peaks if p]
        if peaks:
            lines += ["", f"Peak device memory, {name}: {max(peaks) / size:.2f}x its text "
                          f"({max(peaks) / 2**20:.0f} MiB)."]
    if result.get("throughput"):
        lines += ["", "Partitions through `process_part` on threads, as a local GPU worker "
                      "runs them (best of the rounds):", "",
                  "| partitions | threads | seconds (each round) | GB/s of text |",
                  "| --- | --- | --- | --- |"]
        for row in result["throughput"]:
            lines.append(f"| {row['partitions']} ({row['bytes'] / 2**30:.2f} GiB) | "
                         f"{row['threads']} | {', '.join(f'{s:.2f}' for s in row['seconds'])} "
                         f"| {row['gb_per_s']:.2f} |")
    if result.get("functions"):
        lines += ["", "One more whole partition under cProfile, by cumulative time:", "", "```",
                  result["functions"].strip(), "```"]
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--data", required=True, help="A dataset directory (either layout).")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunks", default="", help="Also run the whole partition with "
                        "these conversion chunks on GPUs, e.g. 128MiB,1GiB (comma-separated).")
    parser.add_argument("--partitions", type=int, default=0,
                        help="Also run this many partitions on one and on two threads.")
    parser.add_argument("--streams", choices=("default", "per-thread"), default="default",
                        help="per-thread: cuDF and CuPy on each thread's own CUDA stream.")
    parser.add_argument("--io-threads", type=int, default=None,
                        help="kvikio's threads for a file's bytes (KVIKIO_NTHREADS).")
    parser.add_argument("--tag", default="", help="Added to the results file's name.")


def check_arguments(parser, args) -> None:
    try:
        args.chunk_sizes = [parse_bytes(c) for c in args.chunks.split(",") if c]
    except ValueError as exc:
        parser.error(f"--chunks {args.chunks!r}: {exc}")


def measure(args, run) -> None:
    environment = _environment(args.streams, args.io_threads) if args.device == "gpu" else {}
    if args.device == "gpu":
        _setup_gpu()
    result = profile(args.data, args.device, max(2, args.repeats), args.chunk_sizes)
    result["environment"] = environment
    if args.partitions:
        result["throughput"] = throughput(args.data, args.device, args.partitions)
    run.payload.update(result)


def name(args, payload) -> str:
    layout = payload["layout"].split("-")[0]
    tag = f"-{args.tag}" if args.tag else ""
    return f"mortgage-stages-{args.device}-{layout}{tag}-{payload['machine_name']}"


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name=name,
                gpus=lambda args: 1 if args.device == "gpu" else None)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

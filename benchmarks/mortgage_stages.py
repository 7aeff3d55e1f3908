"""Where one partition's ETL spends its time and memory, step by step, in one process.

    python benchmarks/mortgage_stages.py --data DIR [--device gpu] [--repeats 3]

The largest partition of the dataset in DIR (either layout) goes through the example's steps
one at a time, the device synchronized after each: cuDF's (or pyarrow's) reader, the numbers'
conversion, the text columns' decoding, the per-loan features and label, the feature table;
and the whole ``etl.process_part`` with its peak device memory (RMM's statistics). Some steps
are timed beside the ways not taken, so that a choice in the example has its figure here.
The first repeat includes what the first call of each kernel costs; the table gives the median
of the others. This explains the ETL's time; the figure that counts is benchmarks/mortgage.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from dask.utils import parse_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's root: examples/

from common import command_line, machine, write_results  # noqa: E402


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


def _setup_gpu():
    """The device memory as the plugin sets it up: an RMM pool, CuPy allocating from it."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    rmm.reinitialize(pool_allocator=True, initial_pool_size=2**36)
    cupy.cuda.set_allocator(rmm_cupy_allocator)


def profile(directory: str, device: str, repeats: int, chunks=()) -> dict:
    from examples.mortgage import etl, features, files, read, schema

    plan = files.plan(directory, partition_size=files.PARTITION_SIZES[device])
    part = max(plan.parts, key=lambda p: p.nbytes)
    current = plan.layout.name == schema.CURRENT.name
    columns = (schema.PERFORMANCE_READ + schema.ACQUISITION_READ[1:] if current
               else schema.PERFORMANCE_READ)
    acq = None
    if not current:
        acq, _ = etl.load_acquisitions(plan.acquisition_files(part.quarter), device, plan.names)
    clock = Clock(device)
    peaks: dict[str, list] = {}
    chunk = read.CHUNK
    for _ in range(repeats):
        if not current:
            clock("acquisitions: one quarter's files", etl.load_acquisitions,
                  plan.acquisition_files(part.quarter), device, plan.names)
        if device == "gpu":
            _gpu_steps(clock, part, plan, columns)
        result = clock("read: the example's read()", read.read, part.pieces, plan.layout,
                       columns, device, "skip", plan.names)
        perf = result.frame
        if current:
            acq = clock("acquisition view (current layout)", etl.acquisition_view, perf)
            perf = perf[list(schema.PERFORMANCE_READ)]
        perf = clock("features: per loan and the label", features.performance_features, perf)
        clock("feature table: join and last mile", features.feature_table, perf, acq)
        del perf, result
        for size in (chunk, *(c for c in chunks if c != chunk)):  # the example's first
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


def _functions(function, *args, top: int = 30) -> str:
    """The functions one more call of ``function`` spent most time in, by own time
    (cProfile; a call that waits for the device counts the wait as its own)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(function, *args)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
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
    import cupy

    from examples.mortgage import read, schema

    layout = plan.layout
    names = [*layout.names, read.EXTRA]
    wanted = [layout.classic[c] for c in columns]
    kinds = {layout.classic[c]: schema.kind_of(c) for c in columns}
    text_types = {n: "int64" if k == schema.ID else "str" for n, k in kinds.items()}
    args = (names, [*wanted, read.EXTRA], {**text_types, read.EXTRA: "str"})

    def read_text():
        frames = [read._read_csv_gpu(p.path, read._byte_range(p), *args) for p in part.pieces]
        return frames[0] if len(frames) == 1 else cudf.concat(frames, ignore_index=True)

    frame = clock("cudf.read_csv, the whole partition's text at once", read_text)
    numbers = [n for n, k in kinds.items() if k == schema.NUMBER]
    texts = [n for n, k in kinds.items() if k not in (schema.ID, schema.NUMBER)]

    def astype():
        return [frame[n].astype("float64").astype("float32") for n in numbers]

    def to_numeric():
        return [cudf.to_numeric(frame[n], errors="coerce") for n in numbers]

    def factorize():
        return [frame[n].factorize() for n in texts]

    def hashed():
        out = []
        for n in texts:
            hashes = frame[n].hash_values(method="xxhash64")
            distinct = hashes.drop_duplicates()
            keys = cupy.sort(distinct.values)
            out.append((cupy.searchsorted(keys, hashes.values),
                        frame[n].take(distinct.index).to_arrow().to_pylist()))
        return out

    def encode():
        import pylibcudf as plc

        out = []
        for n in texts:
            column, _ = frame[n].to_pylibcudf()
            keys, indices = plc.transform.encode(plc.Table([column]))
            out.append((cupy.asarray(cudf.Series.from_pylibcudf(indices).values),
                        cudf.Series.from_pylibcudf(keys.columns()[0]).to_arrow().to_pylist()))
        return out

    clock("numbers: astype (checks, converts)", astype)
    clock("numbers: to_numeric (not taken)", to_numeric)
    clock("text: libcudf's encode, one call a column", encode)
    clock("text: factorize (not taken)", factorize)
    clock("text: xxhash64, distinct hashes (not taken)", hashed)


def markdown(info: dict, result: dict, command: str) -> str:
    part = result["part"]
    size = part["bytes"]
    lines = [f"# One partition's ETL, step by step ({result['device']}, {result['layout']})", "",
             f"- command: `{command}`", f"- machine: {info['cpu']}; {', '.join(info['gpus'])}",
             f"- partition: {size / 2**20:.0f} MiB in {part['pieces']} piece(s), quarter "
             f"{part['quarter']}", "",
             "| step | first run | median of the rest | GB/s of text |", "| --- | --- | --- | --- |"]
    for name, times in result["times"].items():
        rest = times[1:] or times
        median = statistics.median(rest)
        lines.append(f"| {name} | {times[0] * 1e3:.1f} ms | {median * 1e3:.1f} ms | "
                     f"{size / median / 1e9:.2f} |")
    for name, peaks in result["peaks"].items():
        peaks = [p for p in peaks if p]
        if peaks:
            lines += ["", f"Peak device memory, {name}: {max(peaks) / size:.2f}x its text "
                          f"({max(peaks) / 2**20:.0f} MiB)."]
    if result.get("functions"):
        lines += ["", "One more whole partition under cProfile, by own time:", "", "```",
                  result["functions"].strip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A dataset directory (either layout).")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--machine", default="1xH200")
    parser.add_argument("--chunks", default="", help="Also run the whole partition with "
                        "these conversion chunks on GPUs, e.g. 128MiB,1GiB (comma-separated).")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    if args.device == "gpu":
        _setup_gpu()
    chunks = [parse_bytes(c) for c in args.chunks.split(",") if c]
    result = profile(args.data, args.device, max(2, args.repeats), chunks)
    info = machine()
    text = markdown(info, result, command_line(__file__, argv))
    layout = result["layout"].split("-")[0]
    write_results(os.path.join(args.out, f"mortgage-stages-{args.device}-{layout}-"
                                         f"{args.machine}"), text, {**result, "machine": info})
    print(text)


if __name__ == "__main__":
    main()

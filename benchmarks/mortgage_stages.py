"""Where one chunk of the mortgage ETL spends its time and device memory, stage by stage.

    python benchmarks/mortgage_stages.py --data /tmp/mortgage-stages --device gpu
    python benchmarks/mortgage_stages.py --data /tmp/mortgage-stages --device cpu

One process, no cluster: the largest chunk of a generated dataset (made on first use) goes
through ``etl.process_chunk`` once to warm up, then ``--repeats`` times under a stage profile
(``pipelines/mortgage/stages.py``). On the GPU the plugin's pool is installed in the process,
with RMM statistics, so each stage's peak device memory is measured and shown against the
chunk's size. The table goes to stdout and, with the command and the machine, to
``--out`` (markdown and JSON).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from dask.utils import format_bytes, parse_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's root: examples/
from mortgage import command_line, machine, machine_name, say, write_results  # noqa: E402


def dataset(directory: str, gb: float, years: str, seed: int):
    """(perf files, acq files, names.csv) of the dataset in ``directory``, made if absent."""
    import dask

    from examples.mortgage import etl
    from examples.mortgage import generate as gen

    try:
        return etl.find_dataset(directory)
    except FileNotFoundError:
        pass
    first, last = gen.parse_years(years)
    loans = gen.loans_for_size(int(gb * 1e9), first, last, seed=seed)
    spec = gen.Spec(first, last, loans_per_quarter=loans, seed=seed, loans_per_part=loans)
    say(f"generating ~{gb} GB in {directory} ({loans:,} loans per quarter) ...")
    with dask.config.set(scheduler="processes"):
        made = gen.generate(directory, spec)
    say(f"generated {format_bytes(made.bytes)} in {made.seconds:.1f} s")
    return etl.find_dataset(directory)


def install_pool() -> str:
    """The plugin's default pool in this process, with RMM statistics on top."""
    from dask_gpu_interop.memory.config import MemoryConfig
    from dask_gpu_interop.memory.state import install

    state = install(MemoryConfig.from_options(), owner="stages-benchmark", label="benchmark")
    return state.stack.description()


def profile_chunk(the_plan, device: str, repeats: int) -> dict:
    from examples.mortgage import etl
    from examples.mortgage.stages import Profile

    chunk = max(the_plan.chunks, key=lambda c: c.end - c.start)
    acq = etl.load_acquisitions(the_plan.acquisitions[the_plan.key(chunk)], device, "error",
                                the_plan.names)
    etl.process_chunk(chunk, acq, device, "error", the_plan.names)  # warm-up
    runs = []
    for _ in range(repeats):
        with Profile(device) as profile, profile.stage("chunk"):
            frame, _ = etl.process_chunk(chunk, acq, device, "error", the_plan.names)
        runs.append(profile.records)
        rows = len(frame)
        del frame
    stages = {}
    for name in runs[0]:
        seconds = [r[name].seconds for r in runs]
        peaks = [r[name].peak_bytes for r in runs if r[name].peak_bytes is not None]
        stages[name] = {"seconds": statistics.median(seconds), "min_seconds": min(seconds),
                        "calls": runs[0][name].calls, "peak_bytes": max(peaks) if peaks else None}
    return {"chunk": chunk.path, "chunk_bytes": chunk.end - chunk.start, "rows": rows,
            "stages": stages}


def profile_all(the_plan, device: str) -> dict:
    """Every chunk of the plan, one after the other in this thread, results kept (as the
    ETL persists them): stage totals, to set against the ETL's time on a cluster."""
    from examples.mortgage import etl
    from examples.mortgage.stages import Profile

    kept = []
    started = time.perf_counter()
    with Profile(device) as profile:
        acq = {key: etl.load_acquisitions(sources, device, "error", the_plan.names)
               for key, sources in the_plan.acquisitions.items()}  # its own "acquisitions" stage
        for chunk in the_plan.chunks:
            with profile.stage("chunk"):
                kept.append(etl.process_chunk(chunk, acq[the_plan.key(chunk)], device, "error",
                                              the_plan.names)[0])
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "chunks": len(the_plan.chunks),
            "input_bytes": the_plan.input_bytes, "rows": sum(len(f) for f in kept),
            "stages": {name: {"seconds": r.seconds, "calls": r.calls}
                       for name, r in profile.records.items()}}


def _median_seconds(fn, repeats: int) -> float:
    import cupy

    times = []
    for _ in range(repeats):
        cupy.cuda.runtime.deviceSynchronize()
        started = time.perf_counter()
        fn()
        cupy.cuda.runtime.deviceSynchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def parser_variants(the_plan, repeats: int) -> dict:
    """Steps of the GPU ETL against the alternatives, on one chunk: the label by the kernel and
    by cuDF's scans; the newlines found by the reader's kernel and by CuPy; the numbers parsed
    by the reader's kernel from the device copy (what the ETL does), and by libcudf from the
    pinned host copy in parts (the ETL's way for number forms the kernel leaves to it), at
    once, and from a device copy; cuDF's own read_csv of every column from host bytes, and
    the copy alone."""
    import cupy

    from examples.mortgage import (
        chunk_bytes,
        features,
        lines,
        number_fields,
        read,
        schema,
    )
    from examples.mortgage.backend import Backend

    chunk = max(the_plan.chunks, key=lambda c: c.end - c.start)
    host, _ = chunk.read(chunk_bytes.PINNED.take)  # page-locked, kept
    raw = cupy.asarray(host)
    layout = lines.of(raw, cupy)
    numbers = [c.name for c in schema.PERFORMANCE.columns if c.kind in (schema.ID, schema.NUMBER)]
    if number_fields.parse(raw, layout.starts, layout.ends, schema.PERFORMANCE, numbers) is None:
        raise SystemExit("the chunk has numbers the kernel leaves to libcudf: no comparison")
    part = read.parse_part_bytes(len(host))
    frame = read.read_table(chunk, schema.PERFORMANCE, Backend("gpu")).frame
    return {
        "label by one thread per row (the ETL)": _median_seconds(
            lambda: features._label_on_device(frame), repeats),
        "label by cuDF's scans (the reverse running minimum)": _median_seconds(
            lambda: features._label(frame), repeats),
        "copy to device": _median_seconds(lambda: cupy.asarray(host), repeats),
        "newlines by the reader's kernel (the ETL)": _median_seconds(
            lambda: lines.newlines(raw, cupy), repeats),
        "newlines by CuPy's flatnonzero": _median_seconds(
            lambda: cupy.flatnonzero(raw == lines.NEWLINE), repeats),
        "numbers by the reader's kernel, from the device copy (the ETL)": _median_seconds(
            lambda: number_fields.parse(raw, layout.starts, layout.ends, schema.PERFORMANCE,
                                        numbers), repeats),
        f"numbers by libcudf from pinned host memory, {len(read.line_cuts(host, part)) - 1} "
        "parts (the ETL's fallback)": _median_seconds(
            lambda: read.parse_device(host, schema.PERFORMANCE, numbers, part_bytes=part),
            repeats),
        "numbers by libcudf from pinned host memory, at once": _median_seconds(
            lambda: read.parse_device(host, schema.PERFORMANCE, numbers), repeats),
        "numbers by libcudf from a device copy, at once": _median_seconds(
            lambda: read.parse_device(raw, schema.PERFORMANCE, numbers), repeats),
        "cudf.read_csv of host bytes, every column": _median_seconds(
            lambda: read.parse_host(bytes(host), schema.PERFORMANCE, Backend("gpu")), repeats),
    }


def size_sweep(files, sizes: list[str], device: str, repeats: int) -> list[dict]:
    """The largest chunk of the dataset cut at each of ``sizes``: its ETL's time and peak."""
    from examples.mortgage import etl

    out = []
    for size in sizes:
        result = profile_chunk(etl.plan(*files, parse_bytes(size)), device, repeats)
        whole = result["stages"]["chunk"]
        out.append({"partition_size": size, "chunk_bytes": result["chunk_bytes"],
                    "seconds": whole["seconds"], "peak_bytes": whole["peak_bytes"]})
        say(f"{size}: {format_bytes(result['chunk_bytes'])} in {whole['seconds']:.3f} s")
    return out


def markdown(info: dict, result: dict, command: str, memory: str | None) -> str:
    size = result["chunk_bytes"]
    total = result["stages"]["chunk"]["seconds"]
    lines = [
        f"# Mortgage ETL, one chunk by stage, on {machine_name(info)} ({result['device']})",
        "",
        f"Measured {time.strftime('%Y-%m-%dT%H:%M')} with:",
        "", "```", command, "```", "",
        f"- machine: {info.get('cpu')}; GPUs: {', '.join(info.get('gpus', [])) or 'none'}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in info.get('versions', {}).items())}",
        f"- chunk: {os.path.basename(result['chunk'])}, {format_bytes(size)}, "
        f"{result['rows']:,} rows; median of {result['repeats']} runs after a warm-up"
        + (f"; device memory: {memory}" if memory else ""),
        "",
        "| stage | seconds | share | GB/s of CSV | peak device | peak / chunk |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, s in result["stages"].items():
        peak = s["peak_bytes"]
        depth = name.count("/")
        label = ("&nbsp;&nbsp;" * depth) + name.rsplit("/", 1)[-1]
        lines.append(
            f"| {label} | {s['seconds']:.4f} | {s['seconds'] / total:.0%} | "
            f"{size / s['seconds'] / 1e9:.2f} | "
            f"{format_bytes(peak) if peak is not None else '-'} | "
            f"{f'{peak / size:.2f}x' if peak is not None else '-'} |")
    whole = result.get("all_chunks")
    if whole:
        lines += ["", f"Every chunk of the dataset in one thread: {whole['chunks']} chunks, "
                  f"{format_bytes(whole['input_bytes'])}, {whole['rows']:,} rows in "
                  f"{whole['seconds']:.2f} s ({whole['input_bytes'] / whole['seconds'] / 1e9:.2f}"
                  " GB/s)", "", "| stage | seconds (total) | share |", "| --- | ---: | ---: |"]
        for name, s in whole["stages"].items():
            label = ("&nbsp;&nbsp;" * name.count("/")) + name.rsplit("/", 1)[-1]
            lines.append(f"| {label} | {s['seconds']:.3f} | {s['seconds'] / whole['seconds']:.0%} |")
    if result.get("sizes"):
        lines += ["", "The largest chunk at each chunk size (median of "
                  f"{result['repeats']} runs after a warm-up):", "",
                  "| --partition-size | chunk | seconds | GB/s of CSV | peak device | peak / chunk |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in result["sizes"]:
            peak, nbytes = r["peak_bytes"], r["chunk_bytes"]
            lines.append(
                f"| {r['partition_size']} | {format_bytes(nbytes)} | {r['seconds']:.3f} | "
                f"{nbytes / r['seconds'] / 1e9:.2f} | "
                f"{format_bytes(peak) if peak is not None else '-'} | "
                f"{f'{peak / nbytes:.2f}x' if peak is not None else '-'} |")
    if result.get("variants"):
        lines += ["", "| step variant (same chunk) | seconds | GB/s of CSV |",
                  "| --- | ---: | ---: |"]
        lines += [f"| {name} | {sec:.4f} | {size / sec / 1e9:.2f} |"
                  for name, sec in result["variants"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/tmp/mortgage-stages")
    parser.add_argument("--gb", type=float, default=1.2,
                        help="size to generate when absent (one file per quarter)")
    parser.add_argument("--years", default="2007")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--partition-size", default=None,
                        help="text per chunk (default: the ETL's for the device)")
    parser.add_argument("--sizes", default=None,
                        help="also time the largest chunk cut at each of these sizes "
                             "(comma-separated, e.g. 256MiB,1GiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-chunks", action="store_true",
                        help="also run every chunk of the dataset, one after the other")
    parser.add_argument("--name", default=None, help="results file name suffix")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)

    from examples.mortgage import etl

    sizes = [x.strip() for x in (args.sizes or "").split(",") if x.strip()]
    for size in [args.partition_size or "1B", *sizes]:
        parse_bytes(size)  # fails early on a bad size
    files = dataset(args.data, args.gb, args.years, args.seed)
    the_plan = etl.plan(*files, etl.partition_size_for(args.device, args.partition_size))
    memory = install_pool() if args.device == "gpu" else None
    result = profile_chunk(the_plan, args.device, args.repeats)
    result.update(device=args.device, repeats=args.repeats, memory=memory)
    if args.device == "gpu":
        result["variants"] = parser_variants(the_plan, args.repeats)
    if sizes:
        result["sizes"] = size_sweep(files, sizes, args.device, args.repeats)
    if args.all_chunks:
        result["all_chunks"] = profile_all(the_plan, args.device)
    info = machine()
    command = command_line(__file__, argv)
    text = markdown(info, result, command, memory)
    print(text)
    stem = os.path.join(args.out, f"mortgage-stages-{args.device}-{args.name or machine_name(info)}")
    write_results(stem, text, {"command": command, "machine": info, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())

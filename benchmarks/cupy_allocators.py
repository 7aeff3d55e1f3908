"""Where a CuPy allocation's time goes: 1 MiB alloc+free through each allocator, one process.

    python -m benchmarks.cupy_allocators [--out DIR] [--rounds 7] [--count 20000]

A harness that explains benchmarks.vs_dask_cuda's CuPy row: the same RMM pool under RMM's
own ``rmm_cupy_allocator`` (what dask-cuda installs), under the plugin's allocator, and with
zero to three statistics adaptors in between. Variants are interleaved round by round (the
harness, benchmarks/common.py, which also records the machine and the commit and writes
``--out``/cupy-allocators-MACHINE.md and .json), so the spread shows next to each median.
"""

from __future__ import annotations

import statistics
import time

from .common import Script, alternate, header, median_range

MiB = 1 << 20


def stream_per_call_allocator(cupy, resource):
    """The plugin's allocator as it was before it kept the last stream: for comparison."""
    from rmm.pylibrmm.device_buffer import DeviceBuffer
    from rmm.pylibrmm.stream import Stream

    def allocate(nbytes: int):
        stream = Stream(obj=cupy.cuda.get_current_stream())
        buffer = DeviceBuffer(size=nbytes, stream=stream, mr=resource)
        mem = cupy.cuda.UnownedMemory(buffer.ptr, buffer.size, buffer, cupy.cuda.runtime.getDevice())
        return cupy.cuda.MemoryPointer(mem, 0)

    return allocate


def variants(cupy, rmm):
    """name -> (allocator, RMM current resource or None)."""
    from rmm.allocators.cupy import rmm_cupy_allocator

    from dask_gpu_interop.frameworks.cupy import make_allocator

    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30)
    stats1 = rmm.mr.StatisticsResourceAdaptor(pool)
    stats2 = rmm.mr.StatisticsResourceAdaptor(stats1)
    stats3 = rmm.mr.StatisticsResourceAdaptor(stats2)
    own = cupy.get_default_memory_pool().malloc
    return {
        "cupy's own pool": (own, None),
        "rmm_cupy_allocator, pool": (rmm_cupy_allocator, pool),
        "rmm_cupy_allocator, 2 statistics > pool": (rmm_cupy_allocator, stats2),
        "plugin, pool": (make_allocator(cupy, pool), pool),
        "plugin, 1 statistics > pool": (make_allocator(cupy, stats1), pool),
        "plugin, 2 statistics > pool": (make_allocator(cupy, stats2), pool),
        "plugin, 3 statistics > pool": (make_allocator(cupy, stats3), pool),
        "plugin with a Stream per call, 2 statistics > pool": (
            stream_per_call_allocator(cupy, stats2), pool),
    }


def time_one(cupy, count: int) -> float:
    """Microseconds per 1 MiB alloc+free."""
    stream = cupy.cuda.get_current_stream()
    start = time.perf_counter()
    for _ in range(count):
        a = cupy.empty(MiB, dtype=cupy.uint8)
        del a
    stream.synchronize()
    return (time.perf_counter() - start) / count * 1e6


def buffer_only(rmm, resources: dict, count: int) -> dict:
    """DeviceBuffer alloc+free alone, per resource: the C++ adaptors' share of the time."""
    from rmm.pylibrmm.device_buffer import DeviceBuffer

    out = {}
    for name, mr in resources.items():
        start = time.perf_counter()
        for _ in range(count):
            b = DeviceBuffer(size=MiB, mr=mr)
            del b
        out[name] = (time.perf_counter() - start) / count * 1e6
    return out


def options(parser) -> None:
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=20000)


def measure(args, run) -> None:
    import cupy
    import rmm

    table = variants(cupy, rmm)
    runs = {name: [] for name in table}
    for alloc, mr in table.values():  # warm-up
        if mr is not None:
            rmm.mr.set_current_device_resource(mr)
        cupy.cuda.set_allocator(alloc)
        time_one(cupy, 1000)
    for _, name in alternate(table, args.rounds):
        alloc, mr = table[name]
        if mr is not None:
            rmm.mr.set_current_device_resource(mr)
        cupy.cuda.set_allocator(alloc)
        runs[name].append(time_one(cupy, args.count))
    pool = table["plugin, pool"][1]
    adaptors = {"pool": pool}
    mr = pool
    for depth in (1, 2, 3):
        mr = rmm.mr.StatisticsResourceAdaptor(mr)
        adaptors[f"{depth} statistics > pool"] = mr
    buffers = {name: [] for name in adaptors}
    for _ in range(args.rounds):
        for name, value in buffer_only(rmm, adaptors, args.count).items():
            buffers[name].append(value)
    run.payload.update(rounds=args.rounds, count=args.count, cupy=runs, device_buffer=buffers)


def markdown(payload: dict) -> str:
    runs, buffers = payload["cupy"], payload["device_buffer"]
    base = statistics.median(runs["rmm_cupy_allocator, pool"])
    lines = [
        *header("CuPy 1 MiB alloc+free by allocator (one process, interleaved rounds)",
                payload["command"], payload["machine"], payload["commit"], payload["date"],
                used=1),
        "",
        f"{payload['rounds']} rounds of {payload['count']} alloc+free each; median (min-max) us.",
        "",
        "| allocator, resource | us | vs rmm_cupy_allocator on the pool |",
        "| --- | --- | --- |",
    ]
    for name, values in runs.items():
        lines.append(f"| {name} | {median_range(values)} | "
                     f"{statistics.median(values) / base:.2f} |")
    lines += ["", "DeviceBuffer(size=1 MiB, mr=...) alone:", "", "| resource | us |", "| --- | --- |"]
    for name, values in buffers.items():
        lines.append(f"| {name} | {median_range(values)} |")
    return "\n".join(lines) + "\n"


SCRIPT = Script(__file__, __doc__, options=options, measure=measure, markdown=markdown,
                name="cupy-allocators")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

"""A file in the page cache to the device, two ways, per call:

- ``read``: the mortgage reader's way: several threads read it into page-locked memory
  (``chunk_bytes.read_range``), then one copy to the device;
- ``register``: map the file and register its pages with CUDA (``cudaHostRegister``,
  read-only), copy from them, unregister; ``register-populate`` maps with MAP_POPULATE.

    python benchmarks/page_cache_to_device.py FILE [--gpu 0] [--method read] [--repeats 5]

Run two at once, on two GPUs and two files, to see how the host shares them. Prints the
median seconds of each phase: first (the read, or the mapping and registering), copy, last
(unregistering), and the total as GB/s.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time

import numpy as np

READ_ONLY = 0x08  # cudaHostRegisterReadOnly


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--method", default="read",
                        choices=("read", "register", "register-populate"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import cupy

    from examples.mortgage import chunk_bytes

    cupy.cuda.Device(args.gpu).use()
    runtime = cupy.cuda.runtime
    size = os.path.getsize(args.file)
    device = cupy.empty(size, dtype=cupy.uint8)
    fd = os.open(args.file, os.O_RDONLY)
    host = chunk_bytes.PINNED.take(size) if args.method == "read" else None

    def once():
        started = time.perf_counter()
        if host is not None:
            chunk_bytes.read_range(args.file, 0, host)
            first = time.perf_counter()
            runtime.memcpy(device.data.ptr, host.ctypes.data, size, runtime.memcpyHostToDevice)
            return first - started, time.perf_counter() - first, 0.0
        flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if args.method.endswith("populate") else 0)
        mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ, flags=flags)
        pages = np.frombuffer(mapped, dtype=np.uint8)
        runtime.hostRegister(pages.ctypes.data, size, READ_ONLY)
        first = time.perf_counter()
        runtime.memcpy(device.data.ptr, pages.ctypes.data, size, runtime.memcpyHostToDevice)
        copied = time.perf_counter()
        runtime.hostUnregister(pages.ctypes.data)
        del pages
        mapped.close()
        return first - started, copied - first, time.perf_counter() - copied

    once()  # the file into the page cache, the buffers made
    runs = [once() for _ in range(args.repeats)]
    first, copy, last = (statistics.median(r[i] for r in runs) for i in range(3))
    total = statistics.median(sum(r) for r in runs)
    with open(args.file, "rb") as f:
        assert cupy.asnumpy(device[:4096]).tobytes() == f.read(4096), "the copy differs"
    print(f"gpu{args.gpu} {args.method:17s} {size / 2**30:.2f} GiB: first {first:.4f} "
          f"copy {copy:.4f} last {last:.4f} total {total:.4f} s = {size / total / 1e9:.1f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

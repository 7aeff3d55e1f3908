"""Raw GPU-to-GPU copies (PyTorch): the ceiling that worker-to-worker transfers are held to.

    python benchmarks/peer.py [--sizes 1073741824] [--repeats 5] [--pairs all|first] [--concurrent]

Times ``dst.copy_(src)`` from each GPU to each other one, one pair at a time (each link on its
own), and with ``--concurrent`` every GPU sending to every other at once (what an all-to-all
shuffle asks of the machine: on an NVSwitch the links share each GPU's NVLink ports, so the
concurrent figure, not the sum of the pairs, is the real ceiling). Prints JSON; the other
benchmarks run it in a child process so that its memory goes with it, and their results files
carry its figures. Repeats are timed by the harness (benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import timed  # noqa: E402

GiB = 1 << 30


def ordered_pairs(gpus: int, which: str = "all") -> list[tuple[int, int]]:
    """(source, destination) GPU indices: every ordered pair, or only 0 -> 1."""
    if which == "first":
        return [(0, 1)] if gpus >= 2 else []
    return list(itertools.permutations(range(gpus), 2))


def _copy_times(torch, src, dst, repeats: int) -> list[float]:
    devices = (src.device, dst.device)

    def sync():
        for d in devices:
            torch.cuda.synchronize(d)

    # one warm-up copy: peer mappings, the first launch
    return timed(lambda: dst.copy_(src), repeats, warmup=1, sync=sync)


def pairwise(sizes: list[int], repeats: int, pairs: list[tuple[int, int]]) -> dict:
    """``{"i->j": {"peer_access": bool, "runs": {size: [seconds...]}}}``, one pair at a time."""
    import torch

    out = {}
    for i, j in pairs:
        entry = {"peer_access": torch.cuda.can_device_access_peer(i, j), "runs": {}}
        for n in sizes:
            src = torch.ones(n, dtype=torch.uint8, device=f"cuda:{i}")
            dst = torch.empty(n, dtype=torch.uint8, device=f"cuda:{j}")
            entry["runs"][str(n)] = _copy_times(torch, src, dst, repeats)
            del src, dst
            torch.cuda.empty_cache()
        out[f"{i}->{j}"] = entry
    return out


def concurrent(size: int, repeats: int, gpus: int) -> dict:
    """Every GPU copies ``size`` bytes to every other GPU at once, each copy on its own
    stream: ``{"bytes": total bytes per round, "runs": [seconds...]}``."""
    import torch

    pairs = ordered_pairs(gpus)
    if not pairs:
        return {"bytes": 0, "runs": []}
    srcs = {i: torch.ones(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(gpus)}
    dsts = {(i, j): torch.empty(size, dtype=torch.uint8, device=f"cuda:{j}") for i, j in pairs}
    streams = {(i, j): torch.cuda.Stream(device=f"cuda:{i}") for i, j in pairs}

    def sync():
        for d in range(gpus):
            torch.cuda.synchronize(d)

    def launch():
        for pair in pairs:
            with torch.cuda.stream(streams[pair]):
                dsts[pair].copy_(srcs[pair[0]], non_blocking=True)

    runs = timed(launch, repeats, warmup=1, sync=sync)
    return {"bytes": size * len(pairs), "pairs": len(pairs), "runs": runs}


def bandwidth(nbytes: int, times: list[float]) -> float:
    """GB/s of the median time."""
    return nbytes / statistics.median(times) / 1e9


def summary(result: dict) -> dict:
    """The figures an all-to-all is held to: the sum of every link's own bandwidth (largest
    size), and the concurrent all-to-all copy's aggregate."""
    out = {}
    pairs = result.get("pairs") or {}
    if pairs:
        largest = max(int(n) for entry in pairs.values() for n in entry["runs"])
        links = {p: bandwidth(largest, e["runs"][str(largest)]) for p, e in pairs.items()}
        out["links_GBps"] = links
        out["sum_of_links_GBps"] = sum(links.values())
        out["link_size"] = largest
    both = result.get("concurrent") or {}
    if both.get("runs"):
        out["concurrent_GBps"] = bandwidth(both["bytes"], both["runs"])
    return out


def measure(sizes: list[int], repeats: int, which: str = "all", with_concurrent: bool = False,
            python: str = sys.executable) -> dict:
    """Run this module in a child process (its device memory is freed when it exits)."""
    command = [python, __file__, "--sizes", ",".join(map(str, sizes)), "--repeats",
               str(repeats), "--pairs", which] + (["--concurrent"] if with_concurrent else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or "failed").strip().splitlines()
        return {"error": lines[-1] if lines else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=str(GiB), help="bytes per copy, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pairs", choices=("all", "first"), default="all")
    parser.add_argument("--concurrent", action="store_true",
                        help="also every GPU to every other at once (the largest size)")
    return parser


def parse(argv=None) -> argparse.Namespace:
    """The arguments, checked; nothing runs."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    try:
        args.size_list = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        parser_.error(f"--sizes {args.sizes!r}: bytes, comma-separated")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    import torch

    gpus = torch.cuda.device_count()
    sizes = args.size_list
    result = {"gpus": gpus, "pairs": pairwise(sizes, args.repeats, ordered_pairs(gpus, args.pairs))}
    if args.concurrent:
        result["concurrent"] = concurrent(max(sizes), args.repeats, gpus)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Raw GPU-to-GPU copies (PyTorch): the ceiling that worker-to-worker transfers are held to.

    python -m benchmarks.peer [--sizes 1073741824] [--repeats 5] [--pairs all|first] [--concurrent]

Times ``dst.copy_(src)`` from each GPU to each other one, one pair at a time (each link on its
own), and with ``--concurrent`` every GPU sending to every other at once (what an all-to-all
shuffle asks of the machine: on an NVSwitch the links share each GPU's NVLink ports, so the
concurrent figure, not the sum of the pairs, is the real ceiling). Prints JSON; the other
benchmarks run it in a child process so that its memory goes with it, and their results files
carry its figures: a helper, the one module here that is no ``common.Script`` (it writes no
results file of its own). Repeats are timed by the harness (benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

from .common import in_child, timed

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


def copies(sizes: list[int], repeats: int, which: str = "all",
           with_concurrent: bool = False) -> dict:
    """Every pair's copies (``which``: all or the first), and with ``with_concurrent`` every
    GPU to every other at once (the largest size)."""
    import torch

    gpus = torch.cuda.device_count()
    result = {"gpus": gpus, "pairs": pairwise(sizes, repeats, ordered_pairs(gpus, which))}
    if with_concurrent:
        result["concurrent"] = concurrent(max(sizes), repeats, gpus)
    return result


def measure(sizes: list[int], repeats: int, which: str = "all",
            with_concurrent: bool = False) -> dict:
    """:func:`copies` in a child process (its device memory is freed when it exits);
    ``{"error": its last line}`` where it fails."""
    try:
        return in_child(f"m.copies({sizes!r}, {repeats!r}, {which!r}, {with_concurrent!r})",
                        setup="from benchmarks import peer as m")
    except RuntimeError as err:
        return {"error": str(err).splitlines()[0]}


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
    print(json.dumps(copies(args.size_list, args.repeats, args.pairs, args.concurrent)))


if __name__ == "__main__":
    main()

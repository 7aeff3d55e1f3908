"""Worker-to-worker transfer of GPU data, side by side in one run (2 GPUs).

    python -m benchmarks.transfer [--sizes 64MiB,1GiB,4GiB] [--protocols ucx,tcp]
                                  [--kinds cupy,torch,cudf] [--repeats 7] [--tcp-repeats 3]
                                  [--pool-size 0.5] [--setup preload|plugin] [--pairs first|all]
                                  [--out DIR]

Moves CuPy arrays, torch tensors and cuDF frames from the worker on GPU 0 to the worker on
GPU 1 of a LocalCUDACluster with the GPUMemoryPlugin (``--pairs all``: between every ordered
pair of GPUs, one worker per GPU), over UCX and over TCP, and measures a raw peer copy of the
same pairs (torch, benchmarks.peer) as the ceiling. The "anchor" column holds the figures
the goals were set against (dask-cuda 26.10 without this library, 2xH200, as given then; not
measured by this script): UCX 19 ms at 64 MiB, 55 GB/s at 1 GiB, 118 GB/s at 4 GiB; TCP
1.1 GB/s; peer copy 396 GB/s.
Goals: torch/CuPy >= 0.95 at every size; >= 250 GB/s at 4 GiB over UCX; <= 5 ms at 64 MiB.

How each transfer is timed: the data is made on worker 0 by a task pinned there (outside the
timing); a task pinned on worker 1 then reads its last element and synchronizes the device,
so the transfer, the receiver's allocation and deserialization are all inside the time. Each
repeat moves a new key (no replica is reused) and releases it after; the kinds of data
alternate repeat by repeat (the harness, benchmarks/common.py). The median of the repeats is reported with the empty-task round trip (a no-op task on worker 1) subtracted;
that round trip is reported on its own, and so is the worker's own measure of the incoming
transfer (distributed's transfer log on worker 1).

NVLink multicast is never switched on: no NCCL_NVLS_* (or other NCCL/UCX) variable is set
here; the machine's environment is recorded as found. Knobs worth measuring are listed in
benchmarks/transfer_notes.md. Without distributed-ucxx, the UCX rows say so and TCP still runs.
Results, through the harness (the machine, the commit): DIR/transfer-MACHINE.md and .json (DIR
defaults to benchmarks/results).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import statistics
import time

from . import peer  # the raw copies
from .common import Script, alternate, choices, header

MiB = 1 << 20
GiB = 1 << 30
KINDS = ("cupy", "torch", "cudf")
PROTOCOLS = ("ucx", "tcp")
ANCHORS = {
    ("ucx", 64 * MiB): "19 ms (3.5 GB/s)",
    ("ucx", GiB): "19 ms (55 GB/s)",
    ("ucx", 4 * GiB): "36 ms (118 GB/s)",
    ("tcp", None): "1.1 GB/s",
    ("peer", 4 * GiB): "396 GB/s",
}
# The options the table describes, kept in the results.
SETTINGS = ("sizes", "protocols", "kinds", "repeats", "tcp_repeats", "pool_size", "setup",
            "pairs")
# Environment that decides how UCX and NCCL move data: recorded, never changed.
RECORDED_ENV = ("UCX_", "NCCL_", "CUDA_VISIBLE_DEVICES", "DASK_DISTRIBUTED__COMM", "DASK_UCX")


def parse_size(text: str) -> int:
    text = text.strip()
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10), ("B", 1)):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def human(nbytes: int) -> str:
    return f"{nbytes // GiB} GiB" if nbytes >= GiB else f"{nbytes // MiB} MiB"


# ------------------------------------------------------------------ tasks, run on the workers


def register_serializers() -> bool:
    import dask_gpu_interop.serialize as ser

    ser.register()
    return True


def make(kind: str, nbytes: int, seed: int):
    """``nbytes`` of float32 (cuDF: 4 float64 columns) on this worker's GPU, ready."""
    if kind == "cupy":
        import cupy

        x = cupy.full(nbytes // 4, seed, dtype=cupy.float32)
        cupy.cuda.get_current_stream().synchronize()
        return x
    if kind == "torch":
        import torch

        x = torch.full((nbytes // 4,), float(seed), dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        return x
    if kind == "cudf":
        import cudf
        import cupy

        rows = nbytes // (4 * 8)
        df = cudf.DataFrame(
            {f"c{i}": cupy.full(rows, seed + i, dtype=cupy.float64) for i in range(4)}
        )
        cupy.cuda.runtime.deviceSynchronize()
        return df
    raise ValueError(kind)


def touch(x) -> dict:
    """Read the last element (so the data is here and usable) and synchronize the device."""
    kind = type(x).__module__.partition(".")[0]
    if kind == "cupy":
        import cupy

        last = float(x[-1])
        cupy.cuda.runtime.deviceSynchronize()
        on_gpu = True
    elif kind == "torch":
        import torch

        last = float(x[-1])
        torch.cuda.synchronize()
        on_gpu = x.is_cuda
    else:
        import cupy

        last = float(x[x.columns[-1]].iloc[-1])
        cupy.cuda.runtime.deviceSynchronize()
        on_gpu = True
    return {"last": last, "on_gpu": on_gpu, "type": f"{type(x).__module__}.{type(x).__name__}"}


def noop(i: int) -> int:
    return i


def last_incoming(dask_worker=None) -> dict | None:
    log = list(getattr(dask_worker, "transfer_incoming_log", []))
    if not log:
        return None
    entry = log[-1]
    return {k: entry.get(k) for k in ("duration", "total", "bandwidth")}


# ------------------------------------------------------------------ the client side


@contextlib.contextmanager
def cluster(protocol: str, pool_size: str, setup: str, workers: int = 2):
    if setup == "preload":
        from dask_gpu_interop import cluster_client

        with cluster_client(
            device="gpu", n_workers=workers, protocol=protocol, memory={"pool_size": pool_size}
        ) as (client, _):
            yield client
        return
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    import dask_gpu_interop

    with (
        LocalCUDACluster(
            n_workers=workers, protocol=protocol, threads_per_worker=1, dashboard_address=None
        ) as local,
        Client(local) as client,
    ):
        client.register_plugin(dask_gpu_interop.GPUMemoryPlugin(pool_size=pool_size))
        yield client


def gpu_of_worker() -> int:
    """The GPU this worker uses (dask-cuda lists it first in CUDA_VISIBLE_DEVICES)."""
    return int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])


def workers_by_gpu(client) -> dict[int, str]:
    return {gpu: address for address, gpu in client.run(gpu_of_worker).items()}


def transfer_once(client, kind: str, nbytes: int, seed: int, w0: str, w1: str):
    """``kind`` data made on worker ``w0``, used on worker ``w1``: (seconds, the worker's
    log of the incoming transfer, what arrived)."""
    from distributed import wait

    x = client.submit(make, kind, nbytes, seed, workers=[w0], pure=False)
    wait(x)
    t0 = time.perf_counter()
    y = client.submit(touch, x, workers=[w1], pure=False)
    arrived = y.result()
    elapsed = time.perf_counter() - t0
    incoming = client.run(last_incoming, workers=[w1])[w1]
    del x, y
    return elapsed, incoming, arrived


def measure_pair(client, kinds: list[str], nbytes: int, repeats: int, w0: str, w1: str) -> dict:
    """Each of ``kinds`` moved from worker ``w0`` to ``w1`` ``repeats`` times, the kinds
    alternating round by round after a warm-up round (allocations, IPC handles):
    ``{kind: {"times", "worker_times", "arrived"} or {"error"}}``."""
    rows = {kind: {"times": [], "worker_times": [], "arrived": None} for kind in kinds}
    for round_, kind in alternate(kinds, repeats + 1):
        if "error" in rows[kind]:
            continue
        try:
            elapsed, incoming, arrived = transfer_once(client, kind, nbytes, round_, w0, w1)
        except Exception as err:  # one failure must not lose the others
            rows[kind] = {"error": f"{type(err).__name__}: {err}"}
            continue
        rows[kind]["arrived"] = arrived
        if round_ == 0:
            continue
        rows[kind]["times"].append(elapsed)
        if incoming and incoming.get("duration"):
            rows[kind]["worker_times"].append(incoming["duration"])
    return rows


def empty_round_trip(client, repeats: int, w1: str) -> list[float]:
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        client.submit(noop, i, workers=[w1], pure=False).result()
        if i:
            times.append(time.perf_counter() - t0)
    return times


def measure(args, run) -> None:
    from dask_gpu_interop.device import gpu_count

    if gpu_count() < 2:
        raise SystemExit("the transfers need 2 GPUs (worker 0 and worker 1 on different GPUs)")
    results = run.payload
    results.update({
        "settings": {name: getattr(args, name) for name in SETTINGS},
        "env": {k: v for k, v in os.environ.items() if k.startswith(RECORDED_ENV)},
        "versions": versions(),
        "peer": peer.measure(args.sizes, args.repeats, args.pairs,
                             with_concurrent=args.pairs == "all"),
        "protocols": {},
    })
    gpus = gpu_count()
    for protocol in args.protocols:
        if protocol == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
            results["protocols"][protocol] = {"skipped": "distributed-ucxx is not installed"}
            continue
        repeats = args.tcp_repeats if protocol == "tcp" else args.repeats
        entry = {"rows": {}, "pairs": {}, "empty_at": {}}
        pairs = peer.ordered_pairs(gpus, args.pairs)
        try:
            workers = gpus if args.pairs == "all" else 2
            with cluster(protocol, args.pool_size, args.setup, workers) as client:
                client.run(register_serializers)
                register_serializers()
                on = workers_by_gpu(client)
                for gpu in sorted({j for _, j in pairs}):
                    entry["empty_at"][str(gpu)] = empty_round_trip(
                        client, max(repeats, 10), on[gpu]
                    )
                entry["empty"] = entry["empty_at"]["1"]
                for i, j in pairs:
                    rows = entry["pairs"].setdefault(f"{i}->{j}", {})
                    for nbytes in args.sizes:
                        print(f"{protocol} {i}->{j} {', '.join(args.kinds)} {human(nbytes)} ...",
                              flush=True)
                        for kind, row in measure_pair(client, args.kinds, nbytes, repeats, on[i],
                                                 on[j]).items():
                            rows[f"{kind}:{nbytes}"] = row
                entry["rows"] = entry["pairs"].get("0->1", {})
        except Exception as err:
            entry["error"] = f"{type(err).__name__}: {err}"
        results["protocols"][protocol] = entry


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("dask", "distributed", "dask_cuda", "distributed_ucxx", "ucxx", "rmm", "cupy",
                 "cudf", "torch"):  # fmt: skip
        try:
            out[name] = __import__(name).__version__
        except Exception:
            out[name] = None
    return out


# ------------------------------------------------------------------ the report


def markdown(results: dict) -> str:
    args = argparse.Namespace(**results["settings"])
    lines = [
        *header(f"Worker-to-worker transfer, {results['machine_name']}", results["command"],
                results["machine"], results["commit"], results["date"], versions=False),
        f"- versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items() if v)}",
        f"- UCX/NCCL environment as found: {results['env'] or 'none set'}",
        f"- setup: {args.setup}, pool size {args.pool_size}, median of {args.repeats} (UCX) / "
        f"{args.tcp_repeats} (TCP) after one warm-up; the empty-task round trip is subtracted",
        "",
    ]
    peer_result = results["peer"]
    first = (peer_result.get("pairs") or {}).get("0->1")
    lines += ["## Raw peer copy GPU0 -> GPU1 (torch): the ceiling", ""]
    if first is None:
        lines += [f"failed: {peer_result.get('error', 'not measured')}", ""]
    else:
        lines += [f"peer access: {first['peer_access']}", "",
                  "| size | median ms | GB/s | anchor |", "| --- | --- | --- | --- |"]  # fmt: skip
        for n, times in first["runs"].items():
            med = statistics.median(times)
            anchor = ANCHORS.get(("peer", int(n)), "")
            lines.append(
                f"| {human(int(n))} | {med * 1e3:.2f} | {int(n) / med / 1e9:.1f} | {anchor} |"
            )
        lines.append("")
    cupy_bw = {}
    for protocol, entry in results["protocols"].items():
        lines += [f"## {protocol.upper()}", ""]
        if "skipped" in entry or "error" in entry:
            lines += [f"{entry.get('skipped') or 'failed: ' + entry['error']}", ""]
            if "rows" not in entry or not entry["rows"]:
                continue
        empty = statistics.median(entry.get("empty") or [0.0])
        lines += [
            f"empty-task round trip (no-op on worker 1): {empty * 1e3:.2f} ms median",
            "",
            "| data | size | end to end ms | minus empty ms | GB/s | worker-measured ms | GB/s "
            "| torch/CuPy | arrived as | anchor |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for kind in args.kinds:
            for nbytes in args.sizes:
                row = entry["rows"].get(f"{kind}:{nbytes}")
                if row is None:
                    continue
                if "error" in row:
                    lines.append(
                        f"| {kind} | {human(nbytes)} | failed: {row['error'][:200]} |||||||"
                    )
                    continue
                med = statistics.median(row["times"])
                net = max(med - empty, 1e-9)
                bw = nbytes / net / 1e9
                wt = statistics.median(row["worker_times"]) if row["worker_times"] else None
                if kind == "cupy":
                    cupy_bw[(protocol, nbytes)] = bw
                ratio = ""
                if kind == "torch" and (protocol, nbytes) in cupy_bw:
                    ratio = f"{bw / cupy_bw[(protocol, nbytes)]:.2f}"
                anchor = ANCHORS.get((protocol, nbytes)) or ANCHORS.get((protocol, None), "")
                arrived = row["arrived"] or {}
                where = f"{arrived.get('type', '?')} {'GPU' if arrived.get('on_gpu') else 'host'}"
                lines.append(
                    f"| {kind} | {human(nbytes)} | {med * 1e3:.2f} | {net * 1e3:.2f} | {bw:.1f} "
                    f"| {'' if wt is None else f'{wt * 1e3:.2f}'} "
                    f"| {'' if wt is None else f'{nbytes / wt / 1e9:.1f}'} | {ratio} | {where} "
                    f"| {anchor} |"
                )
        lines.append("")
    if args.pairs == "all":
        lines += pair_matrices(results, args)
    lines += [
        "## Goals",
        "",
        "- torch/CuPy >= 0.95 at every size; >= 250 GB/s at 4 GiB over UCX; <= 5 ms at 64 MiB",
        "  (the 'minus empty' column).",
        "",
    ]
    return "\n".join(lines)


def matrix(title: str, gpus: list[int], value) -> list[str]:
    """A source x destination table; ``value(i, j)`` is the cell's text."""
    lines = [title, "", "| from \\ to | " + " | ".join(f"GPU {j}" for j in gpus) + " |",
             "| --- |" + " ---: |" * len(gpus)]
    for i in gpus:
        cells = ["-" if i == j else value(i, j) for j in gpus]
        lines.append(f"| GPU {i} | " + " | ".join(cells) + " |")
    return lines + [""]


def pair_bandwidth(entry: dict, pair: str, kind: str, nbytes: int) -> float | None:
    """GB/s of one pair's transfer, the destination's empty round trip subtracted."""
    row = entry.get("pairs", {}).get(pair, {}).get(f"{kind}:{nbytes}")
    if not row or "error" in row or not row.get("times"):
        return None
    empty = statistics.median(entry["empty_at"].get(pair.split("->")[1]) or [0.0])
    return nbytes / max(statistics.median(row["times"]) - empty, 1e-9) / 1e9


def pair_matrices(results: dict, args) -> list[str]:
    """Every ordered pair: the raw peer copy and each protocol's transfer, GB/s."""
    peer_result = results["peer"]
    pairs = peer_result.get("pairs") or {}
    gpus = sorted({int(g) for p in pairs for g in p.split("->")}) or list(range(2))
    lines = ["## Every pair of GPUs", ""]
    ceiling = peer.summary(peer_result)
    if "links_GBps" in ceiling:
        links = ceiling["links_GBps"]
        lines += matrix(f"### Raw peer copy, {human(ceiling['link_size'])}, GB/s (one pair at a "
                        "time)", gpus, lambda i, j: f"{links[f'{i}->{j}']:.1f}")
        lines.append(f"- sum of the links, each measured alone: "
                     f"{ceiling['sum_of_links_GBps']:.0f} GB/s")
    if "concurrent_GBps" in ceiling:
        lines.append(f"- every GPU copying to every other at once: "
                     f"{ceiling['concurrent_GBps']:.0f} GB/s in aggregate")
    lines.append("")
    for protocol, entry in results["protocols"].items():
        if not entry.get("pairs"):
            continue
        for kind in args.kinds:
            for nbytes in args.sizes:
                def cell(i, j, entry=entry, kind=kind, nbytes=nbytes):
                    bw = pair_bandwidth(entry, f"{i}->{j}", kind, nbytes)
                    return "failed" if bw is None else f"{bw:.1f}"
                lines += matrix(f"### {protocol.upper()}, {kind}, {human(nbytes)}: GB/s end to "
                                "end, the destination's empty round trip subtracted", gpus, cell)
    return lines


def options(parser) -> None:
    parser.add_argument("--sizes", default="64MiB,1GiB,4GiB")
    parser.add_argument("--protocols", default="ucx,tcp")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tcp-repeats", type=int, default=3, help="TCP is slow: fewer repeats")
    parser.add_argument("--pool-size", default="0.5", help="the plugin's RMM pool per worker")
    parser.add_argument("--setup", choices=("preload", "plugin"), default="preload",
                        help="preload: cluster_client (workers start with our preload); "
                        "plugin: LocalCUDACluster + client.register_plugin")  # fmt: skip
    parser.add_argument("--pairs", choices=("first", "all"), default="first",
                        help="first: GPU 0 -> GPU 1 on a 2-worker cluster; all: every ordered "
                        "pair, one worker per GPU (use fewer --kinds/--sizes: pairs x kinds x "
                        "sizes transfers)")  # fmt: skip


def check_arguments(parser_, args) -> None:
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    except ValueError:
        parser_.error(f"--sizes {args.sizes!r}: sizes such as 64MiB,1GiB")
    args.protocols = choices(parser_, "--protocols", args.protocols, PROTOCOLS)
    args.kinds = choices(parser_, "--kinds", args.kinds, KINDS)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="transfer", gpus=lambda args: None)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

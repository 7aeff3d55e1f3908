"""All-to-all: a Dask shuffle of a large cuDF frame across every GPU, over UCX and over TCP.

    python benchmarks/shuffle.py [--per-worker 8GiB] [--partitions-per-worker 8]
                                 [--protocols ucx,tcp] [--methods tasks] [--repeats 3]
                                 [--workers 4] [--device gpu|cpu] [--out DIR]

Each worker (one per GPU, the GPUMemoryPlugin's pool, our serializers) makes its share of a
frame of an int64 key and three float64 columns; the frame is then shuffled on the key into as
many partitions and persisted. With keys spread evenly, (W-1)/W of the frame crosses between
workers; the aggregate bandwidth is that volume over the shuffle's time, held against the sum of
the peer-copy bandwidth of every link measured alone and against every GPU copying to every
other at once (benchmarks/peer.py). The bytes the workers logged as received during the shuffle
are reported too (tasks method only: P2P moves data outside that log; a multi-stage task
shuffle moves data more than once). An untimed first run of each method is checked: no row
lost, and no key in two partitions; the timed runs of the methods then alternate.

``--device cpu`` runs the same with pandas on a LocalCluster over TCP (what CI can run).
Results, through the harness (benchmarks/common.py: the machine, the commit, the alternation):
DIR/shuffle-MACHINE.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import sys
import time

from dask.utils import format_bytes, parse_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's root
import peer  # noqa: E402
from common import (  # noqa: E402
    alternate,
    choices,
    command_line,
    commit,
    header,
    machine,
    machine_name,
    now,
    output_options,
    say,
    write_results,
)
from transfer import PROTOCOLS  # noqa: E402

ROW_BYTES = 32  # int64 key + three float64 columns
KEYS = 1 << 22  # distinct keys: many rows share one, so "one partition per key" is tested
METHODS = ("tasks", "p2p")


# ------------------------------------------------------------------ tasks, run on the workers


def make_partition(index: int, rows: int, device: str):
    """``rows`` rows of random keys and values, made where the task runs."""
    if device == "gpu":
        import cudf
        import cupy as xp

        frame = cudf.DataFrame
    else:
        import numpy as xp
        import pandas

        frame = pandas.DataFrame
    rng = xp.random.default_rng(index)
    columns = {"key": rng.integers(0, KEYS, rows, dtype=xp.int64)}
    columns.update({name: rng.random(rows, dtype=xp.float64) for name in ("a", "b", "c")})
    out = frame(columns)
    if device == "gpu":
        xp.cuda.runtime.deviceSynchronize()
    return out


def received_since(start: float, dask_worker=None) -> int:
    """Bytes this worker logged as received from other workers since ``start`` (time.time)."""
    log = list(getattr(dask_worker, "transfer_incoming_log", []))
    return sum(int(e.get("total") or 0) for e in log if e.get("start", 0) >= start)


def register_serializers() -> bool:
    import dask_gpu_interop.serialize as ser

    ser.register()
    return True


# ------------------------------------------------------------------ the client side


@contextlib.contextmanager
def cluster(device: str, workers: int, protocol: str, pool_size: str | None):
    from dask_gpu_interop import cluster_client

    memory = {"pool_size": pool_size} if device == "gpu" and pool_size else None
    with cluster_client(device=device, n_workers=workers, threads_per_worker=1,
                        protocol=protocol, memory=memory) as (client, _):  # fmt: skip
        yield client


def build_frame(client, device: str, per_worker: int, parts_per_worker: int):
    """``parts_per_worker`` partitions made on every worker, and a function that gives them as
    a frame."""
    import dask.dataframe as dd
    from distributed import wait

    workers = sorted(client.scheduler_info()["workers"])
    rows = max(1, per_worker // parts_per_worker // ROW_BYTES)
    futures = [
        client.submit(make_partition, i, rows, device, workers=[workers[i % len(workers)]],
                      pure=False)  # fmt: skip
        for i in range(parts_per_worker * len(workers))
    ]
    wait(futures)
    meta = make_partition(0, 0, "cpu")
    if device == "gpu":
        import cudf

        meta = cudf.from_pandas(meta)
    def frame(run: int):
        """The same partitions under a new name for each run: a new shuffle, not old keys."""
        return dd.from_delayed(futures, meta=meta, verify_meta=False, prefix=f"shuffle-in-{run}")

    return frame, futures, rows * len(futures)


def check(shuffled, rows: int) -> dict:
    """No row lost; every key in exactly one output partition."""
    import dask

    counts, keys = dask.compute(
        shuffled.map_partitions(len), shuffled.map_partitions(lambda p: p["key"].nunique())
    )
    total_keys = shuffled["key"].nunique().compute()
    return {"rows": int(sum(counts)), "rows_ok": int(sum(counts)) == rows,
            "keys_ok": int(sum(keys)) == int(total_keys)}  # fmt: skip


def shuffle_once(client, frame, method: str):
    from distributed import wait

    start_wall = time.time()
    started = time.perf_counter()
    out = frame.shuffle("key", shuffle_method=method, npartitions=frame.npartitions).persist()
    wait(out)
    seconds = time.perf_counter() - started
    received = sum(client.run(received_since, start_wall).values())
    return out, seconds, received


def run(args) -> dict:
    from dask_gpu_interop.device import gpu_count

    workers = args.workers or (gpu_count() if args.device == "gpu" else 2)
    if workers < 2:
        raise SystemExit("shuffle.py needs at least 2 workers (2 GPUs with --device gpu)")
    results = {
        "command": command_line(__file__, args.argv),
        "commit": commit(),
        "machine_info": machine(),
        "date": now(),
        "workers": workers,
        "device": args.device,
        "per_worker": args.per_worker,
        "partitions": workers * args.partitions_per_worker,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "NCCL_"))},
        "runs": {},
    }
    if args.device == "gpu":
        results["peer"] = peer.measure([args.peer_size], 5, "all", with_concurrent=True)
    for protocol in args.protocols:
        try:
            with cluster(args.device, workers, protocol, args.pool_size) as client:
                client.run(register_serializers)
                register_serializers()
                frame, made, rows = build_frame(client, args.device, args.per_worker,
                                                args.partitions_per_worker)  # fmt: skip
                results["rows"] = rows
                results["frame_bytes"] = rows * ROW_BYTES
                names = itertools.count()  # every shuffle gets inputs of its own name
                entries = {m: results["runs"].setdefault(f"{protocol}:{m}", {})
                           for m in args.methods}
                for round_, method in alternate(args.methods, args.repeats + 1):
                    entry = entries[method]
                    if "error" in entry:
                        continue
                    try:
                        out, seconds, received = shuffle_once(client, frame(next(names)), method)
                        if round_ == 0:  # the warm-up, checked
                            entry["check"] = check(out, rows)
                            entry["seconds"], entry["received"] = [], []
                            del out
                            continue
                        del out
                        entry["seconds"].append(seconds)
                        entry["received"].append(received)
                        say(f"{protocol} {method} run {round_}: {seconds:.2f} s, "
                            f"{format_bytes(received)} received")  # fmt: skip
                    except Exception as err:  # one failure must not lose the other rows
                        entry["error"] = f"{type(err).__name__}: {err}"
                        say(f"{protocol} {method} failed: {entry['error']}")
                del frame, made
        except Exception as err:
            results["runs"][f"{protocol}:*"] = {"error": f"{type(err).__name__}: {err}"}
    return results


# ------------------------------------------------------------------ the report


def crossing_bytes(frame_bytes: int, workers: int) -> float:
    """What an even shuffle moves between workers: each keeps 1/W of its share."""
    return frame_bytes * (workers - 1) / workers


def report(results: dict, machine: str) -> str:
    workers = results["workers"]
    frame_bytes = results.get("frame_bytes", 0)
    moved = crossing_bytes(frame_bytes, workers)
    ceiling = peer.summary(results.get("peer") or {})
    lines = [
        *header(f"All-to-all shuffle, {machine}", results["command"],
                results.get("machine_info") or {}, results.get("commit"), results.get("date")),
        f"- {workers} workers ({results['device']}), "
        f"{format_bytes(frame_bytes)} frame ({results.get('rows', 0):,} rows of int64 key + 3 "
        f"float64) in {results['partitions']} partitions, shuffled on the key into as many; "
        f"{format_bytes(int(moved))} cross between workers ((W-1)/W of the frame)",
        f"- UCX/NCCL environment as found: {results['env'] or 'none set'}",
    ]
    if ceiling:
        lines.append(
            f"- ceilings (raw peer copies, {format_bytes(ceiling.get('link_size', 0))}): sum of "
            f"the {len(ceiling.get('links_GBps', {}))} links each alone "
            f"{ceiling.get('sum_of_links_GBps', 0):.0f} GB/s; every GPU to every other at once "
            f"{ceiling.get('concurrent_GBps', 0):.0f} GB/s"
        )
    elif results.get("peer", {}).get("error"):
        lines.append(f"- peer copies failed: {results['peer']['error']}")
    lines += [
        "",
        "| protocol | method | median s | min s | aggregate GB/s | per worker GB/s | vs sum of "
        "links | vs concurrent copy | received (logged) | checked |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, entry in results["runs"].items():
        protocol, method = key.split(":")
        if "error" in entry and not entry.get("seconds"):
            lines.append(f"| {protocol} | {method} | failed: {entry['error'][:160]} |" + " |" * 7)
            continue
        med = statistics.median(entry["seconds"])
        gbps = moved / med / 1e9
        links = ceiling.get("sum_of_links_GBps")
        both = ceiling.get("concurrent_GBps")
        received = statistics.median(entry["received"])
        ok = entry.get("check", {})
        lines.append(
            f"| {protocol} | {method} | {med:.2f} | {min(entry['seconds']):.2f} | {gbps:.1f} | "
            f"{gbps / workers:.1f} | {f'{gbps / links:.1%}' if links else '-'} | "
            f"{f'{gbps / both:.1%}' if both else '-'} | "
            f"{'not logged' if method == 'p2p' else format_bytes(int(received))} | "
            f"{'ok' if ok.get('rows_ok') and ok.get('keys_ok') else f'FAILED {ok}'} |"
        )
    by = {k: statistics.median(e["seconds"]) for k, e in results["runs"].items()
          if e.get("seconds")}  # fmt: skip
    for method in METHODS:
        if f"ucx:{method}" in by and f"tcp:{method}" in by:
            ratio = by[f"tcp:{method}"] / by[f"ucx:{method}"]
            lines.append(f"\nUCX vs TCP ({method}): {ratio:.2f}x")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-worker", default="8GiB", help="frame bytes made on each worker")
    parser.add_argument("--partitions-per-worker", type=int, default=8)
    parser.add_argument("--protocols", default="ucx,tcp")
    parser.add_argument("--methods", default="tasks", help=f"of: {', '.join(METHODS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="default: one per GPU (--device cpu: 2)")  # fmt: skip
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--pool-size", default="0.6", help="the plugin's RMM pool per worker")
    parser.add_argument("--peer-size", default="1GiB", help="bytes per raw peer copy")
    output_options(parser)
    return parser


def parse(argv=None) -> argparse.Namespace:
    """The arguments, checked; nothing runs."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args.per_worker = parse_bytes(args.per_worker)
        args.peer_size = parse_bytes(args.peer_size)
    except ValueError as err:
        parser_.error(f"--per-worker / --peer-size: {err}")
    args.protocols = choices(parser_, "--protocols", args.protocols, PROTOCOLS)
    args.methods = choices(parser_, "--methods", args.methods, METHODS)
    if "ucx" in args.protocols and args.device == "cpu":
        parser_.error("--protocols ucx needs --device gpu (distributed-ucxx); use tcp on CPUs")
    if args.partitions_per_worker < 1:
        parser_.error("--partitions-per-worker must be at least 1")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    results = run(args)
    machine = args.machine or (machine_name(results["machine_info"], results["workers"])
                               if args.device == "gpu" else "cpu")
    text = report(results, machine)
    write_results(os.path.join(args.out, f"shuffle-{machine}"), text, results)
    print(text)


if __name__ == "__main__":
    main()

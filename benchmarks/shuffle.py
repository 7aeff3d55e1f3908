"""All-to-all: the library's shuffle against dask's task and p2p shuffles, on every GPU.

    python -m benchmarks.shuffle [--sizes 64MiB,1GiB,4GiB] [--partitions-per-worker 8]
                                 [--methods library,tasks,p2p] [--p2p-up-to 64MiB]
                                 [--step-bytes 2GiB]
                                 [--protocols ucx,tcp] [--clusters library,dask-cuda]
                                 [--repeats 3] [--workers 2] [--device gpu|cpu]
                                 [--pool-size 0.6] [--spill] [--peer-size 1GiB] [--dry-run]
                                 [--out DIR] [--machine 2xH100] [--commit abc1234]

For each cluster (``library``: the library's ``cluster_client``, one worker per GPU with the
GPUMemoryPlugin's pool; ``dask-cuda``: a plain ``LocalCUDACluster(rmm_pool_size=...)``; with
``--spill``, cuDF's spilling on their workers, for frames beyond the GPUs),
protocol and size (bytes per worker), each worker makes its share of a frame of an int64 key
and three float64 columns (random keys, ``--partitions-per-worker`` partitions each), persisted
as a frame in memory (as a user's is after ``persist``), which is then shuffled on the key into
as many partitions and kept in memory, by each method in turn:

- ``library``: ``dask_gpu_interop.shuffle`` (one batch per pair of workers, each split
  sending its batches itself);
- ``library-steps``: the same in steps of ``--step-bytes`` (``gpu-interop.shuffle.step-bytes``),
  as a worker's share large beside its memory goes (not in the default methods);
- ``library-batches``: the same with ``gpu-interop.shuffle.exchange: batches`` (the batches
  tasks of their own, which dask moves; not in the default methods);
- ``tasks``, ``p2p``: dask's own ``frame.shuffle("key", shuffle_method=...)``, persisted.
  P2P goes through host memory and is slow on GPUs: it runs only at sizes up to
  ``--p2p-up-to``.

The first run of each method at each size is checked, untimed: every row once (the count, and
a checksum of every row's hash against the input's), no key in two partitions. The timed runs
of the methods then alternate, round by round in a rotated order. One more run of the
library's shuffle, untimed, records the task stream: when each step ran (send, or split and batch; output)
and when the output tasks fetched their batches (the transfers), from the shuffle's start.

Figures: the frame's bytes over the time (as issue 41 counts its GB/s), and the bytes that
cross between workers ((W-1)/W of the frame with keys spread evenly) over the time, held
against every GPU copying to every other at once (benchmarks.peer, in a child process, in
the same call) and against the sum of every link alone. The bytes the workers logged as
received are reported too (p2p moves data outside that log). ``--dry-run`` prints the runs
and starts nothing; ``--device cpu`` runs the same with pandas on CPU worker processes over
TCP (what CI can run). Results, through the harness (benchmarks/common.py: the machine, the
commit, the alternation): DIR/shuffle-MACHINE.md and .json.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import time

from dask.utils import format_bytes, parse_bytes

from . import peer
from .common import Script, alternate, choices, header, say
from .transfer import PROTOCOLS

ROW_BYTES = 32  # int64 key + three float64 columns
KEYS = 1 << 22  # distinct keys: many rows share one, so "one partition per key" is tested
METHODS = ("library", "tasks", "p2p")
#: ``--methods`` of the shuffle: dask's and the library's, and the library's in steps.
SHUFFLE_METHODS = ("library", "library-steps", "library-batches", "tasks", "p2p")
CLUSTERS = ("library", "dask-cuda")


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
    """Bytes this worker logged as received from other workers since ``start`` (time.time):
    in its transfer log, and in the library's shuffle inbox (the direct exchange)."""
    log = list(getattr(dask_worker, "transfer_incoming_log", []))
    inbox = getattr(dask_worker, "plugins", {}).get("gpu-shuffle-inbox")
    direct = inbox.received_since(start) if inbox is not None else 0
    return sum(int(e.get("total") or 0) for e in log if e.get("start", 0) >= start) + direct


def register_serializers() -> bool:
    import dask_gpu_interop.serialize as ser

    ser.register()
    return True


def row_hash_sum(part) -> int:
    """The sum, modulo 2**64, of the hash of every row of ``part`` (its columns in name
    order, not its index): equal for two frames holding the same rows in any order and any
    partitions, on one backend."""
    from dask.dataframe.dispatch import hash_object_dispatch

    if len(part) == 0:
        return 0
    hashes = hash_object_dispatch(part[sorted(part.columns)], index=False)
    return int(hashes.astype("uint64").sum()) % (1 << 64)


# ------------------------------------------------------------------ the client side


@contextlib.contextmanager
def cluster(kind: str, device: str, workers: int, protocol: str, pool_size: str | None,
            spill: bool = False):
    """A client of ``workers`` workers, one thread each: the library's ``cluster_client`` or
    dask-cuda's own ``LocalCUDACluster`` with its RMM pool; ``spill``: cuDF's spilling on the
    GPU workers (the plugin's ``spill=True``, dask-cuda's ``enable_cudf_spill``)."""
    if kind == "dask-cuda":
        from dask_cuda import LocalCUDACluster
        from distributed import Client

        pool = float(pool_size) if pool_size and pool_size.replace(".", "", 1).isdigit() \
            else pool_size  # fmt: skip
        with LocalCUDACluster(n_workers=workers, threads_per_worker=1, protocol=protocol,
                              rmm_pool_size=pool, enable_cudf_spill=spill) as local, \
                Client(local) as client:  # fmt: skip
            yield client
        return
    from dask_gpu_interop import cluster_client

    memory = {}
    if device == "gpu" and pool_size:
        memory["pool_size"] = pool_size
    if device == "gpu" and spill:
        memory["spill"] = True
    with cluster_client(device=device, n_workers=workers, threads_per_worker=1,
                        protocol=protocol, memory=memory or None) as (client, _):  # fmt: skip
        yield client


def build_frame(client, device: str, per_worker: int, parts_per_worker: int):
    """``parts_per_worker`` partitions made on every worker, and a function that gives them as
    a frame."""
    import dask.dataframe as dd
    from distributed import wait

    workers = sorted(client.nthreads())
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
        """The same partitions under a new name for each run (a new shuffle, not old keys),
        persisted, as a user's frame in memory is (aliases of the partitions: nothing is
        copied)."""
        out = dd.from_delayed(futures, meta=meta, verify_meta=False,
                              prefix=f"shuffle-in-{run}").persist()
        wait(out)
        return out

    return frame, futures, rows * len(futures)


def checksum(frame) -> int:
    """:func:`row_hash_sum` of the whole frame (each partition's sum comes back as a Python
    int: a frame of them would turn those above 2**63 into floats)."""
    import dask

    sums = dask.compute(*[dask.delayed(row_hash_sum)(part) for part in frame.to_delayed()])
    return sum(sums) % (1 << 64)


def check(shuffled, rows: int, expected_checksum: int | None = None) -> dict:
    """No row lost or doubled; every key in exactly one output partition."""
    import dask

    counts, keys = dask.compute(
        shuffled.map_partitions(len), shuffled.map_partitions(lambda p: p["key"].nunique())
    )
    total_keys = shuffled["key"].nunique().compute()
    out = {"rows": int(sum(counts)), "rows_ok": int(sum(counts)) == rows,
           "keys_ok": int(sum(keys)) == int(total_keys)}  # fmt: skip
    if expected_checksum is not None:
        out["checksum_ok"] = checksum(shuffled) == expected_checksum
    return out


def checked_ok(entry: dict) -> bool:
    found = entry.get("check") or {}
    return bool(found) and all(v for k, v in found.items() if k.endswith("_ok"))


def shuffle_once(client, frame, method: str, step_bytes: int | None = None):
    """(the shuffled frame in memory, seconds, bytes received as logged)."""
    import dask
    from distributed import wait

    import dask_gpu_interop
    from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY, STEP_KEY

    start_wall = time.time()
    started = time.perf_counter()
    if method.startswith("library"):
        steps = {STEP_KEY: step_bytes if method == "library-steps" else "auto",
                 EXCHANGE_KEY: "batches" if method == "library-batches" else "direct"}
        with dask.config.set(steps):
            out = dask_gpu_interop.shuffle(frame, "key", npartitions=frame.npartitions)
    else:
        out = frame.shuffle("key", shuffle_method=method, npartitions=frame.npartitions).persist()
        wait(out)
    seconds = time.perf_counter() - started
    received = sum(client.run(received_since, start_wall).values())
    return out, seconds, received


def step_times(stream: list[dict], start: float) -> dict:
    """When each step of the library's shuffle ran, from its task stream: per step the first
    start and last stop (seconds from ``start``), the tasks' summed busy time and count; and
    the same for the output tasks' fetches of their batches ("transfer")."""
    from dask.utils import key_split

    spans: dict[str, list[tuple[float, float]]] = {}
    for task in stream:
        name = key_split(task["key"])
        if not name.startswith("gpu-shuffle-"):
            continue
        step = name.removeprefix("gpu-shuffle-")
        for startstop in task.get("startstops", ()):
            action = startstop.get("action")
            if action == "compute":
                spans.setdefault(step, []).append((startstop["start"], startstop["stop"]))
            elif action == "transfer" and step == "output":
                spans.setdefault("transfer", []).append((startstop["start"], startstop["stop"]))
    return {
        step: {"first": min(a for a, _ in runs) - start, "last": max(b for _, b in runs) - start,
               "busy": sum(b - a for a, b in runs), "count": len(runs)}  # fmt: skip
        for step, runs in spans.items()
    }


def profile_once(client, frame, exchange: str = "direct") -> dict:
    """One untimed run of the library's shuffle with the task stream recorded."""
    import dask
    from distributed import get_task_stream

    import dask_gpu_interop
    from dask_gpu_interop.all_to_all.plan import EXCHANGE_KEY

    with get_task_stream(client=client) as stream, dask.config.set({EXCHANGE_KEY: exchange}):
        start = time.time()
        out, stats = dask_gpu_interop.shuffle(frame, "key", npartitions=frame.npartitions,
                                              return_stats=True)  # fmt: skip
        seconds = time.time() - start
    del out
    return {"seconds": seconds, "steps": step_times(stream.data, start),
            "crossing_bytes": stats.crossing_bytes, "output_bytes": stats.output_bytes}


def runs_planned(args) -> list[tuple[str, str, int, list[str]]]:
    """(cluster, protocol, size, methods) for every configuration, in the order they run."""
    planned = []
    for kind, protocol, size in itertools.product(args.clusters, args.protocols, args.sizes):
        methods = [m for m in args.methods if m != "p2p" or size <= args.p2p_up_to]
        planned.append((kind, protocol, size, methods))
    return planned


def entry_key(kind: str, protocol: str, size: int, method: str) -> str:
    return f"{kind}|{protocol}|{size}|{method}"


def workers_of(args) -> int:
    """The run's workers: ``--workers``, else one per GPU (2 on CPUs)."""
    from dask_gpu_interop.device import gpu_count

    return args.workers or (gpu_count() if args.device == "gpu" else 2)


def measure(args, run) -> None:
    workers = workers_of(args)
    if workers < 2:
        raise SystemExit("the shuffle needs at least 2 workers (2 GPUs with --device gpu)")
    results = run.payload
    results.update({
        "workers": workers,
        "device": args.device,
        "sizes": args.sizes,
        "partitions": workers * args.partitions_per_worker,
        "repeats": args.repeats,
        "step_bytes": args.step_bytes if "library-steps" in args.methods else None,
        "spill": args.spill,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "NCCL_"))},
        "frames": {},
        "runs": {},
        "profiles": {},
        "errors": {},
    })
    if args.device == "gpu":
        results["peer"] = peer.measure([args.peer_size], 5, "all", with_concurrent=True)
    on_each_cluster(args, runs_planned(args), workers, run, measure_size)


def on_each_cluster(args, planned, workers: int, run, measure_size) -> None:
    """Each (cluster kind, protocol) of ``planned`` on a cluster of its own: ``measure_size``
    for each of its sizes there, the results saved after each (a run cut short keeps what it
    measured); a cluster that fails is recorded in the payload's "errors" and the next runs.
    Every measurement gets inputs of its own name (``names``)."""
    results = run.payload
    names = itertools.count()
    for (kind, protocol), group in itertools.groupby(planned, key=lambda p: p[:2]):
        try:
            with cluster(kind, args.device, workers, protocol, args.pool_size,
                         args.spill) as client:  # fmt: skip
                client.run(register_serializers)
                register_serializers()
                for _, _, size, methods in group:
                    measure_size(client, args, kind, protocol, size, methods, names, results)
                    run.save()
        except Exception as err:  # one cluster failing must not lose the other rows
            results["errors"][f"{kind}|{protocol}"] = f"{type(err).__name__}: {err}"
            say(f"{kind} {protocol} failed: {results['errors'][f'{kind}|{protocol}']}")
            run.save()


def measure_size(client, args, kind, protocol, size, methods, names, results) -> None:
    frame, made, rows = build_frame(client, args.device, size, args.partitions_per_worker)
    results["frames"][str(size)] = {"rows": rows, "bytes": rows * ROW_BYTES}
    expected = checksum(frame(next(names)))
    entries = {m: results["runs"].setdefault(entry_key(kind, protocol, size, m), {})
               for m in methods}  # fmt: skip
    for round_, method in alternate(methods, args.repeats + 1, rotate=True):
        entry = entries[method]
        if "error" in entry:
            continue
        try:
            out, seconds, received = shuffle_once(client, frame(next(names)), method,
                                                  getattr(args, "step_bytes", None))
            if round_ == 0:  # the warm-up, checked
                entry["check"] = check(out, rows, expected)
                entry["seconds"], entry["received"] = [], []
                del out
                continue
            del out
            entry["seconds"].append(seconds)
            entry["received"].append(received)
            say(f"{kind} {protocol} {format_bytes(size)} {method} run {round_}: "
                f"{seconds:.3f} s, {format_bytes(received)} received")  # fmt: skip
        except Exception as err:  # one failure must not lose the other rows
            entry["error"] = f"{type(err).__name__}: {err}"
            say(f"{kind} {protocol} {format_bytes(size)} {method} failed: {entry['error']}")
    for method, exchange in (("library", "direct"), ("library-batches", "batches")):
        if method not in methods or "error" in entries[method]:
            continue
        try:
            results["profiles"][entry_key(kind, protocol, size, method)] = profile_once(
                client, frame(next(names)), exchange)
        except Exception as err:
            entries[method]["profile_error"] = f"{type(err).__name__}: {err}"
    del frame, made


# ------------------------------------------------------------------ the report


def crossing_bytes(frame_bytes: int, workers: int) -> float:
    """What an even shuffle moves between workers: each keeps 1/W of its share."""
    return frame_bytes * (workers - 1) / workers


def rate(gbps: float) -> str:
    """GB/s with the digits that matter at its size."""
    return f"{gbps:.0f}" if gbps >= 100 else f"{gbps:.1f}" if gbps >= 1 else f"{gbps:.3f}"


def split_key(key: str) -> tuple[str, str, int, str]:
    kind, protocol, size, method = key.split("|")
    return kind, protocol, int(size), method


def markdown(results: dict) -> str:
    workers = results["workers"]
    ceiling = peer.summary(results.get("peer") or {})
    both = ceiling.get("concurrent_GBps")
    links = ceiling.get("sum_of_links_GBps")
    lines = [
        *header(f"All-to-all shuffle, {results['machine_name']}", results["command"],
                results["machine"], results["commit"], results["date"]),
        f"- {workers} workers ({results['device']}), one thread each; per worker "
        f"{', '.join(format_bytes(s) for s in results['sizes'])} of int64 key + 3 float64, "
        f"{results['partitions']} partitions in all, shuffled on the key into as many; "
        f"(W-1)/W of the frame crosses between workers; medians of {results['repeats']} runs, "
        "methods alternated",
        f"- UCX/NCCL environment as found: {results['env'] or 'none set'}",
    ]
    if results.get("spill"):
        lines.append("- cuDF's spilling on the workers (--spill)")
    if results.get("step_bytes"):
        lines.append(f"- library-steps: the library's shuffle in steps of "
                     f"{format_bytes(results['step_bytes'])} (gpu-interop.shuffle.step-bytes); "
                     "library: as its default chooses")
    if ceiling:
        lines.append(
            f"- ceilings (raw peer copies, {format_bytes(ceiling.get('link_size', 0))}): sum of "
            f"the {len(ceiling.get('links_GBps', {}))} links each alone {links or 0:.0f} GB/s; "
            f"every GPU to every other at once {both or 0:.0f} GB/s")
    elif (results.get("peer") or {}).get("error"):
        lines.append(f"- peer copies failed: {results['peer']['error']}")
    for where, error in (results.get("errors") or {}).items():
        lines.append(f"- {where.replace('|', ' ')}: failed: {error[:300]}")
    groups: dict[tuple[str, str], list[str]] = {}
    for key in results["runs"]:
        groups.setdefault(split_key(key)[:2], []).append(key)
    for (kind, protocol), keys in groups.items():
        lines += ["", f"### {kind} cluster, {protocol.upper()}", "",
                  "| per worker | method | median s | min s | frame GB/s | crossing GB/s | vs "
                  "all peer copies | vs tasks | received (logged) | checked |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for key in keys:
            lines.append(table_row(results, key, workers, both))
        lines += step_lines(results, kind, protocol, workers)
    return "\n".join(lines) + "\n"


def table_row(results: dict, key: str, workers: int, both: float | None) -> str:
    kind, protocol, size, method = split_key(key)
    entry = results["runs"][key]
    frame_bytes = (results["frames"].get(str(size)) or {}).get("bytes", size * workers)
    if not entry.get("seconds"):
        why = entry.get("error") or "no timed run"
        return f"| {format_bytes(size)} | {method} | failed: {why[:160]} |" + " |" * 7
    med = statistics.median(entry["seconds"])
    crossing = crossing_bytes(frame_bytes, workers) / med / 1e9
    tasks = results["runs"].get(entry_key(kind, protocol, size, "tasks"), {})
    versus = (f"{statistics.median(tasks['seconds']) / med:.2f}x"
              if tasks.get("seconds") and method != "tasks" else "-")
    received = ("not logged" if method == "p2p"
                else format_bytes(int(statistics.median(entry["received"]))))
    ok = "ok" if checked_ok(entry) else f"FAILED {entry.get('check')}"
    return (f"| {format_bytes(size)} | {method} | {med:.3f} | {min(entry['seconds']):.3f} | "
            f"{rate(frame_bytes / med / 1e9)} | {rate(crossing)} | "
            f"{f'{crossing / both:.1%}' if both else '-'} | {versus} | {received} | {ok} |")


def step_lines(results: dict, kind: str, protocol: str, workers: int) -> list[str]:
    profiles = {(split_key(k)[2], split_key(k)[3]): p
                for k, p in (results.get("profiles") or {}).items()
                if split_key(k)[:2] == (kind, protocol)}  # fmt: skip
    if not profiles:
        return []
    lines = ["", "The library's steps in one more run (task stream; seconds from the call: "
             "first start-last stop, and the tasks' summed busy time; a send task splits "
             "and sends its batches itself, where batch tasks do not):", "",
             "| per worker | method | whole s | split | batch | send | transfers | output | "
             "crossing GB/s over the transfers |",
             "| ---: | --- | ---: | --- | --- | --- | --- | --- | ---: |"]
    for (size, method), profile in sorted(profiles.items()):
        steps = profile["steps"]

        def cell(step, steps=steps):
            s = steps.get(step)
            return f"{s['first']:.3f}-{s['last']:.3f} ({s['busy']:.3f}, {s['count']})" if s else "-"

        moving = steps.get("transfer") if "batch" in steps else None  # direct: in the sends
        speed = (rate(profile["crossing_bytes"] / (moving["last"] - moving["first"]) / 1e9)
                 if moving and moving["last"] > moving["first"] else "-")
        lines.append(f"| {format_bytes(size)} | {method} | {profile['seconds']:.3f} | "
                     f"{cell('split')} | {cell('batch')} | {cell('send')} | "
                     f"{cell('transfer')} | {cell('output')} | {speed} |")
    return lines


# ------------------------------------------------------------------ the command line


def cluster_options(parser) -> None:
    """The options of the clusters an all-to-all runs on (the shuffle's and the join's)."""
    parser.add_argument("--protocols", default=None,
                        help="default: ucx,tcp (--device cpu: tcp)")  # fmt: skip
    parser.add_argument("--clusters", default="library",
                        help=f"of: {', '.join(CLUSTERS)} (dask-cuda: GPUs only)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="default: one per GPU (--device cpu: 2)")  # fmt: skip
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--pool-size", default="0.6", help="the RMM pool per worker")
    parser.add_argument("--spill", action="store_true",
                        help="cuDF's spilling on the GPU workers (for frames beyond the GPUs)")


def options(parser) -> None:
    parser.add_argument("--sizes", default="64MiB,1GiB,4GiB",
                        help="frame bytes made on each worker, comma-separated")  # fmt: skip
    parser.add_argument("--per-worker", default=None,
                        help="one size: the same as --sizes SIZE")  # fmt: skip
    parser.add_argument("--partitions-per-worker", type=int, default=8)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"of: {', '.join(SHUFFLE_METHODS)}")  # fmt: skip
    parser.add_argument("--step-bytes", default="2GiB",
                        help="the step of the library-steps method")  # fmt: skip
    parser.add_argument("--p2p-up-to", default="64MiB",
                        help="p2p runs only at sizes up to this (it goes through host memory)")
    cluster_options(parser)
    parser.add_argument("--peer-size", default="1GiB", help="bytes per raw peer copy")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the runs it would make; start nothing")  # fmt: skip


def check_clusters(parser_, args, methods=METHODS) -> None:
    """``cluster_options``' arguments and --methods (of ``methods``), checked (the shuffle's
    and the join's)."""
    if args.protocols is None:
        args.protocols = "ucx,tcp" if args.device == "gpu" else "tcp"
    args.protocols = choices(parser_, "--protocols", args.protocols, PROTOCOLS)
    args.methods = choices(parser_, "--methods", args.methods, methods)
    args.clusters = choices(parser_, "--clusters", args.clusters, CLUSTERS)
    if "ucx" in args.protocols and args.device == "cpu":
        parser_.error("--protocols ucx needs --device gpu (distributed-ucxx); use tcp on CPUs")
    if "dask-cuda" in args.clusters and args.device == "cpu":
        parser_.error("--clusters dask-cuda needs --device gpu; use library on CPUs")
    if args.spill and args.device == "cpu":
        parser_.error("--spill is cuDF's spilling on GPU workers; leave it out with --device cpu")


def check_arguments(parser_, args) -> None:
    try:
        sizes = args.per_worker if args.per_worker is not None else args.sizes
        args.sizes = [parse_bytes(s) for s in sizes.split(",") if s.strip()]
        args.peer_size = parse_bytes(args.peer_size)
        args.p2p_up_to = parse_bytes(args.p2p_up_to)
        args.step_bytes = parse_bytes(args.step_bytes)
    except ValueError as err:
        parser_.error(f"--sizes / --per-worker / --peer-size / --p2p-up-to / --step-bytes: {err}")
    if not args.sizes or min(args.sizes) < 1:
        parser_.error("--sizes: at least one size, each above zero")
    if args.step_bytes < 1:
        parser_.error("--step-bytes: a size above zero")
    check_clusters(parser_, args, SHUFFLE_METHODS)
    if args.partitions_per_worker < 1:
        parser_.error("--partitions-per-worker must be at least 1")
    if args.repeats < 1:
        parser_.error("--repeats must be at least 1")


def dry_run(args) -> str:
    """What ``args`` would run, one line per configuration; nothing starts."""
    workers = (f"{args.workers} worker{'s' if args.workers > 1 else ''}" if args.workers
               else "one worker per GPU" if args.device == "gpu" else "2 workers")
    lines = [f"{workers} ({args.device}), {args.partitions_per_worker} partitions each; "
             f"{args.repeats} timed runs per method after a checked one"
             + (f"; raw peer copies of {format_bytes(args.peer_size)} first"
                if args.device == "gpu" else "")]  # fmt: skip
    shuffles = 0
    for kind, protocol, size, methods in runs_planned(args):
        count = len(methods) * (args.repeats + 1) + sum(
            m in methods for m in ("library", "library-batches"))
        shuffles += count
        lines.append(f"{kind} cluster, {protocol}: {format_bytes(size)} per worker: "
                     f"{', '.join(methods)} ({count} shuffles)")  # fmt: skip
    lines.append(f"{shuffles} shuffles in all")
    return "\n".join(lines)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="shuffle", dry_run=dry_run,
                gpus=lambda args: workers_of(args) if args.device == "gpu" else 0)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

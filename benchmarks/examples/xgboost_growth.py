"""xgboost.dask on 1 GPU and on several: the classic notebook's lossguide trees against
depthwise ones, side by side in one run.

    python -m benchmarks.examples.xgboost_growth --rows 50000000 --workers 1,2

Lossguide (the mortgage notebook's grow_policy, 256 leaves) grows one node at a time, and on
several workers every node is a collective operation; depthwise grows a whole level at a time.
Each configuration trains on the same synthetic frame (45 float32 features, made on the GPUs
with CuPy, persisted before the clock starts) on a fresh LocalCUDACluster of N workers, after
an untimed 2-round warm-up; with ``--repeats N`` the configurations alternate N times and the
table gives medians with their range. The harness (benchmarks/common.py) records the machine
and the commit and writes ``--out``/xgboost-growth-MACHINE.md (and .json).
"""

from __future__ import annotations

import time

from ..common import Script, alternate, choices, header, median_range, say, summary

POLICIES = {"lossguide": {}, "depthwise": {"grow_policy": "depthwise"}}
FEATURES = 45


def frame(client, rows: int, partitions: int, seed: int, device: str):
    """(X, y) persisted: a label that depends on a few features, with noise."""
    import dask.array as da

    if device == "gpu":
        import cupy

        state = da.random.RandomState(seed, RandomState=cupy.random.RandomState)
    else:
        state = da.random.RandomState(seed)
    x = state.random_sample((rows, FEATURES), chunks=(-(-rows // partitions), FEATURES))
    x = x.astype("float32")
    noise = state.random_sample(rows, chunks=x.chunks[0])
    y = ((x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 2] + 0.4 * noise) > 0.8).astype("float32")
    x, y = client.persist([x, y])
    from distributed import wait

    wait([x, y])
    return x, y


def train(workers: int, policy: str, args) -> dict:
    import xgboost.dask as dxgb

    from dask_gpu_interop import cluster_client
    from examples.mortgage.train import PARAMS

    params = {**PARAMS, **POLICIES[policy], "device": "cuda" if args.device == "gpu" else "cpu"}
    with cluster_client(device=args.device, n_workers=workers) as (client, _):
        x, y = frame(client, args.rows, args.partitions, args.seed, args.device)
        matrix = dxgb.DaskQuantileDMatrix(client, x, y)
        dxgb.train(client, params, matrix, num_boost_round=2)  # warm-up
        started = time.perf_counter()
        out = dxgb.train(client, params, matrix, num_boost_round=args.rounds,
                         evals=[(matrix, "train")], verbose_eval=False)
        seconds = time.perf_counter() - started
    auc = float(out["history"]["train"]["auc"][-1])
    say(f"{policy}, {workers} worker(s): {seconds:.2f} s, train AUC {auc:.4f}")
    return {"workers": workers, "policy": policy, "seconds": seconds, "train_auc": auc}


def combined(results: list[dict]) -> list[dict]:
    """One row per (policy, workers), in the order first run: the median seconds over its
    runs, the range and the last AUC."""
    rows: dict = {}
    for r in results:
        rows.setdefault((r["policy"], r["workers"]), []).append(r)
    return [{"policy": policy, "workers": workers,
             "seconds": summary(r["seconds"] for r in runs)["median"],
             "runs": [r["seconds"] for r in runs], "train_auc": runs[-1]["train_auc"]}
            for (policy, workers), runs in rows.items()]


def markdown(payload: dict) -> str:
    results = combined(payload["results"])
    base = {r["policy"]: r["seconds"] for r in results if r["workers"] == min(
        x["workers"] for x in results)}
    repeats = max(len(r["runs"]) for r in results)
    lines = [
        *header(f"xgboost.dask: lossguide vs depthwise trees on {payload['machine_name']}",
                payload["command"], payload["machine"], payload["commit"], payload["date"]),
        f"- {payload['rows']:,} rows x {FEATURES} float32 features in {payload['partitions']} "
        f"partitions, {payload['rounds']} rounds after a 2-round warm-up; the mortgage "
        "notebook's parameters "
        "(max_depth 8, max_leaves 256, ...), grow_policy as named"
        + (f"; {repeats} runs each, alternating: median (min-max)" if repeats > 1 else ""), "",
        "| grow_policy | workers | train s | vs the fewest workers | train AUC |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        seconds = median_range(r["runs"]) if len(r["runs"]) > 1 else f"{r['seconds']:.2f}"
        lines.append(f"| {r['policy']} | {r['workers']} | {seconds} | "
                     f"{base[r['policy']] / r['seconds']:.2f}x | {r['train_auc']:.4f} |")
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--rows", type=int, default=50_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--policies", default="lossguide,depthwise")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each configuration, the configurations alternating")


def check_arguments(parser, args) -> None:
    try:
        args.worker_counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers {args.workers!r}: comma-separated worker counts")
    args.policy_list = choices(parser, "--policies", args.policies, POLICIES)
    if min(args.worker_counts) < 1:
        parser.error("--workers: each count must be at least 1")


def measure(args, run) -> None:
    configs = {(policy, n): None for policy in args.policy_list for n in args.worker_counts}
    run.payload.update(rows=args.rows, partitions=args.partitions, rounds=args.rounds)
    run.payload["results"] = [train(n, policy, args)
                              for _, (policy, n) in alternate(configs, args.repeats)]


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="xgboost-growth",
                gpus=lambda args: max(args.worker_counts))
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

"""xgboost.dask on 1 GPU and on several: the classic notebook's lossguide trees against
depthwise ones, side by side in one run.

    python benchmarks/xgboost_growth.py --rows 50000000 --workers 1,2

Lossguide (the mortgage notebook's grow_policy, 256 leaves) grows one node at a time, and on
several workers every node is a collective operation; depthwise grows a whole level at a time.
Each configuration trains on the same synthetic frame (45 float32 features, made on the GPUs
with CuPy, persisted before the clock starts) on a fresh LocalCUDACluster of N workers, after
an untimed 2-round warm-up. The table, with the command and the machine, goes to
``--out``/xgboost-growth-<machine>.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's root: examples/
from common import choices, command_line, machine, machine_name, say, write_results  # noqa: E402

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


def run(workers: int, policy: str, args) -> dict:
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


def markdown(info: dict, results: list[dict], command: str, args) -> str:
    base = {r["policy"]: r["seconds"] for r in results if r["workers"] == min(
        x["workers"] for x in results)}
    lines = [
        f"# xgboost.dask: lossguide vs depthwise trees on {machine_name(info)}", "",
        "```", command, "```", "",
        f"- machine: {info['cpu']}; GPUs: {'; '.join(info['gpus']) or 'none'}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}",
        f"- {args.rows:,} rows x {FEATURES} float32 features in {args.partitions} partitions, "
        f"{args.rounds} rounds after a 2-round warm-up; the mortgage notebook's parameters "
        "(max_depth 8, max_leaves 256, ...), grow_policy as named", "",
        "| grow_policy | workers | train s | vs the fewest workers | train AUC |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(f"| {r['policy']} | {r['workers']} | {r['seconds']:.2f} | "
                     f"{base[r['policy']] / r['seconds']:.2f}x | {r['train_auc']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--policies", default="lossguide,depthwise")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--machine", default=None)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    policies = choices(parser, "--policies", args.policies, POLICIES)
    if min(workers) < 1:
        parser.error("--workers: each count must be at least 1")
    info = machine()
    results = [run(n, policy, args) for policy in policies for n in workers]
    command = command_line(__file__, argv)
    text = markdown(info, results, command, args)
    print(text)
    stem = os.path.join(args.out, f"xgboost-growth-{args.machine or machine_name(info)}")
    write_results(stem, text, {"command": command, "machine": info, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

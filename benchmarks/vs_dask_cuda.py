"""The plugin against dask-cuda's own RMM options, side by side in one run (one GPU worker).

    python -m benchmarks.vs_dask_cuda [--out DIR] [--repeats 3] [--pool-size 2GiB]

Each configuration starts its own LocalCUDACluster (one worker, one thread) and runs the same
workloads on it; configurations are interleaved round by round, in a rotated order, so the
spread of each row shows next to its median and drift hits every configuration alike.

Configurations: the frameworks' own allocators (no pool); dask-cuda ``rmm_pool_size`` and
``rmm_async`` with ``rmm_allocator_external_lib_list=["cupy", "torch"]`` and Numba on RMM
(``NUMBA_CUDA_MEMORY_MANAGER=rmm.allocators.numba``, as RMM's documentation says); the plugin's
pool and async modes. Variants that explain a row run only when ``--configs`` names them: the
async mode with ``release_threshold=0`` or with PyTorch through RMM instead of its own
cudaMallocAsync backend, the pool without statistics. The last column compares only the
plugin's two modes (defaults) with dask-cuda's two. Inside a worker, the micro rows take the fastest of five timings (the
worker's own threads can only add to them). Rows: worker setup (cluster start to memory ready), CuPy and Numba 1 MiB
alloc+free, a conv-net training step, and a mixed cuDF -> CuPy -> PyTorch -> XGBoost workload's
time and peak device memory (NVML, the whole device, above what was used before the cluster).

Goals: the plugin no slower than the best dask-cuda configuration on any row, within the
spread; its train step within 5% of PyTorch's own allocator.

The harness (benchmarks/common.py) rotates the order, records the machine and the commit and
writes ``--out``/vs-dask-cuda-MACHINE[-TAG].md (and .json).
"""

from __future__ import annotations

import os
import subprocess
import time

from .common import Script, alternate, header, say, summary
from .memory import PeakSampler, conv_net_step, cupy_alloc_free_us, mixed_workload

MiB = 1 << 20
LIBS = ["cupy", "torch"]


NUMBA_ON_RMM = {"NUMBA_CUDA_MEMORY_MANAGER": "rmm.allocators.numba"}
OURS = ("plugin pool", "plugin async")
THEIRS = ("dask-cuda pool", "dask-cuda async")


def configurations(pool_size: str) -> dict:
    """name -> (LocalCUDACluster options, plugin options or None, the workers' environment)."""
    return {
        "no pool": ({}, None, {}),
        "dask-cuda pool": (
            {"rmm_pool_size": pool_size, "rmm_allocator_external_lib_list": LIBS}, None, NUMBA_ON_RMM),
        "dask-cuda async": (
            {"rmm_async": True, "rmm_allocator_external_lib_list": LIBS}, None, NUMBA_ON_RMM),
        "plugin pool": ({}, {"pool_size": pool_size}, {}),
        "plugin async": ({}, {"async_alloc": True}, {}),
    }


def variants(pool_size: str) -> dict:
    """Configurations that explain a row; run only when named in ``--configs``."""
    return {
        "plugin async, release 0": ({}, {"async_alloc": True, "release_threshold": 0}, {}),
        "plugin async, torch on RMM": (
            {}, {"async_alloc": True}, {"PYTORCH_CUDA_ALLOC_CONF": "backend:native"}),
        "plugin pool, no statistics": ({}, {"pool_size": pool_size, "statistics": False}, {}),
    }


ROWS = (
    ("setup_s", "worker setup", "s", 1),
    ("cupy_us", "CuPy 1 MiB alloc+free", "us", 1),
    ("numba_us", "Numba 1 MiB alloc+free", "us", 1),
    ("train_ms", "conv-net train step", "ms", 1),
    ("mixed_s", "mixed workload", "s", 1),
    ("mixed_peak_gib", "mixed workload, peak device memory", "GiB", 1),
)


# ------------------------------------------------------------------------- on the worker


def device_used() -> int:
    """Bytes in use on the worker's GPU, all processes (NVML; nvidia-smi where it is missing).
    Never through CUDA: the client must not create a context of its own."""
    index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
    try:
        import pynvml
    except ImportError:
        out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        return int(out.stdout.strip()) * MiB
    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used)


def cupy_alloc_us(count: int = 20_000) -> float:
    return min(cupy_alloc_free_us(count, 5)[1:])  # the cost itself: the worker's threads only add


def numba_alloc_us(count: int = 5_000) -> float:
    from numba import cuda

    times = []
    for _ in range(5):
        cuda.synchronize()
        start = time.perf_counter()
        for _ in range(count):
            a = cuda.device_array(MiB, dtype="uint8")
            del a
        cuda.synchronize()
        times.append((time.perf_counter() - start) / count * 1e6)
    return min(times[1:])


def train_step_ms() -> float:
    import torch

    step = conv_net_step()
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(6):
        start = time.perf_counter()
        for _ in range(100):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - start) / 100 * 1e3)
    return min(per_step[1:])


def run_workloads(xgb_config: dict | None, baseline: int) -> dict:
    """All rows but setup, on the worker. The mixed workload first, on a fresh worker."""
    import cupy

    cupy.cuda.runtime.deviceSynchronize()  # the CUDA context, before the peak's baseline
    if xgb_config is None:  # the plugin's: whatever shares its pool (public API)
        from dask_gpu_interop import xgboost_config

        xgb_config = xgboost_config()
    with PeakSampler() as sampler:
        mixed = mixed_workload(xgb_config)
    return {
        "mixed_s": mixed,
        "mixed_peak_gib": (sampler.peak - baseline) / (1 << 30),
        "cupy_us": cupy_alloc_us(),
        "numba_us": numba_alloc_us(),
        "train_ms": train_step_ms(),
    }


# ------------------------------------------------------------------------- on the client


def dask_cuda_xgboost_config(cluster_options: dict) -> dict:
    """What a dask-cuda user sets for XGBoost with an RMM pool: ``use_rmm`` (a no-op where
    XGBoost is built without RMM, as the PyPI wheels are)."""
    return {"use_rmm": True} if cluster_options.get("rmm_pool_size") or cluster_options.get("rmm_async") else {}


def one_run(name: str, cluster_options: dict, plugin_options: dict | None, env: dict) -> dict:
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from dask_gpu_interop import GPUMemoryPlugin

    baseline = device_used()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the workers inherit the client's environment
    try:
        start = time.perf_counter()
        with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address=None,
                              **cluster_options) as cluster, Client(cluster) as client:
            client.wait_for_workers(1)
            if plugin_options is not None:
                client.register_plugin(GPUMemoryPlugin(**plugin_options))
            setup = time.perf_counter() - start
            xgb = None if plugin_options is not None else dask_cuda_xgboost_config(cluster_options)
            numbers = client.submit(run_workloads, xgb, baseline, pure=False).result()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"setup_s": setup, **numbers}


def summarize(runs: dict) -> dict:
    """row -> config -> (median, min, max)."""
    out = {}
    for key, *_ in ROWS:
        out[key] = {}
        for name, values in runs.items():
            series = [v[key] for v in values if key in v]
            if series:
                s = summary(series)
                out[key][name] = (s["median"], s["min"], s["max"])
    return out


def verdict(row: dict) -> str:
    """The plugin's best mode against dask-cuda's best on one row (lower is better)."""
    ours = [v for n, v in row.items() if n in OURS]
    theirs = [v for n, v in row.items() if n in THEIRS]
    if not ours or not theirs:
        return "-"
    best_ours, best_theirs = min(ours), min(theirs)
    ratio = best_ours[0] / best_theirs[0]
    within = best_ours[1] <= best_theirs[2]  # our fastest run reaches their slowest
    return f"{ratio:.2f}" + ("" if ratio <= 1.0 else (" (within spread)" if within else " (slower)"))


def markdown(payload: dict) -> str:
    summary, errors = payload["summary"], payload["errors"]
    names = list(next(iter(summary.values())).keys()) if summary else []
    lines = [
        *header("The plugin vs dask-cuda's RMM options, one GPU worker, side by side",
                payload["command"], payload["machine"], payload["commit"], payload["date"],
                used=1),
        "",
        f"{payload['repeats']} rounds, configurations interleaved in rotated order; median "
        "(min-max).",
        "",
        "| row | " + " | ".join(names) + " | plugin best / dask-cuda best |",
        "| --- |" + " --- |" * (len(names) + 1),
    ]
    for key, label, unit, _ in ROWS:
        row = summary.get(key, {})
        cells = []
        for name in names:
            if name in row:
                med, lo, hi = row[name]
                cells.append(f"{med:.3g} ({lo:.3g}-{hi:.3g}) {unit}")
            else:
                cells.append("-")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {verdict(row)} |")
    train = summary.get("train_ms", {})
    if "no pool" in train:
        own = train["no pool"][0]
        lines += ["", "Train step against PyTorch's own caching allocator (goal: within 5%): " + ", ".join(
            f"{name} {value[0] / own:.3f}" for name, value in train.items() if name != "no pool")]
    if errors:
        lines += ["", "Errors:", *[f"- {e}" for e in errors]]
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pool-size", default="2GiB",
                        help="Initial pool of both pool configurations (they grow from there).")
    parser.add_argument("--configs", default=None,
                        help="Configurations to run, separated by ';' (names hold commas).")
    parser.add_argument("--tag", default="",
                        help="Added to the results' file name, to keep runs of subsets apart.")


def check_arguments(parser, args) -> None:
    """``args.configurations``: what runs."""
    configs = configurations(args.pool_size)
    if args.configs:
        known = {**configs, **variants(args.pool_size)}
        unknown = [n for n in args.configs.split(";") if n not in known]
        if unknown:
            parser.error(f"--configs: unknown {unknown}; choose from {list(known)}")
        configs = {name: known[name] for name in args.configs.split(";")}
    args.configurations = configs


def measure(args, run) -> None:
    configs = args.configurations
    runs = {name: [] for name in configs}
    errors = []
    for round_, name in alternate(configs, args.repeats, rotate=True):
        say(f"round {round_ + 1}: {name}")
        try:
            result = one_run(name, *configs[name])
        except Exception as err:
            errors.append(f"round {round_ + 1}, {name}: {type(err).__name__}: {err}")
            say(errors[-1])
            continue
        runs[name].append(result)
        say(f"  {result}")
    run.payload.update(repeats=args.repeats, runs=runs, summary=summarize(runs), errors=errors)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="vs-dask-cuda")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

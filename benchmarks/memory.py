"""Benchmarks of the GPUMemoryPlugin, side by side in one run (GPU machine).

    python -m benchmarks.memory [--out DIR] [--sections alloc,torch,peak,setup] [--repeats 1]

- alloc: 1 MiB alloc+free through CuPy: plain cudaMalloc vs the plugin's stack (and CuPy's own
  pool for reference).
- torch: a small conv-net training step on the plugin's pool vs PyTorch's caching allocator.
  Goal: within 10%.
- peak: peak device memory of a mixed cuDF -> CuPy -> PyTorch -> XGBoost workload with one
  shared pool vs each framework's own default. Goal: lower.
- setup: plugin setup time per worker (register_plugin on a LocalCUDACluster). Goal: < 1 s.

Each variant runs in its own process: allocators cannot be swapped back inside one; with
``--repeats N`` each variant's process runs N times, the variants alternating (the harness,
benchmarks/common.py, which also records the machine and the commit). Results go to DIR
(default benchmarks/results) as memory-MACHINE.md and memory-MACHINE.json.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time

from .common import RESULTS, Script, alternate, choices, header, in_child, summary

MiB = 1 << 20


# ---------------------------------------------------------------- variants, run in a child


def install(variant: str, frameworks):
    """Install the plugin's stack in this process for ``variant`` (None: frameworks' own)."""
    from dask_gpu_interop import MemoryConfig
    from dask_gpu_interop.memory import state

    if variant == "plugin-pool-binned":
        # Experiment: fixed-size bins (256 B .. 4 MiB) in front of the pool, for PyTorch's many
        # small allocations. Not a plugin option (yet): measured to decide whether it should be.
        import rmm

        state_ = install("plugin-pool", frameworks)
        rmm.mr.set_current_device_resource(rmm.mr.BinningMemoryResource(state_.stack.top, 8, 22))
        return state_
    options = {
        "defaults": None,
        "plugin-pool": {"pool_size": "1GiB"},
        "plugin-pool-nostats": {"pool_size": "1GiB", "statistics": False},
        "plugin-pool-small": {"pool_size": "256MiB"},
        "plugin-async": {"async_alloc": True, "release_threshold": "1GiB"},
    }[variant]
    if options is None:
        return None
    config = MemoryConfig.from_options(frameworks=frameworks, **options)
    return state.install(config, f"bench-{variant}", label="bench")


def child_alloc(variant: str) -> dict:
    import cupy

    if variant == "cudaMalloc":
        cupy.cuda.set_allocator(None)
    elif variant != "cupy-pool":
        install(variant, ["cupy"])
        import dask_gpu_interop.memory.state as st

        assert st.active().bindings["cupy"].state == "bound"
    times = cupy_alloc_free_us(20_000, 7)
    return {"us_per_alloc_free": statistics.median(times[1:]), "spread_us": max(times[1:]) - min(times[1:])}


def cupy_alloc_free_us(count: int, rounds: int) -> list[float]:
    """Microseconds per 1 MiB CuPy alloc+free, one figure per round (the first warms up)."""
    import cupy

    times = []
    for _ in range(rounds):
        cupy.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        for _ in range(count):
            a = cupy.empty(MiB, dtype=cupy.uint8)
            del a
        cupy.cuda.runtime.deviceSynchronize()
        times.append((time.perf_counter() - t0) / count * 1e6)
    return times


def conv_net_step():
    """One training step of a small conv-net (batch 64, 3x64x64) on the GPU; returns the loss."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(128, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def child_torch(variant: str) -> dict:
    if variant == "torch-async-backend":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    elif variant != "caching":
        install(variant, ["torch"])
    import torch

    step = conv_net_step()
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(100):
            loss = step()
        end.record()
        torch.cuda.synchronize()
        per_step.append(start.elapsed_time(end) / 100)
    return {"ms_per_step": statistics.median(per_step[1:]),
            "spread_ms": max(per_step[1:]) - min(per_step[1:]), "loss": float(loss)}


class PeakSampler:
    """Device memory in use (NVML, else cudaMemGetInfo), sampled every millisecond."""

    def __init__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            index = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.used = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used
        except Exception:
            from dask_gpu_interop.device import memory_info

            self.used = lambda: (lambda f, t: t - f)(*memory_info())
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.base = self.used()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.used())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.used())


def child_peak(variant: str) -> dict:
    import cupy

    state = install(variant, None)
    cupy.cuda.runtime.deviceSynchronize()  # the context exists before the baseline
    import cudf  # noqa: F401  (imported before the baseline, as the workload's frameworks)
    import torch  # noqa: F401
    import xgboost  # noqa: F401

    from dask_gpu_interop.frameworks.xgboost import config_for

    mode = state.mode if state is not None else None
    with PeakSampler() as sampler:
        seconds = mixed_workload(config_for(mode, False))
    return {"peak_bytes": sampler.peak - sampler.base, "seconds": seconds}


def mixed_workload(xgb_config: dict) -> float:
    """cuDF -> CuPy -> PyTorch -> XGBoost (under ``xgb_config``), three rounds; seconds."""
    import cudf
    import cupy
    import torch
    import xgboost

    rows = 4_000_000
    t0 = time.perf_counter()
    for round_ in range(3):
        rng = cupy.random.default_rng(round_)
        frame = cudf.DataFrame({f"f{i}": rng.standard_normal(rows, dtype=cupy.float32) for i in range(16)})
        frame["label"] = (frame["f0"] + frame["f1"] * frame["f2"] > 0).astype("int32")
        frame = frame[frame["f3"] > -2.0]  # a filter: cuDF temporaries
        matrix = frame[[f"f{i}" for i in range(16)]].to_cupy()
        tensor = torch.from_dlpack(matrix)
        tensor = (tensor - tensor.mean(0)) / tensor.std(0)
        gram = tensor.T @ tensor  # PyTorch temporaries
        features = cupy.from_dlpack(tensor.contiguous())
        label = frame["label"].values
        with xgboost.config_context(**xgb_config):
            xgboost.train({"device": "cuda", "tree_method": "hist", "max_depth": 8},
                          xgboost.QuantileDMatrix(features, label=label), num_boost_round=20)
        del frame, matrix, tensor, gram, features, label
        cupy.cuda.runtime.deviceSynchronize()
    return time.perf_counter() - t0


CHILDREN = {"alloc": "child_alloc", "torch": "child_torch", "peak": "child_peak"}


def run_child(section: str, variant: str) -> dict:
    """One variant of a section in a process of its own (allocators cannot be swapped back
    inside one); ``{"error": its last line}`` where it fails."""
    try:
        return in_child(f"m.{CHILDREN[section]}({variant!r})",
                        setup="from benchmarks import memory as m", timeout=900)
    except RuntimeError as err:
        return {"error": str(err).splitlines()[0]}


# ---------------------------------------------------------------- setup time, on a cluster


def setup_times() -> dict:
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from dask_gpu_interop import GPUMemoryPlugin, memory_report

    results = {}
    for name, options in {
        "pool 0.8": {"pool_size": "0.8"},
        "managed pool 1GiB": {"managed": True, "pool_size": "1GiB"},
        "async": {"async_alloc": True, "release_threshold": "1GiB"},
    }.items():
        with LocalCUDACluster(n_workers=1, dashboard_address=None) as cluster, Client(cluster) as client:
            t0 = time.perf_counter()
            client.register_plugin(GPUMemoryPlugin(**options))
            wall = time.perf_counter() - t0
            (snap,) = memory_report(client).values()
            results[name] = {"setup_s": snap["setup_seconds"], "register_wall_s": wall}
    return results


# ---------------------------------------------------------------- report


SECTIONS = {
    "alloc": ("cudaMalloc", "cupy-pool", "plugin-pool", "plugin-pool-nostats", "plugin-async"),
    "torch": ("caching", "plugin-pool", "plugin-pool-nostats", "plugin-pool-binned", "plugin-async",
              "torch-async-backend"),
    "peak": ("defaults", "plugin-pool-small", "plugin-async"),
}


def combine(runs: list[dict], key: str, spread_key: str) -> dict:
    """One variant's figure over its processes: the median of their figures, the spread
    between them (one process: its own figure and spread)."""
    ok = [r for r in runs if key in r]
    if not ok:
        return runs[-1]
    if len(ok) == 1:
        return ok[0]
    s = summary(r[key] for r in ok)
    return {**ok[0], key: s["median"], spread_key: s["max"] - s["min"], "runs": ok}


FIGURES = {"alloc": ("us_per_alloc_free", "spread_us"), "torch": ("ms_per_step", "spread_ms"),
           "peak": ("peak_bytes", "spread_bytes")}


def markdown(results: dict) -> str:
    lines = [*header("GPUMemoryPlugin benchmarks", results["command"], results["machine"],
                     results["commit"], results["date"], used=1), ""]
    if "alloc" in results:
        r = results["alloc"]
        base = r["cudaMalloc"].get("us_per_alloc_free")
        lines += ["## 1 MiB alloc+free through CuPy", "", "| variant | us per alloc+free | vs cudaMalloc |", "| --- | --- | --- |"]
        for name, v in r.items():
            us = v.get("us_per_alloc_free")
            lines.append(f"| {name} | {us:.2f} ± {v['spread_us']:.2f} | {base / us:.1f}x |" if us else f"| {name} | {v.get('error')} | |")
        lines.append("")
    if "torch" in results:
        r = results["torch"]
        base = r["caching"].get("ms_per_step")
        lines += ["## Conv-net training step (batch 64, 3x64x64)", "", "| allocator | ms per step | vs caching allocator |", "| --- | --- | --- |"]
        for name, v in r.items():
            ms = v.get("ms_per_step")
            lines.append(f"| {name} | {ms:.3f} ± {v['spread_ms']:.3f} | {ms / base:.3f} |" if ms else f"| {name} | {v.get('error')} | |")
        lines.append("")
    if "peak" in results:
        r = results["peak"]
        lines += ["## Peak device memory, mixed cuDF -> CuPy -> PyTorch -> XGBoost (4M rows x 16, 3 rounds)", "",
                  "| memory setup | peak above baseline | seconds |", "| --- | --- | --- |"]
        for name, v in r.items():
            if "peak_bytes" in v:
                lines.append(f"| {name} | {v['peak_bytes'] / MiB:,.0f} MiB | {v['seconds']:.2f} |")
            else:
                lines.append(f"| {name} | {v.get('error')} | |")
        lines.append("")
    if "setup" in results:
        lines += ["## Plugin setup per worker (LocalCUDACluster, 1 worker)", "", "| mode | setup on the worker | register_plugin wall |", "| --- | --- | --- |"]
        for name, v in results["setup"].items():
            lines.append(f"| {name} | {v['setup_s']:.3f} s | {v['register_wall_s']:.3f} s |")
        lines.append("")
    return "\n".join(lines)


def options(parser) -> None:
    parser.add_argument("--sections", default="alloc,torch,peak,setup")
    parser.add_argument("--repeats", type=int, default=1,
                        help="processes per variant, the variants alternating")


def check_arguments(parser, args) -> None:
    args.section_list = choices(parser, "--sections", args.sections, [*SECTIONS, "setup"])
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")


def measure(args, run) -> None:
    for section in args.section_list:
        print(f"== {section}", flush=True)
        if section == "setup":
            run.payload["setup"] = setup_times()
        else:
            runs = {v: [] for v in SECTIONS[section]}
            for _, variant in alternate(SECTIONS[section], args.repeats):
                runs[variant].append(run_child(section, variant))
            run.payload[section] = {v: combine(r, *FIGURES[section]) for v, r in runs.items()}
        print(json.dumps(run.payload[section], indent=1), flush=True)


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="memory", out=os.environ.get("OUT") or RESULTS)
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

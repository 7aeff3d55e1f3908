"""The ECG VAE's training step: where its time goes on a GPU, against the CPUs.

    python -m benchmarks.examples.ecg_train [--beats 65000] [--steps 1000] [--cpu-steps 200]

On beats of the ECG example's shape (``--beats`` rows of 256 float32, random: the step's work
does not depend on the values), with the example's model, batch and optimizer
(``examples/ecg/vae.py``):

- for each PyTorch allocator, in its own process (its caching allocator; its
  ``cudaMallocAsync`` backend, which the ECG command's GPU worker uses), each kind of step
  (ordinary; replayed as a CUDA graph) and cuDNN's autotuner off and on: the wall time of a
  step over ``--steps`` steps after a warm-up, synchronized at both ends, and the GPU's kernel
  time per step (``torch.profiler`` over 20 steps) with the costliest kernels;
- the CPUs' ordinary step on every core, over ``--cpu-steps`` steps;
- ``vae.train`` whole, as the pipeline's train stage calls it (model set-up, warm-up, capture
  and ``--steps`` steps), on the GPU and on the CPUs.

The harness (benchmarks/common.py) records the machine and the commit and writes
``--out``/ecg-train-MACHINE.md (and .json).
"""

from __future__ import annotations

import argparse
import os
import time

from ..common import Script, header, in_child, say

ALLOCATORS = {"caching": "", "cudaMallocAsync": "backend:cudaMallocAsync"}
PROFILED_STEPS = 20
TOP_KERNELS = 8


def beats(n: int, seed: int = 0):
    import numpy as np

    from examples.ecg.params import EMBED_SIZE

    return np.random.default_rng(seed).standard_normal((n, EMBED_SIZE), dtype=np.float32)


def _runner(x, graphed: bool):
    """A model and its steps (the example's) on ``x``'s device, after the warm-up (and the
    capture, graphed)."""
    import torch

    from examples.ecg import vae
    from examples.ecg.params import Params

    params = Params()
    torch.manual_seed(0)
    model = vae._model_class()().to(x.device)
    generator = torch.Generator(device=x.device).manual_seed(0)
    steps = vae._Steps(model, x, float(x.std()), params.batch_size, params, generator, graphed)
    order = torch.randperm(x.shape[0], generator=generator, device=x.device)
    per_epoch = x.shape[0] // params.batch_size

    def run(count: int) -> None:
        for k in range(count):
            steps.run(order, k % per_epoch)

    run(vae.WARMUP_STEPS + 2)
    return run


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def step_time(x, count: int, graphed: bool) -> float:
    """Seconds per step, wall clock over ``count`` steps after the warm-up."""
    run = _runner(x, graphed)
    _sync(x.device)
    started = time.perf_counter()
    run(count)
    _sync(x.device)
    return (time.perf_counter() - started) / count


def kernel_profile(x, graphed: bool) -> dict:
    """The GPU's kernels over PROFILED_STEPS steps: time and count per step, the costliest."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    run = _runner(x, graphed)
    _sync(x.device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(PROFILED_STEPS)
        _sync(x.device)
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += event.time_range.elapsed_us()
        entry[1] += 1
    top = sorted(totals.items(), key=lambda item: -item[1][0])[:TOP_KERNELS]
    return {"us_per_step": sum(t for t, _ in totals.values()) / PROFILED_STEPS,
            "kernels_per_step": sum(c for _, c in totals.values()) / PROFILED_STEPS,
            "top": [(name[:90], t / PROFILED_STEPS, c / PROFILED_STEPS) for name, (t, c) in top]}


def whole_train(x_numpy, steps: int, device: str, threads: int | None) -> dict:
    """``vae.train`` as the pipeline calls it: seconds, and whether its steps were graphed."""
    from dataclasses import replace

    from examples.ecg import vae
    from examples.ecg.params import Params

    if device == "gpu":
        import cupy

        data = cupy.asarray(x_numpy)
        cupy.cuda.Device().synchronize()
    else:
        data = x_numpy
    started = time.perf_counter()
    state = vae.train(data, replace(Params(), max_steps=steps), device, threads=threads)
    return {"seconds": time.perf_counter() - started, "graphed": state["graphed"],
            "steps": state["steps"]}


def child(args: argparse.Namespace, allocator: str) -> dict:
    """Every GPU measurement under one allocator (this process's), and the CPUs' under the
    caching one."""
    import torch

    x_numpy = beats(args.beats)
    out: dict = {"allocator": allocator, "gpu": [], "cpu": None}
    if torch.cuda.is_available():
        x = torch.from_numpy(x_numpy).cuda()
        out["backend"] = torch.cuda.get_allocator_backend()
        for benchmark in (False, True):
            torch.backends.cudnn.benchmark = benchmark
            for graphed in (False, True):
                row = {"graphed": graphed, "cudnn_benchmark": benchmark,
                       "seconds_per_step": step_time(x, args.steps, graphed)}
                row["profile"] = kernel_profile(x, graphed)
                say(f"{allocator} graphed={graphed} benchmark={benchmark}: "
                    f"{row['seconds_per_step'] * 1e3:.3f} ms a step, "
                    f"{row['profile']['us_per_step'] / 1e3:.3f} ms of kernels")
                out["gpu"].append(row)
        torch.backends.cudnn.benchmark = False
        out["train gpu"] = whole_train(x_numpy, args.steps, "gpu", None)
    if allocator == "caching":
        threads = os.cpu_count()
        torch.set_num_threads(threads)
        x = torch.from_numpy(x_numpy)
        out["cpu"] = {"threads": threads, "seconds_per_step": step_time(x, args.cpu_steps, False)}
        out["train cpu"] = whole_train(x_numpy, args.cpu_steps, "cpu", threads)
        say(f"cpu: {out['cpu']['seconds_per_step'] * 1e3:.3f} ms a step")
    return out


def under(argv: list[str], allocator: str) -> dict:
    """:func:`child` in a process of its own, PyTorch's allocator set before it starts."""
    return in_child(f"m.child(m.parse({argv!r}), {allocator!r})",
                    setup="from benchmarks.examples import ecg_train as m",
                    env={"PYTORCH_CUDA_ALLOC_CONF": ALLOCATORS[allocator]})


def markdown(payload: dict) -> str:
    lines = [*header(f"The ECG VAE's training step ({payload['machine_name']})",
                     payload["command"], payload["machine"], payload["commit"], payload["date"]),
             "", f"{payload['beats']:,} random beats of 256 samples, the example's model, "
             "batch and Adam. Wall: a step's wall time over the timed steps, synchronized at "
             f"both ends. Kernels: the GPU's kernel time per step ({PROFILED_STEPS} steps "
             "under torch.profiler).", "",
             "| allocator | step | cuDNN autotuner | wall ms/step | kernel ms/step | kernels/step |",
             "| --- | --- | --- | --- | --- | --- |"]
    cpu = None
    for result in payload["children"]:
        for row in result["gpu"]:
            p = row["profile"]
            lines.append(f"| {result['allocator']} | {'CUDA graph' if row['graphed'] else 'ordinary'} "
                         f"| {'on' if row['cudnn_benchmark'] else 'off'} "
                         f"| {row['seconds_per_step'] * 1e3:.3f} | {p['us_per_step'] / 1e3:.3f} "
                         f"| {p['kernels_per_step']:.0f} |")
        cpu = cpu or result.get("cpu")
    if cpu:
        lines.append(f"| CPUs ({cpu['threads']} threads) | ordinary | | "
                     f"{cpu['seconds_per_step'] * 1e3:.3f} | | |")
    lines += ["", "`vae.train` whole (as the pipeline's train stage calls it):", "",
              "| where | allocator | steps | seconds | per step (ms) | graphed |",
              "| --- | --- | --- | --- | --- | --- |"]
    for result in payload["children"]:
        for key in ("train gpu", "train cpu"):
            if key in result:
                t = result[key]
                lines.append(f"| {key.split()[1].upper()} | {result['allocator']} | {t['steps']} "
                             f"| {t['seconds']:.2f} | {t['seconds'] / t['steps'] * 1e3:.3f} "
                             f"| {'yes' if t['graphed'] else 'no'} |")
    for result in payload["children"]:
        for row in result["gpu"]:
            if row["cudnn_benchmark"] or row["graphed"]:
                continue
            lines += ["", f"Costliest kernels of an ordinary step ({result['allocator']}, "
                      "autotuner off), microseconds per step:", "",
                      "| kernel | us/step | launches/step |", "| --- | --- | --- |"]
            lines += [f"| `{name}` | {us:.1f} | {count:.0f} |"
                      for name, us, count in row["profile"]["top"]]
    return "\n".join(lines) + "\n"


def options(parser) -> None:
    parser.add_argument("--beats", type=int, default=65_000, help="Training beats.")
    parser.add_argument("--steps", type=int, default=1000, help="Timed GPU steps per variant.")
    parser.add_argument("--cpu-steps", type=int, default=200, help="Timed CPU steps.")


def check_arguments(parser, args) -> None:
    for name in ("beats", "steps", "cpu_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.beats < 256:
        parser.error("--beats: give at least 256 (two batches)")


def measure(args, run) -> None:
    run.payload["beats"] = args.beats
    run.payload["children"] = [under(args.argv, allocator) for allocator in ALLOCATORS]


SCRIPT = Script(__file__, __doc__, options=options, check=check_arguments, measure=measure,
                markdown=markdown, name="ecg-train")
parse, main = SCRIPT.parse, SCRIPT.main


if __name__ == "__main__":
    main()

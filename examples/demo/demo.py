"""A small mixed-framework workload: DataFrame -> array -> PyTorch -> XGBoost, on a cluster.

It shows the plugin at work: on GPUs every step allocates from the workers' one RMM pool and
the hand-offs are zero-copy (CUDA array interface); on CPUs the same code runs on pandas/NumPy.
"""

from __future__ import annotations

import time

import dask
import numpy as np

from dask_gpu_interop import cluster_workers, memory_report, xgboost_config

# PyTorch is no requirement of [examples]: [ecg] brings it. A plain `torch` requirement pulls
# PyTorch's CUDA build, so a machine without a GPU takes its CPU build first.
TORCH_INSTALL = ("pip install 'dask-gpu-interop[ecg]' (on a machine without a GPU, PyTorch's "
                 "CPU build first: pip install torch --index-url "
                 "https://download.pytorch.org/whl/cpu)")
FEATURES = [f"f{i}" for i in range(8)]
BACKENDS = {"gpu": {"dataframe.backend": "cudf", "array.backend": "cupy"},
            "cpu": {"dataframe.backend": "pandas", "array.backend": "numpy"}}


def modules(device: str):
    """(array module, frame module): CuPy and cuDF on GPUs, NumPy and pandas on CPUs."""
    import importlib

    backends = BACKENDS[device]
    return (importlib.import_module(backends["array.backend"]),
            importlib.import_module(backends["dataframe.backend"]))


def make_partition(seed: int, rows: int, device: str):
    """Synthetic features and a label with a learnable, non-linear rule."""
    xp, df = modules(device)
    rng = xp.random.default_rng(seed)
    x = rng.standard_normal((rows, len(FEATURES)), dtype=xp.float32)
    score = x[:, 0] + 0.5 * x[:, 1] ** 2 - x[:, 2] * x[:, 3] + 0.3 * rng.standard_normal(rows)
    frame = df.DataFrame({name: x[:, i] for i, name in enumerate(FEATURES)})
    frame["label"] = (score > 0.5).astype(xp.int32)
    return frame


def standardize_with_torch(frame, device: str):
    """cuDF/pandas -> CuPy/NumPy -> PyTorch (no copy) -> standardized -> back (no copy)."""
    import torch

    xp, df = modules(device)
    if device == "gpu":
        # __cuda_array_interface__, not DLPack: DLPack calls managed memory a device type of
        # its own (kDLCUDAManaged), which PyTorch rejects.
        tensor = torch.as_tensor(frame[FEATURES].to_cupy(), device="cuda")
    else:
        # pandas' arrays are read-only under copy-on-write: PyTorch warns on those; this one
        # is the frame's own copy (a 2-D block out of columns always is).
        tensor = torch.from_numpy(frame[FEATURES].to_numpy(copy=True))
    tensor = (tensor - tensor.mean(dim=0)) / tensor.std(dim=0).clamp_min(1e-6)
    out = xp.asarray(tensor.contiguous()) if device == "gpu" else tensor.numpy()
    result = df.DataFrame({name: out[:, i] for i, name in enumerate(FEATURES)})
    result["label"] = frame["label"].values  # NumPy or CuPy: no index to align
    return result


def run(client, device: str, rows: int = 1_000_000, partitions: int | None = None) -> dict:
    """Run the workload on ``client``'s cluster; returns timings, AUC and the memory report."""
    import dask.dataframe as dd
    import xgboost
    import xgboost.dask

    partitions = partitions or max(2, len(cluster_workers(client)) * 2)
    per_part = max(1, rows // partitions)
    times = {}
    t0 = time.perf_counter()
    meta = make_partition(0, 2, "cpu")
    meta = meta.iloc[:0]
    with dask.config.set(BACKENDS[device]):
        frame = dd.from_map(make_partition, range(partitions), rows=per_part, device=device)
    try:
        import torch  # noqa: F401

        frame = frame.map_partitions(standardize_with_torch, device, meta=meta)
        steps = "DataFrame -> array -> PyTorch -> XGBoost"
    except ImportError:
        steps = f"DataFrame -> XGBoost (the PyTorch step needs PyTorch: {TORCH_INSTALL})"
    frame = frame.persist()
    frame.map_partitions(len).compute()
    times["prepare_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    params = {"objective": "binary:logistic", "eval_metric": "auc", "tree_method": "hist",
              "max_depth": 6, "device": "cuda" if device == "gpu" else "cpu"}
    with xgboost.config_context(**xgboost_config(client)):
        dtrain = xgboost.dask.DaskQuantileDMatrix(client, frame[FEATURES], frame["label"])
        output = xgboost.dask.train(client, params, dtrain, num_boost_round=20,
                                    evals=[(dtrain, "train")], verbose_eval=False)
    times["train_s"] = time.perf_counter() - t0
    auc = float(np.asarray(output["history"]["train"]["auc"])[-1])
    return {
        "device": device, "rows": per_part * partitions, "steps": steps, **times,
        "train_auc": auc, "memory": memory_report(client),
    }

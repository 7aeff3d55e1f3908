"""Applications built on dask_gpu_interop, run from the checkout's root.

    python -m examples.mortgage     the RAPIDS mortgage ETL and XGBoost
    python -m examples.ecg          heartbeat outliers: cuDF -> CuPy -> Numba -> PyTorch
    python -m examples.demo         a small mixed-framework workload with the memory report

Each uses only the library's public names, so it can be copied into a project of its own.
"""

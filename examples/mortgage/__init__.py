"""The Fannie Mae mortgage pipeline on Dask: the classic RAPIDS notebook's ETL and XGBoost.

One code for both stacks: cuDF on GPU workers, pandas on CPU workers; on GPUs the features'
array steps are libcudf's precompiled operations (``features_gpu``), which a fresh machine
need not compile.

- ``files``: which files a dataset holds, their layout, and the partitions they are cut into
- ``read``: the files into typed frames (libcudf's CSV reader / pyarrow's), bad rows reported
- ``cpu_workers``: how local CPU workers allocate (a task reuses the memory the last one freed)
- ``features``: the per-loan features, the label and the feature table
- ``features_gpu``: the same steps as pylibcudf calls, for cuDF frames
- ``etl``: the ETL, a task per partition: streamed to Parquet, or kept for training
- ``placement``: where the whole job keeps the table for training (the GPUs' memory or the
  workers' host memory), decided before any work
- ``train``: ``xgboost.dask`` on the ETL's partitions, tested on a held-out quarter
- ``job``: all of it on a cluster, with timings and memory
- ``figures``: a run's figures as data (``--json``), for programs that compare runs

``testdata`` makes synthetic files in either layout, at any size, for the tests and the
``generate`` command; the pipeline does not need it.
"""

import importlib

# The public names, each imported from its module when first used: ``python -m
# examples.mortgage --help`` then imports no dataframe or XGBoost library.
_WHERE = {
    "BadRow": ("read", "BadRow"), "BadRowsError": ("read", "BadRowsError"),
    "EtlResult": ("etl", "EtlResult"), "FEATURES": ("schema", "FEATURES"),
    "LABEL": ("schema", "LABEL"), "PARAMS": ("train", "PARAMS"),
    "Spec": ("testdata.generate", "Spec"), "generate_dataset": ("testdata.generate", "generate"),
    "loans_for_size": ("testdata.generate", "loans_for_size"),
    "plan": ("files", "plan"), "run_etl": ("etl", "run"), "train_model": ("train", "train"),
    "write_features": ("etl", "write"),
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _WHERE[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)


__all__ = sorted(_WHERE)

"""The Fannie Mae mortgage pipeline on Dask: the classic RAPIDS notebook's ETL and XGBoost.

One code for both stacks: cuDF on GPU workers, pandas on CPU workers.

- ``generate``: synthetic files in either layout (classic or current), at any size
- ``files``: which files a dataset holds, their layout, and the partitions they are cut into
- ``read``: the files into typed frames (libcudf's CSV reader / pyarrow's), bad rows reported
- ``gpu_workers``: how local GPU workers run the tasks (two threads, a stream each)
- ``features``: the per-loan features, the label and the feature table
- ``etl``: the ETL as a dask DataFrame of one partition per piece of the files
- ``train``: ``xgboost.dask`` on the ETL's partitions, tested on a held-out quarter
- ``job``: all of it on a cluster, with timings and memory
"""

from .etl import EtlResult
from .etl import run as run_etl
from .etl import write as write_features
from .files import plan
from .generate import Spec, loans_for_size
from .generate import generate as generate_dataset
from .read import BadRow, BadRowsError
from .schema import FEATURES, LABEL
from .train import PARAMS
from .train import train as train_model

__all__ = [
    "BadRow",
    "BadRowsError",
    "EtlResult",
    "FEATURES",
    "LABEL",
    "PARAMS",
    "Spec",
    "generate_dataset",
    "loans_for_size",
    "plan",
    "run_etl",
    "train_model",
    "write_features",
]

"""The Fannie Mae mortgage pipeline: synthetic data, ETL and XGBoost, on Dask.

One code for both stacks: cuDF on GPU workers, pandas on CPU workers (see ``backend``).

- ``generate``: files in the real layout (perf/, acq/, names.csv), at any size
- ``etl``: the classic notebook's ETL into 45 float32 features and the label
- ``read``: the files into typed frames, bad rows found and reported; on GPUs through the
  reader's own kernels (``lines``: line layout and text codes, ``number_fields``: numbers)
- ``features``: the per-loan features, the label and the feature table
- ``train``: ``xgboost.dask`` on the ETL's partitions, tested on a held-out quarter
- ``job``: all of it on a cluster, with timings and memory
"""

from .etl import find_dataset, plan
from .etl import run as run_etl
from .etl import write as write_features
from .generate import Spec, loans_for_size
from .generate import generate as generate_dataset
from .read import BadRow, BadRowsError
from .schema import FEATURES, LABEL
from .train import PARAMS
from .train import train as train_model

__all__ = [
    "BadRow",
    "BadRowsError",
    "FEATURES",
    "LABEL",
    "PARAMS",
    "Spec",
    "find_dataset",
    "generate_dataset",
    "loans_for_size",
    "plan",
    "run_etl",
    "train_model",
    "write_features",
]

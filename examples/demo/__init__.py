"""A small mixed-framework workload on a cluster: DataFrame -> array -> PyTorch -> XGBoost."""

from .demo import make_partition, run, standardize_with_torch

__all__ = ["make_partition", "run", "standardize_with_torch"]

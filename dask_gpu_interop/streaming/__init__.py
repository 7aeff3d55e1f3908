"""XGBoost on a dask collection larger than the workers' memory: each partition made on its
worker as XGBoost reads it (:func:`train_streamed`)."""

from .batches import NotLazyError
from .train import StreamedTraining, train_streamed

__all__ = ["NotLazyError", "StreamedTraining", "train_streamed"]

"""``python -m examples.ecg``: heartbeat outliers in an ECG on a Dask cluster."""

from .cli import ecg

ecg(prog_name="python -m examples.ecg")

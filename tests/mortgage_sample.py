"""Where the real Fannie Mae sample rows are: ``DASK_GPU_INTEROP_MORTGAGE_SAMPLE``, else the
project's shared data next to the checkout. Tests that need them skip when they are absent."""

from __future__ import annotations

import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.environ.get(
    "DASK_GPU_INTEROP_MORTGAGE_SAMPLE",
    os.path.join(os.path.dirname(_ROOT), "shared", "data", "mortgage-2007Q3-sample"),
)
SAMPLE_PERF = os.path.join(SAMPLE, "Performance_2007Q3.txt_0")
SAMPLE_ACQ = os.path.join(SAMPLE, "Acquisition_2007Q3.txt")

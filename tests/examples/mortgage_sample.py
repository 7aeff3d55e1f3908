"""The real Fannie Mae sample rows that ship with the mortgage example (2007Q3, classic layout)."""

from __future__ import annotations

import os

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(_ROOT, "examples", "mortgage", "data", "2007Q3-sample")
SAMPLE_PERF = os.path.join(SAMPLE, "Performance_2007Q3.txt_0")
SAMPLE_ACQ = os.path.join(SAMPLE, "Acquisition_2007Q3.txt")

"""A real ECG, where one is on this machine already: nothing here downloads anything.

SciPy's ``electrocardiogram()`` is 5 minutes of MIT-BIH Arrhythmia Database record 208 (lead
MLII, 360 Hz; many premature ventricular beats). SciPy up to 1.11 ships it inside the package
(``scipy/misc/ecg.dat``); newer SciPy fetches it with pooch on first use into pooch's cache.
We look in both places, and in ``$DASK_GPU_INTEROP_ECG_FILE``, and never fetch: the package
must run on machines with no network. The record comes without beat annotations, so its
beats are checked against an independent reference detector (``reference_beats``), which
measures agreement, not correctness.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENV = "DASK_GPU_INTEROP_ECG_FILE"
RATE = 360.0
NAME = "MIT-BIH record 208 (5 min, lead MLII), as bundled by SciPy"


class RecordUnavailable(LookupError):
    """No copy of the record is on this machine; the message says where we looked."""


@dataclass(frozen=True)
class Record:
    signal: np.ndarray  # float32, mV
    rate: float
    name: str
    path: Path


def candidates() -> list[Path]:
    """Where a copy of SciPy's ECG file may be, in the order we try them."""
    places = []
    if os.environ.get(ENV):
        places.append(Path(os.environ[ENV]))
    try:
        import scipy

        places.append(Path(scipy.__file__).parent / "misc" / "ecg.dat")
    except ImportError:
        pass
    places.append(_pooch_cache() / "ecg.dat")
    return places


def _pooch_cache() -> Path:
    """Pooch's cache folder for SciPy's data sets, without importing pooch if it is absent."""
    try:
        import pooch

        return Path(pooch.os_cache("scipy-data"))
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "scipy-data"


def load() -> Record:
    """The record, from the first place that has it; ``RecordUnavailable`` says why not."""
    looked = []
    for path in candidates():
        if path.is_file():
            return Record(_read_scipy_ecg(path), RATE, NAME, path)
        looked.append(str(path))
    raise RecordUnavailable(
        "no copy of SciPy's electrocardiogram (MIT-BIH record 208) on this machine; looked at "
        + ", ".join(looked)
        + f". SciPy <= 1.11 ships it; newer SciPy fetches it with pooch once "
        f"(scipy.datasets.electrocardiogram()); or point ${ENV} at a copy"
    )


def _read_scipy_ecg(path: Path) -> np.ndarray:
    """SciPy's format: an ``.npz`` holding ``ecg``, 11-bit ADC units, 200 units/mV, 1024 = 0."""
    with open(path, "rb") as f:
        data = np.load(f)
        if "ecg" not in data:
            raise ValueError(f"{path}: not SciPy's ECG file (no 'ecg' array in it)")
        raw = data["ecg"].astype(np.int64)
    return ((raw - 1024) / 200.0).astype(np.float32)


def reference_beats(signal, rate: float) -> np.ndarray:
    """R peaks by a different method (Pan-Tompkins style): 5-15 Hz band-pass, derivative,
    squaring, 150 ms moving integration, peaks at least 250 ms apart above a third of the
    99th percentile, each moved to the largest |deviation| of the band-passed signal nearby."""
    from scipy.signal import butter, find_peaks, sosfiltfilt

    x = np.asarray(signal, dtype=np.float64)
    band = sosfiltfilt(butter(2, [5, 15], btype="band", fs=rate, output="sos"), x)
    energy = np.gradient(band) ** 2
    width = max(1, int(0.15 * rate))
    integrated = np.convolve(energy, np.ones(width) / width, mode="same")
    peaks, _ = find_peaks(integrated, distance=int(0.25 * rate),
                          height=np.percentile(integrated, 99) / 3)
    reach = int(0.08 * rate)
    out = np.empty(len(peaks), dtype=np.int64)
    for k, p in enumerate(peaks):
        lo, hi = max(0, p - reach), min(len(x), p + reach + 1)
        out[k] = lo + int(np.argmax(np.abs(band[lo:hi])))
    return np.unique(out)

"""A synthetic single-lead ECG with known beats: the ground truth for detection and outliers.

Each beat is a sum of Gaussian waves (P, Q, R, S, T, after McSharry et al.'s ECGSYN), placed
on R-R intervals with heart-rate variability (respiratory sinus arrhythmia, a 0.1 Hz Mayer
wave and a slow drift of the mean rate). On top: white noise, baseline wander and mains hum.
Abnormal beats are injected at known positions:

- ``pvc``: premature ventricular contraction: early (60% of the R-R interval), no P wave, a
  wide QRS, a large T wave of opposite polarity and a compensatory pause.
- ``wide``: a bundle-branch-block-like beat on time: a wide, notched QRS (RSR') and an
  inverted T wave.

Positions are R peaks (the largest deflection) in samples.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

KINDS = ("normal", "pvc", "wide")
NORMAL, PVC, WIDE = range(3)

# Waves of each kind: (amplitude mV, centre s relative to R, width s). The T wave's centre
# scales with sqrt(R-R) (Bazett): see _render.
_WAVES = {
    NORMAL: [(0.15, -0.17, 0.022), (-0.12, -0.028, 0.009), (1.2, 0.0, 0.010),
             (-0.28, 0.030, 0.010), (0.32, 0.25, 0.045)],
    PVC: [(1.45, 0.0, 0.030), (-0.35, 0.075, 0.025), (-0.65, 0.30, 0.065)],
    WIDE: [(-0.10, -0.035, 0.010), (0.95, 0.0, 0.012), (-0.30, 0.025, 0.010),
           (0.60, 0.050, 0.014), (0.15, -0.17, 0.022), (-0.28, 0.28, 0.055)],
}
_T_SCALES = {NORMAL: {4}, PVC: {2}, WIDE: {5}}  # which waves move with sqrt(R-R)


@dataclass(frozen=True)
class SyntheticECG:
    """The signal (mV, float32), its rate (Hz) and the truth: R peaks and each beat's kind."""

    signal: np.ndarray
    rate: float
    peaks: np.ndarray  # int64 sample positions of R peaks
    kinds: np.ndarray  # uint8 codes into KINDS

    @property
    def abnormal(self) -> np.ndarray:
        return self.kinds != NORMAL

    @property
    def seconds(self) -> float:
        return len(self.signal) / self.rate

    def summary(self) -> str:
        counts = ", ".join(f"{int((self.kinds == k).sum())} {name}" for k, name in enumerate(KINDS))
        return (f"{self.seconds / 60:.1f} min at {self.rate:g} Hz, {len(self.signal):,} samples, "
                f"{len(self.peaks):,} beats ({counts})")


def make_ecg(
    seconds: float = 1200.0,
    rate: float = 250.0,
    *,
    heart_rate: float = 72.0,
    abnormal_fraction: float = 0.03,
    noise: float = 0.03,
    wander: float = 0.15,
    seed: int = 0,
) -> SyntheticECG:
    """``seconds`` of ECG at ``rate`` Hz; ``abnormal_fraction`` of beats are PVC or wide."""
    if seconds <= 0 or rate <= 0:
        raise ValueError(f"seconds={seconds!r} and rate={rate!r} must be positive")
    if not 0 <= abnormal_fraction < 0.5:
        raise ValueError(f"abnormal_fraction={abnormal_fraction!r}: must lie in [0, 0.5)")
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    peaks_s, kinds, rr = _beat_times(seconds, heart_rate, abnormal_fraction, rng)
    t = np.arange(n, dtype=np.float64) / rate
    signal = _render(n, rate, peaks_s, kinds, rr, rng)
    signal += _baseline(t, wander, rng)
    signal += noise * rng.standard_normal(n)
    signal += _sine(t, 0.01, 50.0, rng.uniform(0, 2 * np.pi))
    peaks = np.round(peaks_s * rate).astype(np.int64)
    inside = (peaks >= 0) & (peaks < n)
    return SyntheticECG(signal.astype(np.float32), float(rate), peaks[inside], kinds[inside])


def _beat_times(seconds, heart_rate, abnormal_fraction, rng):
    """R-peak times (s), kinds, and each beat's underlying sinus R-R interval."""
    mean_rr = 60.0 / heart_rate
    count = int(seconds / (0.6 * mean_rr)) + 8
    k = np.arange(count)
    approx_t = k * mean_rr
    drift = 1 + 0.08 * np.sin(2 * np.pi * approx_t / 3600 + rng.uniform(0, 2 * np.pi))
    rsa = 0.04 * np.sin(2 * np.pi * 0.25 * approx_t + rng.uniform(0, 2 * np.pi))
    mayer = 0.025 * np.sin(2 * np.pi * 0.1 * approx_t + rng.uniform(0, 2 * np.pi))
    jitter = np.zeros(count)
    eps = 0.015 * rng.standard_normal(count)
    for i in range(1, count):  # AR(1): beat-to-beat variability with memory
        jitter[i] = 0.7 * jitter[i - 1] + eps[i]
    sinus_rr = mean_rr * drift * (1 + rsa + mayer + jitter)

    kinds = np.zeros(count, dtype=np.uint8)
    chosen = rng.random(count) < abnormal_fraction
    chosen[:2] = chosen[-2:] = False
    chosen[1:] &= ~chosen[:-1]  # never two abnormal beats in a row
    kinds[chosen] = np.where(rng.random(int(chosen.sum())) < 0.65, PVC, WIDE)

    intervals = sinus_rr.copy()  # interval from beat i-1 to beat i
    pvc = np.flatnonzero(kinds == PVC)
    intervals[pvc] = 0.6 * sinus_rr[pvc]
    after = pvc + 1
    after = after[after < count]
    intervals[after] = 2 * sinus_rr[after - 1] - intervals[after - 1]  # compensatory pause
    times = 0.35 + np.cumsum(intervals) - intervals[0]
    keep = times < seconds
    return times[keep], kinds[keep], sinus_rr[keep]


def _render(n, rate, peaks_s, kinds, rr, rng):
    signal = np.zeros(n, dtype=np.float64)
    resp = 1 + 0.06 * np.sin(2 * np.pi * 0.25 * peaks_s)  # breathing moves the heart's axis
    for kind, waves in _WAVES.items():
        sel = np.flatnonzero(kinds == kind)
        if not len(sel):
            continue
        scale = resp[sel] * (1 + 0.04 * rng.standard_normal(len(sel)))
        qt = np.sqrt(rr[sel] / 0.8)
        for w, (amp, centre, width) in enumerate(waves):
            shift = centre * qt if w in _T_SCALES[kind] else centre
            width_j = width * (1 + 0.05 * rng.standard_normal(len(sel)))
            _add_gaussians(signal, (peaks_s[sel] + shift) * rate, width_j * rate, amp * scale)
    return signal


def _add_gaussians(signal, centres, sigmas, amps, block=16384):
    """Add one Gaussian per beat (vectorized, in blocks of beats to bound memory)."""
    half = int(np.ceil(4 * sigmas.max())) if len(sigmas) else 0
    offsets = np.arange(-half, half + 1)
    n = len(signal)
    for lo in range(0, len(centres), block):
        c = centres[lo:lo + block, None]
        idx = np.round(c).astype(np.int64) + offsets
        values = amps[lo:lo + block, None] * np.exp(
            -0.5 * ((idx - c) / sigmas[lo:lo + block, None]) ** 2
        )
        ok = (idx >= 0) & (idx < n)
        idx, values = idx[ok], values[ok]
        if len(idx):  # only the samples these beats reach
            first = int(idx.min())
            sums = np.bincount(idx - first, weights=values)
            signal[first:first + len(sums)] += sums


def _baseline(t, wander, rng):
    """Baseline wander: breathing (0.15-0.3 Hz), slow drift, electrode motion."""
    f1 = rng.uniform(0.15, 0.3)
    base = _sine(t, wander, f1, rng.uniform(0, 2 * np.pi))
    base += _sine(t, 0.6 * wander, 0.05, rng.uniform(0, 2 * np.pi))
    return base


def _sine(t, amplitude, frequency, phase):
    """``amplitude * sin(2 pi frequency t + phase)``, a block per thread: NumPy's ufuncs
    release the GIL, and each sample's value is what one call over all of ``t`` gives."""
    out = np.empty_like(t)
    step = 1 << 20

    def block(lo):
        out[lo:lo + step] = amplitude * np.sin(2 * np.pi * frequency * t[lo:lo + step] + phase)

    with ThreadPoolExecutor(_THREADS) as pool:
        list(pool.map(block, range(0, len(t), step)))
    return out


def make_and_write(path, seconds: float, rate: float, seed: int = 0):
    """``make_ecg(seconds, rate, seed=seed)`` written to ``path`` as CSV, for another process:
    (the recording's truth without its signal, which the file holds, so that little travels
    back; its summary; the seconds each step took, ``{"generate": ..., "write csv": ...}``)."""
    import time
    from dataclasses import replace

    started = time.perf_counter()
    truth = make_ecg(seconds, rate, seed=seed)
    made = time.perf_counter()
    write_csv(path, truth.signal)
    took = {"generate": made - started, "write csv": time.perf_counter() - made}
    return replace(truth, signal=truth.signal[:0]), truth.summary(), took


def write_csv(path, signal, *, header: str | None = "ecg", decimals: int = 4) -> None:
    """Write a single-column CSV (``header`` on the first line unless None), as devices export:
    each value rounded to ``decimals`` places, written as its shortest text (``0.1``, ``-1.25``).

    pyarrow formats the numbers in C++, a block per thread, without pandas or one large string.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    signal = np.asarray(signal)
    if signal.ndim != 1:
        raise ValueError(f"write_csv: expected a 1-D signal, got shape {signal.shape}")
    options = pacsv.WriteOptions(include_header=False, quoting_style="none",
                                 batch_size=_CSV_BLOCK)

    def text(lo: int) -> bytes:
        block = np.round(signal[lo:lo + _CSV_BLOCK].astype(np.float64), int(decimals)) + 0.0
        sink = pa.BufferOutputStream()  # + 0.0 above: no "-0"
        pacsv.write_csv(pa.table({"v": block}), sink, options)
        return sink.getvalue().to_pybytes()

    starts = range(0, len(signal), _CSV_BLOCK)
    with open(path, "wb") as f, ThreadPoolExecutor(_THREADS) as pool:
        if header is not None:
            f.write(f"{header}\n".encode("ascii"))
        for first in range(0, len(starts), _THREADS):  # a few blocks in memory at a time
            for chunk in pool.map(text, starts[first:first + _THREADS]):
                f.write(chunk)


_CSV_BLOCK = 1 << 20  # rows a thread formats at once
_THREADS = min(16, os.cpu_count() or 1)  # for NumPy's and pyarrow's blocks (they drop the GIL)

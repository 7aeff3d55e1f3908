"""Segmentation: where the beats are, how long each is, and which are plausible.

1. The stream is convolved (by FFT) with a Ricker wavelet as wide as a QRS complex at the
   sampling rate: the wavelet has zero mean, so baseline wander and the slow P and T waves
   give little response, while a QRS of either polarity gives a large one (we keep |response|).
2. Local maxima of the response (``nms.local_maxima``) are candidates. A candidate is a beat
   when its response reaches ``threshold_fraction`` of the ``threshold_quantile`` of all
   candidates' responses: a threshold for the whole recording, so that where the stream is
   cut into chunks cannot change which beats are found.
3. Beat lengths are differences of positions (R-R intervals). A beat is embedded only when it
   has both neighbours and both intervals are physiological; the others are pruned.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .backend import Backend
from .params import Params


def ricker(sigma: float, half_width: int, xp=np):
    """The Ricker ("Mexican hat") wavelet, ``2 * half_width + 1`` samples, exactly zero-mean.

    Written out here: current SciPy has no Ricker wavelet to import.
    """
    if sigma <= 0 or half_width < 1:
        raise ValueError(f"ricker: sigma={sigma!r} and half_width={half_width!r} must be positive")
    t = np.arange(-half_width, half_width + 1, dtype=np.float64) / sigma
    a = 2 / (math.sqrt(3 * sigma) * math.pi ** 0.25)
    w = a * (1 - t**2) * np.exp(-(t**2) / 2)
    w -= w.mean()  # truncation leaves a little DC; remove it so baseline gives no response
    return xp.asarray(w.astype(np.float32))


def _fast_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: lengths FFT libraries (pocketfft, cuFFT) are fast at."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def convolve(signal, kernel, backend: Backend):
    """|signal * kernel| by FFT, same length as ``signal`` (zero beyond its ends), float32.

    CuPy's FFT (cuFFT) on the GPU, NumPy's (pocketfft, float32) on the CPU.
    """
    xp = backend.xp
    n, k = len(signal), len(kernel)
    if n == 0:
        return xp.empty(0, dtype=xp.float32)
    size = _fast_length(n + k - 1)
    spectrum = xp.fft.rfft(signal.astype(xp.float32, copy=False), size)
    spectrum *= xp.fft.rfft(xp.asarray(kernel, dtype=xp.float32), size)
    full = xp.fft.irfft(spectrum, size)
    half = k // 2
    return xp.abs(full[half:half + n]).astype(xp.float32, copy=False)


def candidates(response, lo: int, hi: int, half_window: int, backend: Backend):
    """Local maxima in ``response[lo:hi]``: (positions into ``response``, their responses)."""
    from .nms import local_maxima

    positions = local_maxima(response, lo, hi, half_window, backend)
    return positions, response[positions]


def threshold(heights: np.ndarray, params: Params) -> float:
    """The response a candidate needs to be a beat, from all candidates of the recording."""
    heights = np.asarray(heights)
    if len(heights) == 0:
        return math.inf
    return float(params.threshold_fraction * np.quantile(heights, params.threshold_quantile))


LOCAL = 4  # R-R intervals on each side whose median sizes a beat's segment


@dataclass(frozen=True)
class BeatTable:
    """Beats of a recording: positions (samples), lengths and where each embedded beat runs."""

    positions: np.ndarray  # int64, sorted
    lengths: np.ndarray  # float64 samples to the next beat (NaN for the last beat)
    kept: np.ndarray  # bool: embedded (not pruned)
    starts: np.ndarray  # float64 segment start (NaN where pruned)
    ends: np.ndarray  # float64 segment end (NaN where pruned)

    def __len__(self) -> int:
        return len(self.positions)


def beat_table(positions, rate: float, params: Params, samples: int | None = None) -> BeatTable:
    """Lengths from differences of positions; prune beats whose intervals are implausible.

    A kept beat has a neighbour on each side at a physiological distance. Its segment runs
    from ``before_fraction`` to ``after_fraction`` of the *local median* R-R interval around
    its R peak: a median, so that a premature beat next to it neither squeezes its segment nor
    (ending at half an interval) spills into it. Segments must lie inside the ``samples``.
    """
    positions = np.sort(np.asarray(positions, dtype=np.int64))
    n = len(positions)
    lengths = np.full(n, np.nan)
    if n > 1:
        lengths[:-1] = np.diff(positions)
    seconds = lengths / rate
    ok = (seconds >= params.min_beat_seconds) & (seconds <= params.max_beat_seconds)
    kept = np.zeros(n, dtype=bool)
    if n > 2:
        kept[1:-1] = ok[:-2] & ok[1:-1]  # the interval before and the interval after
    local = _local_median(np.where(ok, lengths, np.nan))
    starts = positions - params.before_fraction * local
    ends = positions + params.after_fraction * local
    limit = np.inf if samples is None else samples - 2  # room for the interpolation
    kept &= (starts >= 0) & (ends <= limit)
    starts[~kept] = np.nan
    ends[~kept] = np.nan
    return BeatTable(positions, lengths, kept, starts, ends)


def doubts(table: BeatTable, rate: float) -> list[str]:
    """Why the detections may not be a heartbeat, in words (empty when they look like one).

    The bounds sit between what a heart gives and what noise gives: on a real recording
    (frequent PVCs among normal beats) and on the synthetic one nearly every detection has
    plausible intervals on both sides and successive R-R intervals differ by a few percent;
    on noise about a quarter of the detections fail that and the intervals differ by about a
    third.
    """
    if len(table) < 3:
        return [f"only {len(table)} beat(s) found"]
    lengths = table.lengths[np.isfinite(table.lengths)] / rate
    out = []
    bpm = 60 / float(np.median(lengths))
    if not 30 <= bpm <= 220:
        out.append(f"a median rate of {bpm:.0f} bpm is outside 30-220")
    kept = float(np.mean(table.kept))
    if kept < 0.9:
        out.append(f"only {kept:.0%} of the detections have plausible intervals on both sides")
    change = float(np.median(np.abs(np.diff(lengths))) / np.median(lengths))
    if change > 0.2:
        out.append(f"successive intervals differ by {change:.0%} (a median; a heart's rarely "
                   "by more than 10%)")
    return out


def _local_median(lengths: np.ndarray) -> np.ndarray:
    """Per beat, the median of the plausible R-R intervals among the ``2 * LOCAL`` around it."""
    n = len(lengths)
    if n == 0:
        return lengths
    # Interval i joins beats i and i+1: beat b's neighbours are intervals b-LOCAL .. b+LOCAL-1.
    padded = np.concatenate([np.full(LOCAL, np.nan), lengths, np.full(LOCAL, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * LOCAL)[:n]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows: no plausible interval
        return np.nanmedian(windows, axis=1)

"""The pipeline's settings, in physiological units, checked once when they are made.

Everything that depends on the sampling rate is given in seconds and turned into samples
here, so one set of settings serves a 250 Hz Holter recording and a 360 Hz MIT-BIH record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

EMBED_SIZE = 256  # samples per embedded beat: the VAE's input width


@dataclass(frozen=True)
class Params:
    # Segmentation: a Ricker wavelet as wide as a QRS complex, then non-maximum suppression.
    qrs_seconds: float = 0.10  # QRS duration the wavelet is sized to (sigma = qrs/6)
    nms_seconds: float = 0.20  # half-window: two beats are never closer than this
    threshold_fraction: float = 0.3  # a beat's response is at least this share of ...
    threshold_quantile: float = 0.75  # ... this quantile of all local maxima's responses
    # Pruning: beat lengths (R-R intervals) outside these bounds are not embedded.
    min_beat_seconds: float = 0.25  # 240 bpm
    max_beat_seconds: float = 2.0  # 30 bpm
    # Embedding: a beat runs from before_fraction of the local R-R interval (the median of
    # the 8 around it) before its R peak to after_fraction after it.
    before_fraction: float = 0.35
    after_fraction: float = 0.5
    # The VAE.
    train_fraction: float = 0.75
    epochs: int = 20
    max_steps: int = 3000  # caps training on long recordings (20 h at 250 Hz: about 6 epochs)
    batch_size: int = 128
    learning_rate: float = 2e-3
    kl_weight: float = 1.0
    contamination: float = 0.02  # share of training beats above the outlier threshold
    seed: int = 0

    def __post_init__(self):
        positive = ("qrs_seconds", "nms_seconds", "min_beat_seconds", "max_beat_seconds",
                    "epochs", "max_steps", "batch_size", "learning_rate")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"Params.{name}={value!r}: must be a positive number")
        for name in ("threshold_fraction", "threshold_quantile", "before_fraction", "after_fraction",
                     "train_fraction", "contamination"):
            value = getattr(self, name)
            if not (0 < value < 1):
                raise ValueError(f"Params.{name}={value!r}: must lie strictly between 0 and 1")
        if self.kl_weight < 0:
            raise ValueError(f"Params.kl_weight={self.kl_weight!r}: must be >= 0")
        if self.min_beat_seconds >= self.max_beat_seconds:
            raise ValueError(
                f"Params: min_beat_seconds ({self.min_beat_seconds}) must be below "
                f"max_beat_seconds ({self.max_beat_seconds})"
            )
        if self.nms_seconds > self.min_beat_seconds:
            raise ValueError(
                f"Params: nms_seconds ({self.nms_seconds}) above min_beat_seconds "
                f"({self.min_beat_seconds}) would suppress beats the pruning allows"
            )

    # Sizes in samples at a sampling rate.
    def ricker_sigma(self, rate: float) -> float:
        return self.qrs_seconds / 6 * rate

    def ricker_half_width(self, rate: float) -> int:
        """Half the wavelet's support (5 sigma): the overlap the convolution needs."""
        return max(1, math.ceil(5 * self.ricker_sigma(rate)))

    def nms_half_window(self, rate: float) -> int:
        return max(1, round(self.nms_seconds * rate))

    def as_dict(self) -> dict:
        return asdict(self)


def check_rate(rate) -> float:
    """A sampling rate a QRS can be resolved at (the wavelet needs a few samples per QRS)."""
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"rate={rate!r}: give the sampling rate in Hz, e.g. 250") from None
    if not math.isfinite(rate) or rate < 50:
        raise ValueError(
            f"rate={rate!r} Hz: too low to resolve a QRS complex (about 100 ms); "
            "ECG is sampled at 100-1000 Hz"
        )
    return rate

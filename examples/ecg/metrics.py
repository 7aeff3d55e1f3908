"""How good the answers are: beat detection against known beats, outlier ranking against labels."""

from __future__ import annotations

import math

import numpy as np


def match(detected, truth, tolerance: int) -> tuple[np.ndarray, np.ndarray]:
    """Pair detections with true beats at most ``tolerance`` samples apart, one to one.

    Returns ``(truth index per detection or -1, detection index per true beat or -1)``.
    Greedy in time order, which is optimal when beats are further apart than twice the
    tolerance (true for any heart: 2 x 50 ms is far below the shortest R-R interval).
    """
    detected = np.asarray(detected, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    if np.any(np.diff(detected) < 0) or np.any(np.diff(truth) < 0):
        raise ValueError("match: positions must be sorted")
    for_detected = np.full(len(detected), -1, dtype=np.int64)
    for_truth = np.full(len(truth), -1, dtype=np.int64)
    i = j = 0
    while i < len(detected) and j < len(truth):
        gap = detected[i] - truth[j]
        if abs(gap) <= tolerance:
            for_detected[i], for_truth[j] = j, i
            i += 1
            j += 1
        elif gap < 0:
            i += 1
        else:
            j += 1
    return for_detected, for_truth


def detection_scores(detected, truth, rate: float, tolerance_seconds: float = 0.05) -> dict:
    """Precision, recall and F1 of detected beats, a match being within ``tolerance_seconds``."""
    for_detected, _ = match(detected, truth, int(round(tolerance_seconds * rate)))
    tp = int((for_detected >= 0).sum())
    fp = len(for_detected) - tp
    fn = len(truth) - tp
    precision = tp / (tp + fp) if tp + fp else math.nan
    recall = tp / (tp + fn) if tp + fn else math.nan
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan
    return {"tp": tp, "fp": fp, "fn": fn, "precision": precision, "recall": recall, "f1": f1,
            "tolerance_ms": tolerance_seconds * 1000}


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve: the chance that a random positive outscores a random negative
    (ties count half). NaN when either class is absent."""
    from scipy.stats import rankdata

    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return math.nan
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))

"""A run's figures as data: ``--json PATH`` writes them beside the lines printed for people, for
programs that compare runs (the benchmarks read them instead of the printed lines).

    {"figures": "examples.ecg", "device": "gpu", "workers": 1, "samples": 18000000,
     "chunks": 16, "rate": 250.0, "stages": {"data": 0.4, "read": 0.2, ..., "plots": 1.1},
     "pipeline": 0.9, "beats": 87000, "embedded": 86990, "steps": 3000, "graphed": true,
     "scores": {"detection": {"f1": 0.999, ...}, "outliers": {"auc": 0.97, ...}}}

``stages`` holds each stage's seconds in the order the run printed them; ``pipeline`` is the
read-to-score part; ``scores`` is null for a recording of one's own (no known truth). A figures
file replaces only an earlier one, never a file the command did not write.
"""

from __future__ import annotations

import json
import os
import tempfile

KIND = "examples.ecg"


def of_run(result, workers: int, stages: dict, scores: dict | None) -> dict:
    """The figures of one run: its ``ECGResult``, the cluster's workers, every stage's seconds
    and the scores against a known truth (None without one)."""
    beats = result.beats
    return {"figures": KIND, "device": result.device, "workers": workers,
            "samples": result.samples, "chunks": result.chunks, "rate": result.rate,
            "stages": stages, "pipeline": sum(result.times.values()),
            "beats": len(beats), "embedded": int(beats.kept.sum()),
            "steps": result.model["steps"], "graphed": bool(result.model.get("graphed")),
            "scores": scores}


def is_figures(path: str) -> bool:
    """Whether ``path`` holds figures this command wrote (one a later run may replace)."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get("figures") == KIND


def check(path: str) -> str:
    """The absolute path of ``path`` once figures may be written there (before any work); a
    ValueError saying what to do where it is a folder, lies in none, or holds something else."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise ValueError(f"--json {path} is a folder: give a file name for the figures")
    if not os.path.isdir(os.path.dirname(path)):
        raise ValueError(f"--json {path}: the folder {os.path.dirname(path)} does not exist")
    if os.path.lexists(path) and not is_figures(path):
        raise ValueError(f"--json {path} exists and is not an earlier figures file: give "
                         "another file name; nothing was changed")
    return path


def _plain(value):
    """A NumPy scalar as the Python number JSON writes."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write(path: str, figures: dict) -> str:
    """``figures`` as JSON at ``path`` (see ``check``), written beside it and renamed into
    place."""
    path = check(path)
    handle, partial = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.partial-",
                                       dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1, default=_plain)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return path

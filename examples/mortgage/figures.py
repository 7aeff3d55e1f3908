"""A run's figures as data: ``--json PATH`` writes them beside the lines printed for people, for
programs that compare runs (the benchmarks read them instead of the printed lines).

The ``etl`` command's file::

    {"figures": "examples.mortgage etl", "device": "gpu",
     "etl": {"rows": 74000000, "bytes": 10737418240, "partitions": 40, "seconds": 2.13,
             "written_bytes": 1610612736, "bad_rows": 0, "join": "quarter",
             "join_seconds": 0.0}}

``join`` is the ``--join`` of the run and ``join_seconds`` its shuffles' seconds, within
``seconds`` (0 for the per-quarter join). The whole job's adds its workers, its stages (seconds by name, in the order the stage lines
print them, "other" last: the rest of the total), the training's figures, the test AUC (NaN
where the held-out rows have one class, as Python's ``json`` writes it), where the training
data lived and why, and the seconds since the command started. A figures file replaces only an
earlier one (``is_figures``), with ``--overwrite``, never a file the commands did not write.
"""

from __future__ import annotations

import json

from . import output

KIND = "examples.mortgage"  # the start of every figures file's "figures" entry
WHAT = "figures file"


def _etl(result) -> dict:
    return {"rows": result.rows, "bytes": result.input_bytes, "partitions": result.partitions,
            "seconds": result.seconds, "written_bytes": result.written_bytes,
            "bad_rows": result.bad_count, "join": result.join,
            "join_seconds": result.join_seconds}


def of_etl(result, device: str, stages: dict, total: float) -> dict:
    """The ``etl`` command's figures: its ``EtlResult`` on ``device``, its stage times (as
    printed, "other" the rest) and the seconds since the command started."""
    return {"figures": f"{KIND} etl", "device": device, "stages": dict(stages), "total": total,
            "etl": _etl(result)}


def of_job(result, stop: float, total: float) -> dict:
    """The whole job's figures: its ``JobResult``, the cluster's stop and the seconds since
    the command started (the rest of them, as the command prints it: "other")."""
    trained, placed = result.training, result.placement
    other = total - sum(result.stages.values()) - stop
    return {
        "figures": f"{KIND} job", "device": result.device, "workers": result.workers,
        "stages": {**result.stages, "cluster stop": stop, "other": other}, "total": total,
        "etl": _etl(result.etl), "auc": trained.auc, "train_auc": trained.train_auc,
        "training": {"holdout": trained.holdout, "workers": trained.workers,
                     "train_rows": trained.train_rows, "test_rows": trained.test_rows,
                     "dmatrix_seconds": trained.dmatrix_seconds,
                     "train_seconds": trained.train_seconds},
        "placement": None if placed is None else {"where": placed.where, "reason": placed.reason,
                                                  "line": placed.line()},
    }


def is_figures(path: str) -> bool:
    """Whether ``path`` holds figures these commands wrote (one a later run may replace)."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and str(found.get("figures", "")).startswith(KIND)


def check(path: str, overwrite: bool = False) -> str:
    """The absolute path of ``path`` once figures may be written there (before any work; an
    earlier figures file only with ``overwrite``): ValueError or FileExistsError, saying what
    to do."""
    return output.check_file(path, what=WHAT, overwrite=overwrite, accept=is_figures)


def write(path: str, figures: dict, overwrite: bool = False) -> str:
    """``figures`` as JSON at ``path``, written beside it and renamed into place."""

    def dump(partial: str) -> None:
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)

    return output.replace_file(path, dump, what=WHAT, overwrite=overwrite, accept=is_figures)

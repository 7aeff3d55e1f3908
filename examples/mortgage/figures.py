"""A run's figures as data: ``--json PATH`` writes them beside the lines printed for people, for
programs that compare runs (the benchmarks read them instead of the printed lines).

The ``etl`` command's file::

    {"figures": "examples.mortgage etl", "device": "gpu",
     "stages": {"start": 1.8, "cluster start": 2.5, "ETL": 1.7, "cluster stop": 0.3,
                "other": 0.0}, "total": 6.3,
     "etl": {"rows": 74000000, "bytes": 10737418240, "partitions": 40, "seconds": 2.13,
             "written_bytes": 1610612736, "bad_rows": 0, "join": "quarter",
             "join_seconds": 0.0},
     "worker_starts": [{"address": "tcp://127.0.0.1:40347", "process": 0.31,
                        "preloads": 1.52, "memory": 2.32, "joined": 2.41}, ...]}

``join`` is the ``--join`` of the run and ``join_seconds`` its shuffles' seconds, within
``seconds`` (0 for the per-quarter join); ``worker_starts`` each local worker's steps in
seconds from the cluster's start, the last to join first. The whole job's adds its workers,
its stages (seconds by name, in the order the stage lines print them, "other" last: the rest
of the total), the training's figures, the test AUC (NaN
where the held-out rows have one class, as Python's ``json`` writes it), where the training
data lived and why, and the seconds since the command started. A figures file replaces only an
earlier one of the same command (``is_figures``), with ``--overwrite``, never a file the
commands did not write.
"""

from __future__ import annotations

import json
import os

from . import output

KIND = "examples.mortgage"  # the start of every figures file's "figures" entry
WHAT = "figures file"


def _etl(result) -> dict:
    return {"rows": result.rows, "bytes": result.input_bytes, "partitions": result.partitions,
            "seconds": result.seconds, "written_bytes": result.written_bytes,
            "bad_rows": result.bad_count, "join": result.join,
            "join_seconds": result.join_seconds, "quarters": list(result.quarters)}


def of_etl(result, device: str, stages: dict, total: float, starts=None) -> dict:
    """The ``etl`` command's figures: its ``EtlResult`` on ``device``, its stage times (as
    printed, "other" the rest), the seconds since the command started, and each worker's
    start (``dask_gpu_interop.worker_starts``: its steps in seconds from the cluster's start,
    the last to join first; none for a running cluster)."""
    return {"figures": f"{KIND} etl", "device": device, "stages": dict(stages), "total": total,
            "etl": _etl(result),
            "worker_starts": [{"address": s.address, **s.steps()} for s in starts or ()]}


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
                     "train_seconds": trained.train_seconds, "matrix": trained.matrix,
                     "passes": list(trained.passes), "memory": trained.memory or {}},
        "placement": None if placed is None else {
            "where": placed.where, "reason": placed.reason, "line": placed.line(),
            "peak_bytes": placed.peak_bytes, "cache_host_ratio": placed.cache_host_ratio},
    }


def is_figures(path: str, command: str | None = None) -> bool:
    """Whether ``path`` holds figures these commands wrote (of ``command``: "etl" or "job";
    of either where None)."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(found, dict):
        return False
    kind = str(found.get("figures", ""))
    return kind == f"{KIND} {command}" if command else kind.startswith(KIND)


_COMMANDS = {"etl": "the etl command's", "job": "the whole job's"}


def check(path: str, overwrite: bool = False, command: str = "job") -> str:
    """The absolute path of ``path`` once ``command``'s figures may be written there (before
    any work; an earlier figures file of the same command only with ``overwrite``):
    ValueError or FileExistsError, saying what to do."""
    other = next((c for c in _COMMANDS if c != command), None)
    if os.path.isfile(path) and is_figures(path, other):
        raise FileExistsError(
            f"{os.path.abspath(path)} holds {_COMMANDS[other]} figures, not "
            f"{_COMMANDS[command]}: --overwrite replaces only an earlier figures file of the "
            "same command; give another file name; nothing was changed")
    return output.check_file(path, what=WHAT, overwrite=overwrite,
                             accept=lambda found: is_figures(found, command))


def write(path: str, figures: dict, overwrite: bool = False, command: str = "job") -> str:
    """``figures`` as JSON at ``path``, written beside it and renamed into place."""

    def dump(partial: str) -> None:
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)

    check(path, overwrite, command)
    return output.replace_file(path, dump, what=WHAT, overwrite=overwrite,
                               accept=lambda found: is_figures(found, command))

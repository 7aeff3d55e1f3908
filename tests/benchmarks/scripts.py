"""The benchmark scripts, as the tests of tests/benchmarks/ find them.

A script's name is its module's path below ``benchmarks``: ``shuffle`` (the library's),
``examples.mortgage`` (an application's, in ``benchmarks/examples/``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
PACKAGES = ("", "examples")  # benchmarks/ and benchmarks/examples/
NOT_SCRIPTS = ("common", "__init__")
# run by other scripts in a child process (the raw peer copies for transfer and shuffle,
# XGBoost alone for job_parts): no claim of their own, no results file
CHILD_SCRIPTS = {"peer", "examples.xgboost_alone"}


def path_of(name: str) -> Path:
    """The script's file: ``examples.mortgage`` -> benchmarks/examples/mortgage.py."""
    return BENCHMARKS.joinpath(*name.split(".")).with_suffix(".py")


def scripts() -> list[str]:
    """Every script's name, the library's first."""
    found = []
    for package in PACKAGES:
        prefix = f"{package}." if package else ""
        found += sorted(prefix + p.stem for p in (BENCHMARKS / package).glob("*.py")
                        if p.stem not in NOT_SCRIPTS)
    return found


SCRIPTS = scripts()

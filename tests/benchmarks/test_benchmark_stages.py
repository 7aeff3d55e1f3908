"""The one-chunk stage benchmark on CPUs: its chunk-size sweep cuts the same dataset at each
size and reports every size's chunk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dask

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mortgage_stages  # noqa: E402

from examples.mortgage import generate as gen  # noqa: E402


def test_the_size_sweep_times_the_largest_chunk_at_each_size(tmp_path):
    data = tmp_path / "data"
    spec = gen.Spec(2007, 2007, loans_per_quarter=400, loans_per_part=400, seed=1)
    with dask.config.set(scheduler="sync"):
        gen.generate(str(data), spec)
    mortgage_stages.main(["--device", "cpu", "--data", str(data), "--sizes", "64KiB,1MiB",
                          "--repeats", "1", "--name", "test", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "mortgage-stages-cpu-test.json").read_text())
    sweep = result["sizes"]
    assert [r["partition_size"] for r in sweep] == ["64KiB", "1MiB"]
    assert sweep[0]["chunk_bytes"] < sweep[1]["chunk_bytes"]  # a file cut into pieces, or not
    assert sweep[0]["chunk_bytes"] < 2 * 64 * 1024  # moved to loan boundaries, not much more
    assert all(r["seconds"] > 0 and r["peak_bytes"] is None for r in sweep)
    table = (tmp_path / "mortgage-stages-cpu-test.md").read_text()
    assert "| 64KiB |" in table and "| 1MiB |" in table

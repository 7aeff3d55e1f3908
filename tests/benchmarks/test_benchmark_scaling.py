"""The scaling benchmarks' own logic, on CPUs: the shuffle (pandas, TCP), its check, the peer
and pair tables, and the scaling script's configurations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import peer  # noqa: E402
import shuffle  # noqa: E402
import transfer  # noqa: E402


def test_shuffle_on_cpus_moves_every_row_and_keeps_each_key_in_one_partition(tmp_path):
    shuffle.main(["--device", "cpu", "--protocols", "tcp", "--methods", "tasks",
                  "--per-worker", "1MiB", "--partitions-per-worker", "2", "--repeats", "2",
                  "--out", str(tmp_path), "--machine", "cpu-test"])  # fmt: skip
    results = json.loads((tmp_path / "shuffle-cpu-test.json").read_text())
    run = results["runs"]["tcp:tasks"]
    assert "error" not in run
    assert run["check"] == {"rows": results["rows"], "rows_ok": True, "keys_ok": True}
    assert results["frame_bytes"] == results["rows"] * shuffle.ROW_BYTES
    assert len(run["seconds"]) == 2 and all(s > 0 for s in run["seconds"])
    # two workers: about half the frame crosses, and the workers' logs saw it cross
    assert min(run["received"]) >= 0.5 * shuffle.crossing_bytes(results["frame_bytes"], 2)
    table = (tmp_path / "shuffle-cpu-test.md").read_text()
    assert "| tcp | tasks |" in table and "| ok |" in table


def test_shuffle_check_catches_a_key_split_across_partitions():
    import dask.dataframe as dd

    frame = dd.from_pandas(pd.DataFrame({"key": [1, 2, 1, 3], "a": [0.0, 1.0, 2.0, 3.0]}),
                           npartitions=2, sort=False)  # fmt: skip
    got = shuffle.check(frame, rows=4)
    assert got["rows_ok"] and not got["keys_ok"]
    assert not shuffle.check(frame, rows=5)["rows_ok"]


def test_shuffle_refuses_ucx_on_cpus_before_starting_anything():
    with pytest.raises(SystemExit):
        shuffle.main(["--device", "cpu", "--protocols", "ucx"])


def test_crossing_bytes_is_the_share_other_workers_own():
    assert shuffle.crossing_bytes(800, 4) == 600
    assert shuffle.crossing_bytes(800, 2) == 400


def test_peer_pairs_and_ceilings():
    assert peer.ordered_pairs(3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert peer.ordered_pairs(4, "first") == [(0, 1)]
    assert peer.ordered_pairs(1) == []
    gib = 1 << 30
    result = {
        "pairs": {"0->1": {"runs": {str(gib): [0.01, 0.01, 0.02]}},
                  "1->0": {"runs": {str(gib): [0.02, 0.02]}}},
        "concurrent": {"bytes": 2 * gib, "runs": [0.01, 0.02, 0.01]},
    }  # fmt: skip
    got = peer.summary(result)
    assert got["links_GBps"]["0->1"] == pytest.approx(gib / 0.01 / 1e9)
    assert got["sum_of_links_GBps"] == pytest.approx(gib / 0.01 / 1e9 + gib / 0.02 / 1e9)
    assert got["concurrent_GBps"] == pytest.approx(2 * gib / 0.01 / 1e9)


def test_pair_matrix_lists_every_pair_and_subtracts_the_destinations_round_trip():
    mib = 1 << 20
    results = {
        "peer": {"pairs": {f"{i}->{j}": {"runs": {str(64 * mib): [0.001]}}
                           for i, j in peer.ordered_pairs(3)}},
        "protocols": {"ucx": {
            "empty_at": {"0": [0.002], "1": [0.001], "2": [0.001]},
            "pairs": {f"{i}->{j}": {f"cupy:{64 * mib}": {"times": [0.003]}}
                      for i, j in peer.ordered_pairs(3) if (i, j) != (2, 1)},
        }},
    }  # fmt: skip
    args = type("Args", (), {"kinds": ["cupy"], "sizes": [64 * mib]})
    text = "\n".join(transfer.pair_matrices(results, args))
    assert "| GPU 2 | " in text and "sum of the links" in text
    ucx = text.split("### UCX")[1].splitlines()
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in ucx if line.startswith("| GPU")}
    # 64 MiB in 3 ms less the destination's 1 ms (2 ms at GPU 0)
    assert rows["| GPU 1"][0] == f"{64 * mib / 0.001 / 1e9:.1f}"
    assert rows["| GPU 0"][1] == f"{64 * mib / 0.002 / 1e9:.1f}"
    assert rows["| GPU 2"][1] == "failed" and rows["| GPU 2"][2].startswith("-")


def test_scaling_script_takes_every_gpu_in_powers_of_two():
    def dry(gpus):
        env = {**os.environ, "SCALING_GPUS": str(gpus), "SCALING_DRY_RUN": "1"}
        out = subprocess.run(["bash", str(ROOT / "scripts" / "scaling.sh")], env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    assert dry(8)["CONFIGS"] == "1,2,4,8"
    assert dry(6)["CONFIGS"] == "1,2,4,6"
    assert dry(1)["CONFIGS"] == "1"
    assert "--gpu-workers 1,2,4" in dry(4)["MORTGAGE_ARGS"]
    assert "--pairs all" in dry(4)["TRANSFER_ARGS"]


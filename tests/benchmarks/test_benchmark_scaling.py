"""The scaling benchmarks' own logic, on CPUs: the peer and pair tables, and the scaling
script's configurations (the shuffle's are in test_benchmark_shuffle.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benchmarks import peer, transfer

ROOT = Path(__file__).resolve().parents[2]


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


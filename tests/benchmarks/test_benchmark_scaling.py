"""The scaling benchmarks' own logic, on CPUs: the shuffle (pandas, TCP), its check, the peer
and pair tables, the strong-scaling arithmetic, and the training guard."""

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

import mortgage  # noqa: E402
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


def _run(config, etl, train=None, **extra):
    r = {"config": config, "etl_seconds": etl, "workers": mortgage.gpu_count(config), **extra}
    if train is not None:
        r.update(dmatrix_seconds=train / 2, train_seconds=train / 2, auc=0.9)
    return r


def test_strong_scaling_against_one_gpu():
    rows = mortgage.scaling([
        _run("gpu1-pool", 100.0, train_skipped="too big"),
        _run("gpu2-pool", 52.0, 30.0),
        _run("gpu4-pool", 25.0, 16.0),
        _run("gpu1-cudamalloc", 130.0, 50.0),  # not a pool run: not in the scaling
        {"config": "gpu8-pool", "error": "boom"},
    ])  # fmt: skip
    assert [r["gpus"] for r in rows] == [1, 2, 4]
    assert rows[1]["etl_speedup"] == pytest.approx(100 / 52)
    assert rows[2]["etl_efficiency"] == pytest.approx(4.0 / 4)
    assert "train_seconds" not in rows[0]
    assert rows[2]["train_speedup"] == pytest.approx(30 / 16) and rows[2]["train_base_gpus"] == 2
    lines = "\n".join(mortgage.scaling_lines([_run("gpu1-pool", 100.0), _run("gpu8-pool", 16.0)]))
    assert "6.25x one GPU (goal 6.50x" in lines and "NOT met" in lines


def test_strong_scaling_needs_two_pool_runs():
    assert mortgage.scaling([_run("gpu2-pool", 50.0)]) == []
    rows = mortgage.scaling([_run("gpu2-pool", 50.0), _run("gpu4-pool", 30.0)])
    assert rows[1]["etl_efficiency"] == pytest.approx(50 / 30 / 2)


def test_strong_scaling_takes_a_repeated_configuration_by_its_median_run():
    rows = mortgage.scaling([_run("gpu2-pool", 3.0), _run("gpu1-pool", 5.0),
                             _run("gpu2-pool", 3.6), _run("gpu1-pool", 5.4),
                             _run("gpu2-pool", 3.2), _run("gpu1-pool", 4.9)])
    assert [(r["gpus"], r["etl_seconds"]) for r in rows] == [(1, 5.0), (2, 3.2)]
    assert rows[1]["etl_speedup"] == pytest.approx(5.0 / 3.2)
    pair = mortgage.median_runs([_run("gpu1-pool", 2.6), _run("gpu1-pool", 2.4)])
    assert pair["gpu1-pool"]["etl_seconds"] == 2.4  # of two: the faster


class _Client:
    def __init__(self, free):
        self.free = free

    def run(self, function):
        return dict(self.free)


def test_training_guard_compares_xgboosts_need_with_the_fullest_gpu():
    import dask.dataframe as dd

    table = pd.DataFrame({"f": [1.0] * 1000, "label": [0] * 1000})
    frame = dd.from_pandas(table, npartitions=4)
    size = int(frame.memory_usage(index=True).sum().compute())
    need = int(size / 2 * mortgage.TRAINING_NEED)
    roomy = mortgage.training_room(_Client({"a": need + 1, "b": need * 10}), frame)
    assert not roomy["short"] and roomy["need_per_gpu"] == need
    tight = mortgage.training_room(_Client({"a": need - 1, "b": need * 10}), frame)
    assert tight["short"] and "--no-train-guard" in tight["why"]


def test_scaling_script_takes_every_gpu_in_powers_of_two():
    def dry(gpus):
        env = {**os.environ, "SCALING_GPUS": str(gpus), "SCALING_DRY_RUN": "1"}
        out = subprocess.run(["bash", str(ROOT / "scripts" / "scaling.sh")], env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    assert dry(8)["CONFIGS"] == "gpu1-pool,gpu2-pool,gpu4-pool,gpu8-pool"
    assert dry(6)["CONFIGS"] == "gpu1-pool,gpu2-pool,gpu4-pool,gpu6-pool"
    assert dry(1)["CONFIGS"] == "gpu1-pool"
    assert "--protocol ucx" in dry(4)["MORTGAGE_ARGS"]
    assert "--pairs all" in dry(4)["TRANSFER_ARGS"]


def test_stage_totals_average_the_workers_and_count_the_time_outside_stages():
    run = {"config": "gpu2-pool", "etl_seconds": 10.0, "stages": {
        "w1": {"read": {"seconds": 4.0}, "read/parse": {"seconds": 3.0},
               "table": {"seconds": 2.0}},
        "w2": {"read": {"seconds": 6.0}, "read/parse": {"seconds": 5.0},
               "acquisitions": {"seconds": 2.0}},
    }}  # fmt: skip
    totals = mortgage.stage_totals(run)
    assert totals["read"] == 5.0 and totals["read/parse"] == 4.0
    assert totals["table"] == 1.0 and totals["acquisitions"] == 1.0
    assert totals["outside the stages"] == 10.0 - (5.0 + 1.0 + 1.0)
    assert mortgage.stage_totals({"etl_seconds": 1.0}) == {}
    table = "\n".join(mortgage.stage_lines([run]))
    assert "| &nbsp;&nbsp;parse | 4.00 |" in table


@pytest.mark.parametrize("argv, error", [
    (["--gpu-threads", "0"], "--gpu-threads 0: give 1 or more"),
    (["--configs", "gpu1-pool,tpu"], "unknown configurations"),
    (["--etl-runs", "0"], "--etl-runs 0: give 1 or more"),
    (["--stages", "--etl-runs", "2"], "--stages profiles one timed run"),
])
def test_the_mortgage_benchmark_refuses_bad_options_before_anything_starts(argv, error, capsys,
                                                                           tmp_path):
    with pytest.raises(SystemExit):
        mortgage.main([*argv, "--data", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert error in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # no dataset, no results


def test_the_goals_compare_each_repeated_configuration_by_its_median_run():
    from types import SimpleNamespace

    def run(config, seconds, peak=None):
        r = _run(config, seconds, device="gpu", rows=1000, input_bytes=10**10)
        if peak:
            r.update(chunk_peak_bytes=peak * 2**30, chunk_peak_ratio=peak, chunk_bytes=2**30)
        return r

    results = [run("gpu1-pool", 2.5), run("gpu2-pool", 1.6, peak=3.2),
               run("gpu1-pool", 2.6), run("gpu2-pool", 1.5, peak=2.9),
               run("gpu1-pool", 2.4), run("gpu2-pool", 1.7)]  # the last runs are not medians
    info = {"host": "vm", "cpu": "cpu", "memory": "1 GiB", "gpus": ["NVIDIA H200 (1 MiB)"],
            "versions": {}}
    data = {"bytes": 10**10, "directory": "/d", "files": 2}
    args = SimpleNamespace(rounds=0, protocol="tcp", gpu_threads=1, partition_size=None,
                           etl_runs=1)
    text = mortgage.markdown(info, data, results, "python benchmarks/mortgage.py", args)
    assert "- gpu1-pool, gpu2-pool ran more than once: each counts by its median run" in text
    assert "2 GPUs vs 1 GPU (ETL): 1.56x (goal 1.80x: NOT met)" in text  # 2.5 / 1.6
    assert "at most 3.2x the chunk" in text  # the largest peak of every run
    assert "| 2 | 1.60 | 1.56x |" in text


def test_a_stage_first_seen_late_is_listed_under_its_parent():
    names = ["read", "read/file", "read/layout", "features", "read/file/waiting", "table",
             "read/layout/kernel", "outside"]
    assert mortgage._tree_order(names) == [
        "read", "read/file", "read/file/waiting", "read/layout", "read/layout/kernel",
        "features", "table", "outside"]


def test_timed_runs_are_listed_in_order_with_their_median_and_chunks_per_worker():
    def run(config, seconds, spread):
        return {"config": config, "etl_runs": [
            {"seconds": t, "chunks_per_worker": c} for t, c in zip(seconds, spread, strict=True)]}

    results = [run("gpu1-pool", [2.0, 1.8, 1.9], [[16]] * 3),
               run("gpu2-pool", [1.6, 1.1, 1.2], [[10, 6], [8, 8], [9, 7]])]
    text = "\n".join(mortgage.run_lines(results))
    assert "| gpu1-pool | 2.00, 1.80, 1.90 | 1.90 | 16, 16, 16 |" in text
    assert "| gpu2-pool | 1.60, 1.10, 1.20 | 1.20 | 10/6, 8/8, 9/7 |" in text
    assert mortgage.run_lines([run("cpu", [1.0], [[1]])]) == []  # one run: nothing to list


def test_chunks_per_worker_counts_the_chunk_tasks_of_each_worker():
    tasks = [{"worker": w, "key": k} for w, k in [
        ("a", "process_chunk-1"), ("b", "process_chunk-2"), ("a", "process_chunk-3"),
        ("b", "load_acquisitions-4"), ("a", ("getitem-5", 0))]]
    assert mortgage.chunks_per_worker(tasks) == [2, 1]


def test_the_warm_up_gives_each_worker_a_chunk_of_another_quarter(tmp_path):
    from examples.mortgage import etl

    for quarter, loans in (("2007Q1", 750), ("2007Q2", 250), ("2007Q3", 250)):
        (tmp_path / f"Acquisition_{quarter}.txt").write_text("1|R\n")
        lines = "".join(f"{n}|x\n" for n in range(loans))  # one line a loan
        (tmp_path / f"Performance_{quarter}.txt").write_text(lines)
    the_plan = etl.plan(str(tmp_path), str(tmp_path), partition_size=1024)
    assert [c.quarter for c in the_plan.chunks][:3] == ["2007Q1"] * 3  # split in three
    picked = mortgage.warm_up_chunks(the_plan, 2)
    assert [c.quarter for c in picked] == ["2007Q1", "2007Q2"]
    assert picked[0] is the_plan.chunks[0]

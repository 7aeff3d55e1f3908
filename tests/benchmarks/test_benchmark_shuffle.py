"""The shuffle and join benchmarks' own logic, on CPUs: a real run of each with pandas over
TCP (the library's shuffle against dask's task and p2p shuffles; shuffle_merge against dask's
merge), their checks, the steps read from a task stream, the tables, the dry runs and the
arguments."""

from __future__ import annotations

import json

import dask.dataframe as dd
import pandas as pd
import pytest

from benchmarks import join, shuffle

MiB = 1 << 20


def test_shuffle_on_cpus_checks_every_method_and_times_the_librarys_steps(tmp_path):
    shuffle.main(["--device", "cpu", "--protocols", "tcp", "--sizes", "256KiB,1MiB",
                  "--p2p-up-to", "256KiB", "--partitions-per-worker", "2", "--repeats", "2",
                  "--out", str(tmp_path), "--machine", "cpu-test"])  # fmt: skip
    results = json.loads((tmp_path / "shuffle-cpu-test.json").read_text())
    assert not results["errors"]
    runs = {shuffle.split_key(k): v for k, v in results["runs"].items()}
    assert sorted(runs) == sorted([
        ("library", "tcp", 256 << 10, "library"), ("library", "tcp", 256 << 10, "tasks"),
        ("library", "tcp", 256 << 10, "p2p"),
        ("library", "tcp", MiB, "library"), ("library", "tcp", MiB, "tasks")])  # no p2p at 1 MiB
    for key, run in runs.items():
        assert "error" not in run, (key, run)
        assert run["check"] == {"rows": results["frames"][str(key[2])]["rows"], "rows_ok": True,
                                "keys_ok": True, "checksum_ok": True}, key
        assert len(run["seconds"]) == 2 and all(s > 0 for s in run["seconds"])
    frame_bytes = results["frames"][str(MiB)]["bytes"]
    assert frame_bytes == results["frames"][str(MiB)]["rows"] * shuffle.ROW_BYTES
    # two workers: about half the frame crosses, and the workers' logs saw it cross
    library = runs[("library", "tcp", MiB, "library")]
    assert min(library["received"]) >= 0.5 * shuffle.crossing_bytes(frame_bytes, 2)
    profile = results["profiles"][shuffle.entry_key("library", "tcp", MiB, "library")]
    steps = profile["steps"]
    assert set(steps) - {"transfer"} == {"send", "output"}
    # one send per worker, one output task per output partition, after every send
    assert steps["send"]["count"] == 2 and steps["output"]["count"] == 4
    assert steps["send"]["first"] <= steps["send"]["last"] <= steps["output"]["last"]
    # the task stream's times are the workers' (distributed shifts them by its estimate of the
    # clocks' offset): within the call, give or take that estimate
    assert 0 < steps["output"]["last"] <= profile["seconds"] + 0.05
    table = (tmp_path / "shuffle-cpu-test.md").read_text()
    assert "### library cluster, TCP" in table and "| 1.00 MiB | library |" in table
    assert table.count("| ok |") == 5 and "FAILED" not in table
    assert "The library's steps" in table and "| 256.00 kiB | library | " in table


def test_the_librarys_shuffle_in_steps_is_a_method_of_its_own(tmp_path):
    shuffle.main(["--device", "cpu", "--protocols", "tcp", "--sizes", "1MiB",
                  "--methods", "library,library-steps", "--step-bytes", "200KiB",
                  "--partitions-per-worker", "4", "--repeats", "1",
                  "--out", str(tmp_path), "--machine", "cpu-test"])  # fmt: skip
    results = json.loads((tmp_path / "shuffle-cpu-test.json").read_text())
    assert not results["errors"] and results["step_bytes"] == 200 << 10
    for method in ("library", "library-steps"):
        run = results["runs"][shuffle.entry_key("library", "tcp", MiB, method)]
        assert run["check"]["rows_ok"] and run["check"]["checksum_ok"], (method, run)
        assert len(run["seconds"]) == 1
    table = (tmp_path / "shuffle-cpu-test.md").read_text()
    assert "| 1.00 MiB | library-steps |" in table and "in steps of 200.00 kiB" in table


def test_the_librarys_shuffle_sends_from_its_splits_and_its_batch_tasks_are_a_method(tmp_path):
    shuffle.main(["--device", "cpu", "--protocols", "tcp", "--sizes", "1MiB",
                  "--methods", "library,library-batches", "--partitions-per-worker", "3",
                  "--repeats", "1", "--out", str(tmp_path), "--machine", "cpu-test"])  # fmt: skip
    results = json.loads((tmp_path / "shuffle-cpu-test.json").read_text())
    assert not results["errors"]
    for method in ("library", "library-batches"):
        run = results["runs"][shuffle.entry_key("library", "tcp", MiB, method)]
        assert run["check"]["rows_ok"] and run["check"]["checksum_ok"], (method, run)
        # two workers: about half crosses, logged by the transfers or by the inboxes
        assert min(run["received"]) >= 0.4 * shuffle.crossing_bytes(
            results["frames"][str(MiB)]["bytes"], 2), (method, run)
    profiles = {method: results["profiles"][shuffle.entry_key("library", "tcp", MiB, method)]
                for method in ("library", "library-batches")}  # fmt: skip
    # by default the output tasks fetch only the sends' small results: the sends carried the
    # batches; with batch tasks the outputs fetch the batches
    assert set(profiles["library"]["steps"]) - {"transfer"} == {"send", "output"}
    assert profiles["library"]["steps"]["send"]["count"] == 2
    assert profiles["library"]["steps"]["output"]["count"] == 6
    assert set(profiles["library-batches"]["steps"]) == {"split", "batch", "transfer", "output"}
    assert all(p["crossing_bytes"] > 0 for p in profiles.values())
    table = (tmp_path / "shuffle-cpu-test.md").read_text()
    steps_rows = {method: next(line for line in table.split("The library's steps")[1].splitlines()
                               if line.startswith(f"| 1.00 MiB | {method} | "))
                  for method in profiles}  # fmt: skip
    assert steps_rows["library"].endswith("| - |")  # no transfer speed: the sends carried them
    assert not steps_rows["library-batches"].endswith("| - |")


def test_shuffle_check_catches_a_key_split_across_partitions_and_a_changed_row():
    rows = pd.DataFrame({"key": [1, 2, 1, 3], "a": [0.0, 1.0, 2.0, 3.0]})
    frame = dd.from_pandas(rows, npartitions=2, sort=False)
    expected = shuffle.checksum(frame)
    got = shuffle.check(frame, rows=4, expected_checksum=expected)
    assert got["rows_ok"] and got["checksum_ok"] and not got["keys_ok"]
    assert not shuffle.check(frame, rows=5)["rows_ok"]
    changed = dd.from_pandas(rows.assign(a=[0.0, 1.0, 2.0, 3.5]), npartitions=2, sort=False)
    assert not shuffle.check(changed, rows=4, expected_checksum=expected)["checksum_ok"]
    moved = dd.from_pandas(rows.iloc[[3, 1, 0, 2]], npartitions=3, sort=False)
    assert shuffle.checksum(moved) == expected  # the same rows, in any order and partitions


def test_steps_are_read_from_the_task_stream():
    def task(key, start, stop, transfer=None):
        startstops = [{"action": "compute", "start": start, "stop": stop}]
        if transfer:
            startstops.insert(0, {"action": "transfer", "start": transfer[0],
                                  "stop": transfer[1], "source": "w0"})
        return {"key": key, "startstops": startstops}

    token = "5" * 32
    stream = [
        task((f"gpu-shuffle-split-{token}", 0), 100.1, 100.3),
        task((f"gpu-shuffle-split-{token}", 1), 100.2, 100.5),
        task((f"gpu-shuffle-batch-{token}", 0, 1), 100.5, 100.51),
        task((f"gpu-shuffle-output-{token}", 0), 100.8, 100.9, transfer=(100.55, 100.75)),
        task(("other-thing", 0), 99.0, 101.0),
    ]
    steps = shuffle.step_times(stream, start=100.0)
    assert set(steps) == {"split", "batch", "output", "transfer"}
    assert steps["split"] == pytest.approx({"first": 0.1, "last": 0.5, "busy": 0.5, "count": 2})
    assert steps["transfer"] == pytest.approx({"first": 0.55, "last": 0.75, "busy": 0.2,
                                               "count": 1})


def test_the_table_holds_each_method_against_tasks_and_the_peer_copies():
    gib = 1 << 30
    results = {
        "command": "python -m benchmarks.shuffle", "machine": {}, "machine_name": "2xH100",
        "commit": "abc",
        "date": "today", "workers": 2, "device": "gpu", "sizes": [gib], "partitions": 16,
        "repeats": 3, "env": {}, "errors": {},
        "peer": {"pairs": {"0->1": {"runs": {str(gib): [0.01]}}},
                 "concurrent": {"bytes": 2 * gib, "runs": [0.01]}},
        "frames": {str(gib): {"rows": 2 * gib // 32, "bytes": 2 * gib}},
        "runs": {
            "library|ucx|1073741824|library": {"seconds": [0.1, 0.2, 0.3], "received": [gib] * 3,
                                               "check": {"rows_ok": True, "keys_ok": True}},
            "library|ucx|1073741824|tasks": {"seconds": [0.8, 0.8, 0.9], "received": [gib] * 3,
                                             "check": {"rows_ok": True, "keys_ok": False}},
        },
        "profiles": {},
    }  # fmt: skip
    text = shuffle.markdown(results)
    assert text.startswith("# All-to-all shuffle, 2xH100")
    rows = {line.split(" | ")[1]: line.split(" | ") for line in text.splitlines()
            if line.startswith("| 1.00 GiB")}  # fmt: skip
    library, tasks = rows["library"], rows["tasks"]
    assert library[2] == "0.200" and library[4] == f"{2 * gib / 0.2 / 1e9:.1f}"
    assert library[5] == f"{gib / 0.2 / 1e9:.1f}"  # half of 2 GiB crosses
    assert library[6] == f"{(gib / 0.2 / 1e9) / (2 * gib / 0.01 / 1e9):.1%}"
    assert library[7] == "4.00x" and library[9] == "ok |"
    assert tasks[7] == "-" and tasks[9].startswith("FAILED")


def test_shuffle_dry_run_lists_the_runs_and_starts_nothing(capsys):
    shuffle.main(["--dry-run", "--sizes", "64MiB,1GiB,4GiB", "--protocols", "ucx,tcp",
                  "--clusters", "library,dask-cuda", "--repeats", "3"])  # fmt: skip
    out = capsys.readouterr().out
    assert "dask-cuda cluster, ucx: 4.00 GiB per worker: library, tasks (9 shuffles)" in out
    assert "library cluster, tcp: 64.00 MiB per worker: library, tasks, p2p (13 shuffles)" in out
    assert out.strip().endswith(f"{4 * (13 + 9 + 9)} shuffles in all")


@pytest.mark.parametrize("argv, words", [
    (["--device", "cpu", "--protocols", "ucx"], "--protocols ucx needs --device gpu"),
    (["--device", "cpu", "--clusters", "dask-cuda"], "--clusters dask-cuda needs --device gpu"),
    (["--device", "cpu"], None),
    (["--sizes", "lots"], "--sizes"),
    (["--methods", "magic"], "'magic' is not one of"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--step-bytes", "lots"], "--step-bytes"),
    (["--step-bytes", "0"], "--step-bytes: a size above zero"),
    (["--device", "cpu", "--spill"], "--spill is cuDF's spilling on GPU workers"),
])
def test_shuffle_refuses_bad_arguments_before_starting_anything(capsys, argv, words):
    if words is None:  # a CPU run takes TCP without being told
        assert shuffle.parse(argv).protocols == ["tcp"]
        return
    with pytest.raises(SystemExit):
        shuffle.parse(argv)
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("pool_size, spill, memory", [
    ("0.6", False, {"pool_size": "0.6"}),
    ("0.7", True, {"pool_size": "0.7", "spill": True}),
    (None, True, {"spill": True}),
    (None, False, None),
])
def test_the_librarys_gpu_cluster_gets_the_pool_and_spilling_asked_for(monkeypatch, pool_size,
                                                                        spill, memory):
    import contextlib

    import dask_gpu_interop

    seen = {}

    @contextlib.contextmanager
    def cluster_client(**options):
        seen.update(options)
        yield "client", "gpu"

    monkeypatch.setattr(dask_gpu_interop, "cluster_client", cluster_client)
    with shuffle.cluster("library", "gpu", 2, "ucx", pool_size, spill) as client:
        assert client == "client"
    assert seen["memory"] == memory


def test_the_report_says_when_the_workers_spilled():
    results = {"workers": 2, "device": "gpu", "sizes": [MiB], "partitions": 4, "repeats": 1,
               "env": {}, "runs": {}, "profiles": {}, "errors": {}, "spill": True,
               "machine_name": "m", "command": "c", "machine": {}, "commit": "abc",
               "date": "d"}  # fmt: skip
    assert "cuDF's spilling on the workers (--spill)" in shuffle.markdown(results)
    results["spill"] = False
    assert "spilling" not in shuffle.markdown(results)


def test_shuffle_takes_per_worker_as_one_size():
    assert shuffle.parse(["--per-worker", "8GiB"]).sizes == [8 << 30]
    assert shuffle.parse(["--sizes", "64MiB,1GiB"]).sizes == [64 * MiB, 1 << 30]
    assert shuffle.parse([]).p2p_up_to == 64 * MiB


def test_crossing_bytes_is_the_share_other_workers_own():
    assert shuffle.crossing_bytes(800, 4) == 600
    assert shuffle.crossing_bytes(800, 2) == 400


def test_join_on_cpus_gives_the_same_rows_by_every_method(tmp_path):
    join.main(["--device", "cpu", "--protocols", "tcp", "--sizes", "512KiB",
               "--partitions-per-worker", "3", "--repeats", "1", "--out", str(tmp_path),
               "--machine", "cpu-test"])  # fmt: skip
    results = json.loads((tmp_path / "join-cpu-test.json").read_text())
    assert not results["errors"]
    table = results["tables"][str(512 << 10)]
    runs = {join.split_key(k)[3]: v for k, v in results["runs"].items()}
    assert sorted(runs) == ["library", "p2p", "tasks"]
    sums = {run["check"]["checksum"] for run in runs.values()}
    assert len(sums) == 1
    for method, run in runs.items():
        assert run["check"]["rows"] == table["performance_rows"], method
        assert run["check"]["rows_ok"] and run["check"]["same_as_others"], method
        assert len(run["seconds"]) == 1
    assert "TaskShuffle" in runs["tasks"]["plan"] and "HashJoinP2P" in runs["p2p"]["plan"]
    text = (tmp_path / "join-cpu-test.md").read_text()
    assert text.count("| ok |") == 3 and "FAILED" not in text


def test_join_tables_have_every_loan_once_and_performance_rows_of_known_loans():
    performance = join.make_performance(0, 5_000, 300, "cpu")
    acquisition = pd.concat([join.make_acquisition(i, 4, 300, "cpu") for i in range(4)])
    assert acquisition["loan_id"].is_unique and len(acquisition) == 300
    assert set(performance["loan_id"]) <= set(acquisition["loan_id"])
    assert performance["loan_id"].min() >= join.LOAN_BASE
    assert len(performance.merge(acquisition, on="loan_id")) == 5_000


def test_join_table_says_failed_when_the_methods_disagree():
    results = {"workers": 2, "tables": {"100": {"performance_bytes": 10, "acquisition_bytes": 5}},
               "runs": {"library|tcp|100|library": {
                   "seconds": [1.0], "check": {"rows": 4, "rows_ok": True,
                                               "same_as_others": False}}}}  # fmt: skip
    assert "FAILED" in join.table_row(results, "library|tcp|100|library")


def test_join_dry_run_and_arguments(capsys):
    join.main(["--dry-run", "--sizes", "256MiB,2GiB"])
    out = capsys.readouterr().out
    assert ("library cluster, ucx: 256.00 MiB of performance rows per worker: library, tasks, "
            "p2p (12 joins)") in out
    assert "2.00 GiB of performance rows per worker: library, tasks (8 joins)" in out
    with pytest.raises(SystemExit):
        join.parse(["--rows-per-loan", "0"])
    assert "--rows-per-loan must be at least 1" in capsys.readouterr().err

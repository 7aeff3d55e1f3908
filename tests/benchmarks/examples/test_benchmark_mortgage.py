"""The mortgage benchmark's logic on CPUs: it reads the figures the example's commands write
(``--json``), and its tables and goals compare the runs by their medians."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.examples import mortgage

ETL = {"rows": 74_000_000, "bytes": 10 * 2**30, "partitions": 10, "seconds": 2.5,
       "written_bytes": 3 * 2**29, "bad_rows": 0}
WRITE_FIGURES = ("import json, sys; figures = json.loads(sys.argv[1]); "
                 "json.dump(figures, open(sys.argv[sys.argv.index('--json') + 1], 'w')); "
                 "print('the printed lines')")


def test_the_figures_a_command_writes_are_read_and_its_file_removed(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    figures = {"figures": "examples.mortgage etl", "device": "gpu", "etl": ETL}
    found, text, wall = mortgage.figures_of([sys.executable, "-c", WRITE_FIGURES,
                                             json.dumps(figures)])
    assert found == figures and text.strip() == "the printed lines" and wall > 0
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="failed"):  # no figures: the command's tail
        mortgage.figures_of([sys.executable, "-c", "import sys; sys.exit('it broke')"])
    assert list(tmp_path.iterdir()) == []


def test_the_job_s_stages_total_auc_and_placement_are_read():
    figures = {"stages": {"cluster start": 4.0, "ETL": 0.3, "DMatrix": 0.2, "training": 1.5,
                          "cluster stop": 1.25}, "total": 9.0, "auc": 0.8123, "etl": ETL,
               "placement": {"where": "device", "reason": "fits", "line": "training data: .."}}
    found = mortgage.job_figures(figures)
    assert found["stages"] == figures["stages"] and found["etl"] == ETL
    assert found["auc"] == 0.8123 and found["total"] == 9.0
    assert found["placement"]["where"] == "device"


def test_the_example_s_own_figures_are_read_on_cpus(tmp_path):
    from tests.examples.mortgage_sample import SAMPLE

    etl = mortgage.etl_runs(SAMPLE, {"cpu": 1}, str(tmp_path / "features.parquet"),
                            ["--workers", "1"])
    (run,) = etl["cpu"]
    assert run["rows"] == 10_000 and run["partitions"] >= 1 and 0 < run["seconds"] < run["wall"]
    assert run["written_bytes"] > 0
    jobs = mortgage.job_runs(SAMPLE, {"cpu": ["--device", "cpu", "--workers", "1", "--rounds",
                                              "3"]}, 1)
    (job,) = jobs["cpu"]
    assert {"cluster start", "ETL and sketch", "quantize", "training"} <= set(job["stages"])
    assert list(job["stages"])[-2:] == ["cluster stop", "other"]  # the rest of the total
    assert abs(sum(job["stages"].values()) - job["total"]) < 1e-6
    assert job["total"] > job["stages"]["training"] > 0
    assert 0 <= job["auc"] <= 1 and job["etl"]["rows"] == 10_000
    assert job["placement"]["where"] == "host"


def _etl(seconds, size=10 * 2**30):
    return [{"rows": 10, "bytes": size, "partitions": 4, "seconds": s}
            for s in seconds]


def test_tables_and_goals_use_medians_and_show_the_spread():
    payload = {
        "command": "python -m benchmarks.examples.mortgage", "commit": "abc", "date": "today",
        "machine": {"cpu": "cpu", "gpus": ["H200"], "versions": {"cudf": "26"}},
        "machine_name": "1xH200",
        "etl": {"classic": {"gpu": _etl([1.0, 3.0, 2.0]), "cpu": _etl([50.0, 30.0]),
                            "gpu2": _etl([1.0]),
                            "gpu --threads-per-worker 1": _etl([2.0, 3.0, 4.0])}},
        "jobs": {"gpu": [{"stages": {"ETL": 1.0, "cluster start": 4.5}, "total": 10.0,
                          "auc": 0.8}],
                 "cpu": [{"stages": {"ETL": 30.0}, "total": 160.0, "auc": 0.8}]},
    }
    text = mortgage.markdown(payload)
    assert "2.00 s (1.00-3.00, 3 runs)" in text and "40.00 s (30.00-50.00, 2 runs)" in text
    assert "20.0x (10.0-50.0)" in text  # the medians' ratio, and the worst and best pairs
    goals = dict(mortgage.goals(payload))
    assert goals["ETL, 1 GPU vs the CPUs, classic: at least 20x"] == "20.0x (met)"
    assert goals["ETL per GPU, classic: at least 5 GB/s"] == "5.37 GB/s (met)"
    assert goals["end to end vs the CPUs: at least 15x"] == "16.0x (met)"
    assert "| classic | 2 | 1.00 s (1 run) | 2.00x |" in text  # a variant is not a GPU count
    assert text.count("| classic | ") == 3
    assert ("| classic | `--threads-per-worker 1` | 3.00 s (2.00-4.00, 3 runs) | 1.50 "
            "(0.67-4.00) |") in text
    assert "| configuration | ETL | cluster start | total | test AUC |" in text
    assert "| gpu | 1.00 s (1 run) | 4.50 s (1 run) |" in text


def test_the_job_table_has_a_column_for_each_stage_the_runs_report():
    streamed = {"cluster start": 1.0, "ETL and sketch": 2.0, "quantize": 0.5, "training": 3.0}
    jobs = {"gpu": [{"stages": streamed, "total": 7.0, "auc": 0.9}],
            "gpu --features-out": [{"stages": {"cluster start": 1.0, "ETL": 2.5, "DMatrix": 0.5,
                                               "training": 3.0}, "total": 8.0, "auc": 0.9}]}
    assert mortgage.job_stages(jobs) == ["cluster start", "ETL and sketch", "quantize",
                                         "training", "ETL", "DMatrix"]


def test_bad_options_are_refused_before_anything_runs(tmp_path, capsys):
    for argv, error in ((["--size", "lots"], "is not a size"),
                        (["--layouts", "classic,modern"], "choose among classic, current")):
        with pytest.raises(SystemExit):
            mortgage.main(["--data", str(tmp_path), "--out", str(tmp_path), *argv])
        assert error in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_gpu_variants_run_the_etl_command_with_their_flags(monkeypatch):
    commands = []

    def fake_run(command, cwd=None, timeout=None, env=None):
        commands.append((command[:-2], env))
        assert command[-2] == "--json"
        with open(command[-1], "w") as f:
            json.dump({"etl": ETL}, f)
        return "", 1.0

    monkeypatch.setattr(mortgage, "run", fake_run)
    mortgage.etl_runs("/data", {"gpu": 1, "gpu --threads-per-worker 1": 1, "gpu2": 1,
                                "gpu KVIKIO_NTHREADS=1 A_B=x=y --threads-per-worker 1": 1},
                      "/o", [])
    tails = [(command[command.index("--device"):], env) for command, env in commands]
    assert tails == [(["--device", "gpu"], {}),
                     (["--device", "gpu", "--threads-per-worker", "1"], {}),
                     (["--device", "gpu", "--workers", "2"], {}),
                     (["--device", "gpu", "--threads-per-worker", "1"],
                      {"KVIKIO_NTHREADS": "1", "A_B": "x=y"})]


def test_a_variable_set_for_a_command_reaches_it():
    text, _ = mortgage.run([sys.executable, "-c", "import os; print(os.environ['PROBE_V'])"],
                           env={"PROBE_V": "seen"})
    assert text.strip() == "seen"

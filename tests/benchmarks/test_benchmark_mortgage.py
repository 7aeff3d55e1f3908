"""The mortgage benchmark's logic on CPUs: it reads the figures the example's commands print,
and its tables and goals compare the runs by their medians."""

from __future__ import annotations

import sys

import pytest

from benchmarks import mortgage

ETL_OUTPUT = """cluster: 1 workers, device=gpu
ETL partitions: 10/10
ETL: 74,000,000 rows from 10.00 GiB of text in 10 partitions, 2.50 s (29,600,000 rows/s, 4.00 GiB/s), read and written in one stage: 1.50 GiB of Parquet
feature table written to /tmp/x
"""
JOB_OUTPUT = """stage times:
  cluster start 4.00 s
  ETL           0.30 s
  DMatrix       0.20 s
  training      1.50 s
ETL:      7,000,000 rows from 1.00 GiB of text in 1 partitions, 0.30 s (1 rows/s, 1 GiB/s)
test AUC: 0.8123 (train AUC 0.9000)
  cluster stop     1.25 s
total: 9.00 s
"""


def test_the_etl_line_the_command_prints_is_read():
    found = mortgage.parse_etl(ETL_OUTPUT)
    assert found == {"rows": 74_000_000, "bytes": 10 * 2**30, "partitions": 10,
                     "seconds": 2.5, "written_bytes": int(1.5 * 2**30)}
    with pytest.raises(ValueError, match="no ETL summary"):
        mortgage.parse_etl("nothing here")


def test_the_job_s_stages_total_and_auc_are_read():
    found = mortgage.parse_job(JOB_OUTPUT)
    assert found["stages"] == {"cluster start": 4.0, "ETL": 0.3, "DMatrix": 0.2,
                               "training": 1.5, "cluster stop": 1.25}
    assert found["auc"] == 0.8123 and found["total"] == 9.0
    assert found["etl"]["rows"] == 7_000_000


def _etl(seconds, size=10 * 2**30):
    return [{"rows": 10, "bytes": size, "partitions": 4, "seconds": s}
            for s in seconds]


def test_tables_and_goals_use_medians_and_show_the_spread():
    payload = {
        "command": "python -m benchmarks.mortgage", "commit": "abc", "date": "today",
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
    assert "| configuration | cluster start | ETL |" in text
    assert "| gpu | 4.50 s (1 run) | 1.00 s (1 run) |" in text


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
        commands.append((command, env))
        return ETL_OUTPUT, 1.0

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

"""The etl-memory benchmark's logic on CPUs: its arguments, the commands it runs (as a dry run
prints them), the GPU memory sampler, a failed command recorded rather than fatal, and its
tables."""

from __future__ import annotations

import json
import time

import dask
import pytest

from benchmarks.examples import etl_memory

GiB = 2**30


def test_the_arguments_and_their_defaults():
    args = etl_memory.parse(["--data", "/d/9", "--data", "/d/36"])
    assert args.data == ["/d/9", "/d/36"] and args.job_data == "/d/36"
    assert args.sections == ["etl", "job"] and args.gpus == [1, 2] and args.job_gpus == [1, 2]
    assert (args.pool_cap, args.managed, args.runs, args.job_runs) == ("16GB", False, 1, 1)
    assert args.interval == 0.05 and not args.dry_run and args.tag == ""
    args = etl_memory.parse(["--data", "/d", "--sections", "job", "--job-data", "/j",
                             "--job-gpus", "1", "--pool-cap", "", "--tag", "x-1"])
    assert (args.sections, args.job_data, args.job_gpus, args.pool_cap) == (
        ["job"], "/j", [1], "")


@pytest.mark.parametrize("argv, message", [
    ([], "--data: give at least one dataset"),
    (["--data", "/d", "--sections", "etl,train"], "'train' is not one of etl, job"),
    (["--data", "/d", "--gpus", "0"], "--gpus '0': GPU counts"),
    (["--data", "/d", "--job-gpus", "one"], "--job-gpus 'one': GPU counts"),
    (["--data", "/d", "--pool-cap", "lots"], "--pool-cap 'lots' is not a size"),
    (["--data", "/d", "--runs", "0"], "--runs 0: at least 1"),
    (["--data", "/d", "--interval", "0"], "--interval 0.0: a positive number"),
    (["--data", "/d", "--job-flags", "--xgb-param 'a"], "--job-flags"),
    (["--data", "/d", "--tag", "a b"], "--tag 'a b'"),
])
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        etl_memory.parse(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_dry_run_prints_the_commands_as_a_user_types_them(capsys):
    etl_memory.main(["--data", "/d/small", "--data", "/d/large", "--managed", "--job-flags",
                     "--xgb-param grow_policy=depthwise", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    out = "--out /d/etl-memory-features.parquet --device gpu"
    env = "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES"
    assert lines == [
        *(f"{env}={gpus} python -m examples.mortgage etl --data /d/{size} {out}{flags}"
          for size in ("small", "large") for gpus, flags in (
              ("0", ""), ("0", " --maximum-pool-size 16GB"), ("0", " --managed --pool-size 0.5"),
              ("0,1", ""))),
        f"{env}=0 python -m examples.mortgage --data /d/large --device gpu --xgb-param "
        "grow_policy=depthwise",
        f"{env}=0,1 python -m examples.mortgage --data /d/large --device gpu --xgb-param "
        "grow_policy=depthwise",
    ]


def test_the_sampler_keeps_each_gpu_s_first_and_highest_memory():
    values = iter([{0: 5, 1: 7}, {0: 9, 1: 7}, {0: 6, 1: 8}])
    last = {0: 6, 1: 8}

    def read():
        return next(values, last)

    sampler = etl_memory.Sampler(read, interval=0.01).start()
    time.sleep(0.1)
    found = sampler.stop()
    assert found == {0: {"before": 5, "peak": 9}, 1: {"before": 7, "peak": 8}}
    assert sampler.samples >= 4


def test_a_failed_command_is_recorded_and_the_next_one_runs(tmp_path):
    """On a machine without a GPU every GPU command fails: each is recorded with its
    output, and the results file is written."""
    from examples.mortgage.testdata import generate as gen

    spec = gen.Spec(2007, 2007, loans_per_quarter=20, loans_per_part=20, seed=1)
    with dask.config.set(scheduler="synchronous"):
        gen.generate(str(tmp_path / "data"), spec)
    payload = etl_memory.main(["--data", str(tmp_path / "data"), "--sections", "etl",
                               "--gpus", "1", "--pool-cap", "", "--runs", "2",
                               "--out", str(tmp_path / "out"), "--machine", "cpu",
                               "--tag", "test"])
    results = payload["results"]
    assert len(results) == 2 and not any(r["ok"] for r in results)
    assert "--device gpu" in results[0]["error"] or "GPU" in results[0]["error"]
    saved = json.loads((tmp_path / "out" / "etl-memory-cpu-test.json").read_text())
    assert len(saved["results"]) == 2
    text = (tmp_path / "out" / "etl-memory-cpu-test.md").read_text()
    assert "| 1 GPU | failed after" in text and "## Failed commands" in text
    assert not (tmp_path / "etl-memory-features.parquet").exists()


def _etl(data, variant, size, seconds, peak):
    return {"section": "etl", "data": data, "variant": variant, "env": {}, "ok": True,
            "command": "x", "wall": seconds + 5,
            "etl": {"rows": 10, "bytes": size, "partitions": 4, "seconds": seconds,
                    "written_bytes": size // 3},
            "gpu_memory": {0: {"before": GiB, "peak": peak}}}


def test_the_tables_give_each_run_its_throughput_memory_and_the_jobs_placement():
    results = [_etl("/d/9", "1 GPU", 9 * GiB, 3.0, 20 * GiB),
               _etl("/d/36", "1 GPU", 36 * GiB, 15.0, 21 * GiB),
               _etl("/d/9", "2 GPUs", 9 * GiB, 2.0, 12 * GiB),
               {"section": "etl", "data": "/d/36", "variant": "2 GPUs", "env": {},
                "ok": False, "command": "python -m examples.mortgage etl", "wall": 9.0,
                "error": "RuntimeError: out of memory", "gpu_memory": {}}]
    line = ("training data: in the workers' host memory (host): the feature table (55.01 GiB, "
            "about 321,000,000 rows) and XGBoost's matrix (26.91 GiB) need more")
    jobs = [{"section": "job", "data": "/d/36", "variant": f"{n} GPU{'s' * (n > 1)}",
             "env": {}, "ok": True, "command": "x", "wall": 100.0,
             "stages": {"ETL": 10.0, "DMatrix": 1.0, "training": 50.0}, "auc": auc,
             "placement": {"where": where, "line": line if where == "host" else "x"},
             "gpu_memory": {0: {"before": 0, "peak": 40 * GiB}}}
            for n, auc, where in ((1, 0.9151, "host"), (2, 0.9163, "device"))]
    payload = {"command": "python -m benchmarks.examples.etl_memory --data /d/9", "commit": "abc",
               "date": "today", "machine": {"gpus": ["H100"], "cores": 32},
               "machine_name": "2xH100", "job_flags": "", "results": results + jobs}
    text = etl_memory.markdown(payload)
    assert "| 36.00 GiB | 1 GPU | 20.0 s | 15.00 s | 2.58 | 12.00 GiB | GPU0 21.0 (+20.0) |" in (
        text)
    assert "- 1 GPU: 80%" in text  # 36 GiB in 15 s against 9 GiB in 3 s
    assert "| 36.00 GiB | 2 GPUs | failed after 9.0 s |" in text
    assert "## Failed commands" in text and "out of memory" in text
    assert "| 36.00 GiB | 1 GPU | 100.0 s | 10.0 s | 1.0 s | 50.0 s | 0.9151 | host |" in text
    assert f"- 1 GPU: `{line}`" in text
    assert "Test AUC spread over the jobs: 0.0012" in text

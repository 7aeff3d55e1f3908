"""The applications' benchmarks' tables, on CPUs: each reads its runs' figures as it says (the
first run apart, medians over alternating repeats)."""

from __future__ import annotations

H100 = {"gpus": ["NVIDIA H100 80GB HBM3 (81559 MiB, driver 580.159.04)"],
        "gpu_names": ["NVIDIA H100 80GB HBM3"], "cores": 16, "cpu_model": "Intel(R) Xeon(R)",
        "memory": "125.80 GiB", "versions": {"dask": "2026.7.1"}}


def test_first_run_table_shows_each_run_and_the_later_ones_spread():
    from benchmarks.examples import mortgage_first_run

    run = {"etl_s": 2.0, "gb_per_s": 4.5, "first_compute_after_s": 0.1, "idle_s": 0.2,
           "tasks": {"process_part": {"count": 13, "sum_s": 3.5}}}
    payload = {"command": "python -m benchmarks.examples.mortgage_first_run --data d",
               "commit": "abc", "date": "today", "machine": H100, "partitions": 13,
               "bytes": 9 * 2**30, "cluster_ready_s": 6.0,
               "runs": [{**run, "run": 1, "etl_s": 8.0}, {**run, "run": 2},
                        {**run, "run": 3, "etl_s": 3.0}]}
    text = mortgage_first_run.markdown(payload)
    assert "| 1 | 8.00 s | 4.50 | 0.10 s | 0.20 s | process_part 13, 3.50 s |" in text
    assert "Later runs' ETL: 2.50 (2.00-3.00) s" in text


def test_xgboost_growth_gives_medians_over_alternating_repeats():
    from benchmarks.examples import xgboost_growth

    results = [{"policy": "lossguide", "workers": w, "seconds": s, "train_auc": 0.9}
               for w, s in ((1, 3.0), (2, 12.0), (1, 5.0), (2, 14.0))]
    payload = {"command": "python -m benchmarks.examples.xgboost_growth", "machine": H100,
               "machine_name": "2xH100", "commit": "c", "date": "today", "rows": 100,
               "partitions": 4, "rounds": 2, "results": results}
    text = xgboost_growth.markdown(payload)
    assert "| lossguide | 1 | 4.00 (3.00-5.00) | 1.00x | 0.9000 |" in text
    assert "| lossguide | 2 | 13.00 (12.00-14.00) | 0.31x | 0.9000 |" in text


def test_ecg_report_takes_the_median_of_alternating_runs():
    from benchmarks.examples import ecg

    def run(scale):
        times = {stage: scale for stage in ecg.STAGES}
        return {"times": times, "where": "1 process", "chunks": 4, "beats": 10, "f1": 1.0,
                "auc": 0.99, "steps": 5}

    runs = [run(1.0), run(3.0), run(2.0)]
    column = ecg.combine(runs)
    assert column["times"]["read"] == 2.0 and column["segmentation"] == [4.0, 12.0, 8.0]
    payload = {"command": "python -m benchmarks.examples.ecg --devices cpu", "commit": "abc",
               "date": "today", "machine": {"cores": 2}, "used": None, "versions": "dask 1",
               "recording": {"hours": 1, "rate": 250, "samples": 10, "beats": 2,
                             "csv": "ecg.csv", "csv_bytes": 2},
               "runs": {"CPU in-process": runs}}
    text = ecg.markdown(payload)
    assert text.startswith("# ECG pipeline, 1 h at 250 Hz")
    assert "- command: `python -m benchmarks.examples.ecg --devices cpu`" in text
    assert "- machine: no GPU, 2 cores" in text
    assert "| read | 2.000 |" in text and "the median of 3 runs" in text
    assert "CPU in-process 8.000 (4.000-12.000) s" in text

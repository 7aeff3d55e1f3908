"""The side-by-side benchmark's logic on CPUs: medians and spreads per row, and the verdict of
the plugin's best against dask-cuda's best."""

from __future__ import annotations

from benchmarks import vs_dask_cuda as bench


def test_rows_summarize_to_median_and_range_per_configuration():
    runs = {"dask-cuda pool": [{"cupy_us": v} for v in (10.0, 12.0, 11.0)],
            "plugin pool": [{"cupy_us": v} for v in (9.0, 9.5, 30.0)]}
    summary = bench.summarize(runs)
    assert summary["cupy_us"] == {"dask-cuda pool": (11.0, 10.0, 12.0),
                                  "plugin pool": (9.5, 9.0, 30.0)}
    assert summary["train_ms"] == {}


def test_verdict_compares_best_with_best_and_reads_the_spread():
    assert bench.verdict({"dask-cuda pool": (10.0, 9.0, 11.0), "dask-cuda async": (12.0, 11, 13),
                          "plugin pool": (9.0, 8.5, 9.5), "plugin async": (20.0, 19, 21)}) == "0.90"
    assert bench.verdict({"dask-cuda pool": (10.0, 9.0, 11.0),
                          "plugin pool": (10.5, 10.8, 11.2)}) == "1.05 (within spread)"
    assert bench.verdict({"dask-cuda pool": (10.0, 9.0, 11.0),
                          "plugin pool": (12.0, 11.5, 12.5)}) == "1.20 (slower)"
    assert bench.verdict({"no pool": (1.0, 1.0, 1.0)}) == "-"


def test_the_table_has_every_row_and_the_train_step_against_pytorchs_allocator():
    runs = {name: [{key: 2.0 if name == "plugin pool" else 1.0 for key, *_ in bench.ROWS}]
            for name in ("no pool", "dask-cuda pool", "plugin pool")}
    text = bench.markdown({"command": "python -m benchmarks.vs_dask_cuda --repeats 1",
                           "commit": "abc", "date": "today",
                           "machine": {"gpus": ["GPU"], "cpu": "CPU", "versions": {}},
                           "repeats": 1, "summary": bench.summarize(runs),
                           "errors": ["round 1: boom"]})
    for _, label, *_ in bench.ROWS:
        assert f"| {label} |" in text
    assert "2.00 (slower)" in text
    assert "plugin pool 2.000" in text and "dask-cuda pool 1.000" in text
    assert "- round 1: boom" in text


def test_every_configuration_is_either_dask_cudas_or_the_plugins():
    configs = bench.configurations("2GiB")
    assert configs["dask-cuda pool"][0]["rmm_pool_size"] == "2GiB"
    assert configs["plugin pool"][1] == {"pool_size": "2GiB"}
    for name, (cluster, plugin, _) in configs.items():
        assert not (cluster and plugin), name  # never both owners of RMM on one worker


def test_variants_explain_rows_but_never_stand_in_for_the_plugins_modes():
    row = {"dask-cuda async": (10.0, 9.0, 11.0), "plugin async": (12.0, 11.5, 12.5),
           "plugin async, release 0": (5.0, 5.0, 5.0)}
    assert bench.verdict(row) == "1.20 (slower)"
    for name, (cluster, plugin, _env) in bench.variants("2GiB").items():
        assert name.startswith("plugin") and plugin and not cluster, name


def test_configs_names_each_configuration_and_refuses_an_unknown_one(capsys):
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--configs", "plugin async;plugin turbo", "--repeats", "0"])
    err = capsys.readouterr().err
    assert "plugin turbo" in err and "plugin async, release 0" in err

"""The whole ECG pipeline on a CPU Dask cluster, scored against the synthetic ground truth."""

import numpy as np
import pytest

pytest.importorskip("torch", reason="the ECG example trains a PyTorch model")
from click.testing import CliRunner
from distributed import Client

from examples.ecg import plots
from examples.ecg.cli import ecg as main
from examples.ecg.pipeline import STAGES, evaluate, run
from examples.ecg.synthetic import make_ecg, write_csv

RATE = 250.0
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ecg():
    return make_ecg(1200, RATE, seed=0)


@pytest.fixture(scope="module")
def csv_file(ecg, tmp_path_factory):
    path = tmp_path_factory.mktemp("ecg") / "ecg.csv"
    write_csv(path, ecg.signal)
    return path


@pytest.fixture(scope="module")
def begun():
    """The stages' names as ``run`` announced them."""
    return []


@pytest.fixture(scope="module")
def result(csv_file, cpu_cluster, begun):
    with Client(cpu_cluster):
        return run(csv_file, RATE, device="cpu", on_stage=begun.append)


@pytest.fixture(scope="module")
def scores(result, ecg):
    out = evaluate(result, ecg)
    print(f"\n20 min synthetic ECG, 2 CPU workers: {out}\ntimes: {result.times}")
    return out


def test_every_stage_ran_on_several_chunks(result, ecg):
    assert list(result.times) == list(STAGES)
    assert all(t > 0 for t in result.times.values())
    assert result.samples == len(ecg.signal) and result.chunks >= 2


def test_each_stage_is_announced_in_order(result, begun):
    assert begun == list(STAGES)


def test_detection_f1(scores):
    assert scores["detection"]["f1"] >= 0.98


def test_outlier_roc_auc_on_held_out_beats(scores):
    o = scores["outliers"]
    assert o["abnormal"] >= 5, "too few abnormal beats held out for an AUC to mean anything"
    assert o["auc"] >= 0.9


def test_training_and_held_out_beats_are_disjoint(result):
    kept = result.beats.kept
    assert not np.any(result.train & result.test)
    assert np.array_equal(result.train | result.test, kept)
    assert 0.7 < result.train.sum() / kept.sum() < 0.8
    assert np.all(np.isfinite(result.scores[kept])) and np.all(np.isnan(result.scores[~kept]))
    assert result.latent.shape == (len(result.beats), 2)


def test_model_state_is_plain_numpy(result):
    assert all(isinstance(a, np.ndarray) for a in result.model["weights"].values())
    assert result.model["history"][-1] < result.model["history"][0]


def test_pictures(result, ecg, tmp_path):
    paths = plots.write_all(result, tmp_path, ecg)
    assert [p.name for p in paths] == ["stream.png", "beat_lengths.png", "latent.png",
                                        "decoded.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000


def test_evaluate_refuses_a_truth_at_another_rate(result):
    with pytest.raises(ValueError, match="Hz"):
        evaluate(result, make_ecg(10, 360, seed=0))


def test_an_array_too_short_is_refused():
    with pytest.raises(ValueError, match="too short|could be embedded"):
        run(make_ecg(3, RATE, seed=0).signal, RATE)


def test_cli_end_to_end_on_cpus(tmp_path, cpu_cluster):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["--device", "cpu", "--workers", "2", "--hours", "0.1", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    text = res.output
    for stage in STAGES:
        assert f"  {stage} " in text
    f1 = float(text.split("detection: F1 ")[1].split()[0])
    assert f1 >= 0.98
    assert "ROC AUC" in text and "beats found:" in text
    assert "memory:" in text and "no GPU" in text
    for name in ("stream", "beat_lengths", "latent", "decoded"):
        assert (out / f"{name}.png").read_bytes()[:8] == PNG
    assert (out / "ecg.csv").is_file()

    # The same file as a user's own recording, on a running cluster: no truth, so no F1.
    res = CliRunner().invoke(
        main, ["--device", "cpu", "--scheduler", cpu_cluster.scheduler_address,
               "--csv", str(out / "ecg.csv"), "--rate", "250", "--out", str(tmp_path / "own")]
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "need a known truth" in res.output and "beats found:" in res.output


def test_cli_says_why_a_recording_cannot_be_used(tmp_path, cpu_cluster):
    gap = tmp_path / "gap.csv"
    gap.write_text("ecg\n" + "0.1\n" * 500 + "nan\n" + "0.2\n" * 500)
    res = CliRunner().invoke(main, ["--device", "cpu", "--scheduler",
                                    cpu_cluster.scheduler_address, "--csv", str(gap),
                                    "--rate", "250", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "Error:" in res.output, res.output
    assert "gap.csv:502: 'nan' is a missing value" in res.output


def test_cli_gpu_asked_on_a_machine_without_one(tmp_path):
    from dask_gpu_interop import device

    if device.gpu_count():
        pytest.skip("this machine has a GPU")
    res = CliRunner().invoke(main, ["--device", "gpu", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "no CUDA GPU is visible" in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--csv", "{csv}"], "--csv needs --rate"),
        (["--csv", "{csv}", "--rate", "250", "--hours", "1"], "does not apply to --csv"),
        (["--csv", "/no/such/file.csv", "--rate", "250"], "does not exist"),
        (["--hours", "-1"], "--hours"),
    ],
)
def test_cli_usage_errors(args, message, csv_file):
    args = [a.replace("{csv}", str(csv_file)) for a in args]
    res = CliRunner().invoke(main, ["--device", "cpu", *args])
    assert res.exit_code == 2 and message in res.output


def test_cli_writes_the_figures_it_prints(tmp_path, cpu_cluster):
    import json
    import re

    path = tmp_path / "figures.json"
    args = ["--device", "cpu", "--scheduler", cpu_cluster.scheduler_address, "--hours", "0.05",
            "--out", str(tmp_path / "out"), "--json", str(path)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    found = json.loads(path.read_text())
    printed = {m[1]: m[2] for m in re.finditer(r"^  (\w+) +(\d+\.\d{3}) s", res.output, re.M)}
    assert list(found["stages"]) == [name for name in printed if name != "pipeline"]
    assert list(found["stages"])[1:-1] == list(STAGES)  # after "data", before "plots"
    assert all(f"{found['stages'][k]:.3f}" == v for k, v in printed.items() if k != "pipeline")
    assert f"{found['pipeline']:.3f}" == printed["pipeline"]
    assert f"beats found: {found['beats']:,} " in res.output and found["workers"] == 2
    f1 = found["scores"]["detection"]["f1"]
    assert f"detection: F1 {f1:.4f}" in res.output
    assert f"ROC AUC {found['scores']['outliers']['auc']:.4f}" in res.output
    assert isinstance(found["graphed"], bool) and found["samples"] == 0.05 * 3600 * RATE
    again = CliRunner().invoke(main, args)  # an earlier figures file is replaced
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("content", ["my notes\n", '{"figures": "examples.mortgage etl"}'])
def test_cli_refuses_a_figures_path_that_holds_something_else(tmp_path, content):
    path = tmp_path / "figures.json"
    path.write_text(content)
    res = CliRunner().invoke(main, ["--device", "cpu", "--out", str(tmp_path / "out"),
                                    "--json", str(path)])
    assert res.exit_code == 2 and "is not an earlier figures file" in res.output, res.output
    assert path.read_text() == content and not (tmp_path / "out").exists()



class _Client:
    """A client whose workers run in the processes ``pids``."""

    def __init__(self, pids):
        self.pids = pids

    def run(self, function):
        return {f"tcp://worker-{i}": pid for i, pid in enumerate(self.pids)}


@pytest.mark.parametrize("device, here, imported", [
    ("gpu", False, ("torch", "matplotlib")),  # GPU workers in other processes: begun here
    ("gpu", True, None),  # the worker is this process: its warm-up imports PyTorch here
    ("cpu", False, None),  # CPU workers use every core: nothing beside them
])
def test_the_pictures_imports_begin_as_gpu_workers_elsewhere_train(
        monkeypatch, device, here, imported):
    import os

    import dask_gpu_interop
    from examples.ecg import cli

    seen = []
    monkeypatch.setattr(dask_gpu_interop, "import_in_background",
                        lambda *modules, client=None: seen.append((modules, client)))
    pid = os.getpid()
    on_stage = cli._import_for_the_pictures(_Client([pid] if here else [pid + 1, pid + 2]),
                                            device)
    if imported is None:
        assert on_stage is None
        return
    for name in STAGES[:STAGES.index("train")]:  # the reading's tasks, driven from here
        on_stage(name)
    assert seen == []
    on_stage("train")
    assert seen == [(imported, None)]

"""The read-ceiling benchmark: its processes share out every partition of the etl command's
plan, each byte once; its table's scaling is each count's median over one GPU's; bad arguments
are one line. The GPU modes' task writes a Parquet file per partition (GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.examples import read_ceiling


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The README's generate: eight quarters of about 2.7 MiB, enough to cut in two."""
    directory = str(tmp_path_factory.mktemp("data") / "classic")
    subprocess.run([sys.executable, "-m", "examples.mortgage", "generate", "--out", directory,
                    "--size", "24MB", "--layout", "classic"], check=True, capture_output=True)
    return directory


def _bytes(parts) -> int:
    return sum(piece.stop - piece.start for part in parts for piece in part.pieces)


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_processes_read_every_partition_once(data, tmp_path, gpus):
    parts = read_ceiling.partitions(data, gpus, 2)
    result = read_ceiling.measure_one(data, gpus, 2, "host", str(tmp_path))
    assert result["partitions"] == len(parts)
    assert result["bytes"] == _bytes(parts) > 0
    assert [p["gpu"] for p in result["processes"]] == list(range(gpus))
    assert sum(p["bytes"] for p in result["processes"]) == result["bytes"]
    assert result["seconds"] >= max(p["seconds"] for p in result["processes"]) > 0


def test_the_partitions_are_the_etl_commands_on_a_cluster_of_as_many_threads(data):
    from examples.mortgage import cli, files

    class Cluster:  # four GPU workers of four threads, as the command's client sees them
        def nthreads(self):
            return {f"worker-{i}": 4 for i in range(4)}

    size = files.partition_size_for("gpu")
    command = cli._balanced(files.plan(data, partition_size=size), Cluster(), "gpu", None)
    assert read_ceiling.partitions(data, 4, 4) == command.parts
    assert len(command.parts) == 16 != len(read_ceiling.partitions(data, 1, 2))


def test_the_table_scales_each_count_by_one_gpus_median():
    def run(rate):
        return {"bytes": int(rate * 1e9), "seconds": 1.0, "partitions": 8, "processes": []}

    payload = {"command": "python -m benchmarks.examples.read_ceiling --data D", "machine": {},
               "commit": "abc", "date": "d", "threads": 2,
               "runs": {"read 1": [run(2), run(4), run(3)], "read 4": [run(9), run(6)]}}
    text = read_ceiling.markdown(payload)
    assert "| read | 1 | 8 | 3.00 (2.00-4.00) | 3.00 (2.00-4.00) | 1.00x |" in text
    assert "| read | 4 | 8 | 7.50 (6.00-9.00) | 1.88 (1.50-2.25) | 2.50x |" in text


@pytest.mark.parametrize("argv, wrong", [
    (["--gpus", "1,two"], "--gpus 1,two"),
    (["--gpus", "0,1"], "--gpus 0,1"),
    (["--modes", "read,write"], "--modes read,write"),
    (["--threads", "0"], "--threads"),
])
def test_bad_arguments_are_named_before_anything_runs(data, capsys, argv, wrong):
    with pytest.raises(SystemExit):
        read_ceiling.parse(["--data", data, *argv])
    assert wrong in capsys.readouterr().err


def test_a_missing_data_folder_is_named_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        read_ceiling.main(["--data", str(tmp_path / "none"), "--out", str(tmp_path / "out")])
    assert "no such folder" in str(stopped.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.gpu
def test_the_task_mode_writes_each_partition_as_the_etl_does(data, tmp_path):
    import cudf

    parts = read_ceiling.partitions(data, 1, 2)
    result = read_ceiling.measure_one(data, 1, 2, "task", str(tmp_path))
    written = sorted(os.listdir(tmp_path))
    assert len(written) == len(parts) == result["partitions"]
    assert result["bytes"] == _bytes(parts)
    rows = sum(len(cudf.read_parquet(os.path.join(tmp_path, name))) for name in written)
    assert rows > 0

"""Where the whole job keeps its training data, decided before any work: the estimate of the
feature table and XGBoost's matrix from the files, what the workers may hold, the choice
between the GPUs' memory and the workers' host memory, and the one-line refusals."""

from __future__ import annotations

import gzip
import os
import shutil

import dask
import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster

from dask_gpu_interop import cluster_workers
from examples.mortgage import files, placement, schema
from examples.mortgage.cli import mortgage as main
from examples.mortgage.testdata import generate as gen

from .mortgage_sample import SAMPLE

GiB = 2**30
ROW = 45 * 4 + 4  # the feature table's row: 45 float32 features, an int32 label


def _lines(path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("placement"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=300, loans_per_part=100, seed=2)
    with dask.config.set(scheduler="synchronous"):
        return gen.generate(directory, spec, layout="both")


# ---------------------------------------------------------------------------------------------
# The estimate


def test_a_row_of_the_feature_table_is_its_columns_widths():
    assert placement.row_bytes() == ROW


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_rows_are_estimated_from_the_text_and_its_first_lines(dataset, layout):
    plan = files.plan(dataset.directory_of(layout), partition_size="1MiB")
    paths = dataset.current if layout == "current" else dataset.performance
    rows = sum(_lines(p) for p in paths)
    found = placement.estimate(plan, threads=2)
    assert abs(found.rows - rows) < 0.05 * rows, (found.rows, rows)
    assert found.table_bytes == found.rows * ROW
    assert found.quantized_bytes == found.rows * len(schema.FEATURES) * 2
    assert found.task_bytes == 2 * max(p.nbytes for p in plan.parts) * placement.TASK_PEAK


def test_bytes_per_line_reads_the_first_lines_of_files_spread_over_the_set(tmp_path):
    short, long = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    with open(short, "wb") as f:
        f.write(b"x" * 9 + b"\n" + b"y" * 9 + b"\n")  # 10 bytes a line
    with open(long, "wb") as f:
        f.write(b"z" * 29 + b"\n")  # 30 bytes a line
    assert placement.bytes_per_line([short]) == 10
    assert placement.bytes_per_line([short, long]) == 50 / 3  # 50 bytes in 3 lines
    assert placement.bytes_per_line([short, long], count=1) == 10  # the first only
    packed = str(tmp_path / "c.txt.gz")
    with gzip.open(packed, "wb") as f:
        f.write(b"z" * 29 + b"\n" + b"w" * 29 + b"\n")
    assert placement.bytes_per_line([packed]) == 30  # decompressed
    assert placement.bytes_per_line([short], sample=15) == 10  # whole lines only
    empty = str(tmp_path / "d.txt")
    open(empty, "wb").close()
    assert placement.bytes_per_line([empty]) == 0


def test_a_compressed_dataset_is_estimated_from_its_text(dataset, tmp_path):
    data = tmp_path / "gz"
    data.mkdir()
    for path in dataset.current:
        with open(path, "rb") as f, gzip.open(data / (os.path.basename(path) + ".gz"), "wb") as g:
            shutil.copyfileobj(f, g)
    plain = placement.estimate(files.plan(dataset.directory_of("current")))
    packed = placement.estimate(files.plan(str(data)))
    assert abs(packed.rows - plain.rows) <= 0.01 * plain.rows


# ---------------------------------------------------------------------------------------------
# The choice


def big(rows=321_000_000, tasks=10 * GiB) -> placement.Estimate:
    """About 36 GiB of classic text: 55 GiB of table, 27 GiB of XGBoost's matrix."""
    return placement.Estimate(rows, rows * ROW, rows * 90, tasks)


def gpus(count: int, size: int = 80 * GiB, host: int = 512 * GiB) -> placement.Memory:
    return placement.Memory(gpus=(size,) * count, host_bytes=host)


def test_what_fits_the_gpus_stays_there():
    small = big(rows=60_000_000)  # about 9 GiB of text: 10 GiB of table
    chosen = placement.choose(small, gpus(1), "gpu")
    assert chosen.where == "device"
    assert "fit the 64.00 GiB each of 1 GPU(s) may fill" in chosen.reason
    line = chosen.line()
    assert line.startswith("training data: in the GPUs' memory (device): the feature table ")
    assert "\n" not in line


def test_more_than_one_gpu_holds_goes_to_host_memory_and_two_gpus_hold_it():
    one = placement.choose(big(), gpus(1), "gpu")
    assert one.where == "host"
    line = one.line()
    assert line.startswith("training data: in the workers' host memory (host): the feature "
                           "table (55.")
    assert "more than the 64.00 GiB each of 1 GPU(s) may fill" in line
    assert "XGBoost's quantized matrix on the GPUs (26.91 GiB each)" in line
    assert placement.choose(big(), gpus(2), "gpu").where == "device"


def test_the_threshold_is_the_gpus_share_of_their_memory_less_the_tasks_in_flight():
    estimate = big(rows=10_000_000, tasks=GiB)
    table, matrix = estimate.table_bytes, estimate.quantized_bytes
    exact = int((table + max(GiB, matrix)) / placement.DEVICE_SHARE)  # just enough
    assert placement.choose(estimate, gpus(1, size=exact + 1), "gpu").where == "device"
    assert placement.choose(estimate, gpus(1, size=exact - 100), "gpu").where == "host"
    # the tasks in flight, where they need more than XGBoost's matrix
    tasks = placement.Estimate(estimate.rows, table, matrix, 3 * matrix)
    need = int((table + 3 * matrix) / placement.DEVICE_SHARE)
    assert placement.choose(tasks, gpus(1, size=need - 100), "gpu").where == "host"
    # two GPUs hold half the table and the matrix each: the smaller one decides
    shared = placement.Estimate(estimate.rows, table, matrix, 0)
    whole = int((table + matrix) / placement.DEVICE_SHARE)
    for smaller, where in ((whole // 2 + 100, "device"), (whole // 2 - 100, "host")):
        memory = placement.Memory(gpus=(whole * 4, smaller), host_bytes=512 * GiB)
        assert placement.choose(shared, memory, "gpu").where == where


def test_a_matrix_larger_than_the_gpus_is_refused_before_the_work():
    with pytest.raises(ValueError) as info:
        placement.choose(big(rows=3_000_000_000), gpus(1), "gpu", "auto")
    text = str(info.value)
    for part in ("XGBoost's quantized matrix of about 3,000,000,000 rows", "251.46 GiB",
                 "more than the 64.00 GiB a GPU may fill", "use more GPUs",
                 "fewer quarters (--data)", "a larger --partition-size does not help"):
        assert part in text, (part, text)
    assert "\n" not in text
    for asked in ("host", "device"):  # the GPUs hold the matrix in either place
        with pytest.raises(ValueError, match="use more GPUs"):
            placement.choose(big(rows=3_000_000_000), gpus(1), "gpu", asked)
    assert placement.choose(big(rows=3_000_000_000), gpus(8, host=2048 * GiB),
                            "gpu").where == "host"


def test_more_than_the_host_memory_holds_is_refused_before_the_work():
    memory = gpus(1, host=64 * GiB)  # 44.8 GiB before the workers spill to disk
    with pytest.raises(ValueError) as info:
        placement.choose(big(), memory, "gpu")
    text = str(info.value)
    for part in ("the feature table (55.01 GiB, about 321,000,000 rows)",
                 "XGBoost's matrix (26.91 GiB)", "need 81.91 GiB on each of 1 GPU(s)",
                 "more than the 64.00 GiB a GPU may fill", "81.91 GiB of host memory, more than the workers hold before they spill to disk "
                 "(44.80 GiB)", "use more GPUs or machines", "fewer quarters (--data)"):
        assert part in text, (part, text)
    assert "\n" not in text
    with dask.config.set({"distributed.worker.memory.spill": 0.95}):
        assert placement.host_share() == 0.95
    with dask.config.set({"distributed.worker.memory.spill": False}):
        assert placement.host_share() == dask.config.get("distributed.worker.memory.pause")


def test_partitions_too_large_for_a_gpu_are_refused_with_what_to_give():
    with pytest.raises(ValueError, match=r"tasks in flight on a GPU need up to 90.00 GiB .* "
                                         r"more than the 80.00 GiB a GPU has: give a smaller "
                                         r"--partition-size or --threads-per-worker 1"):
        placement.choose(big(rows=1000, tasks=90 * GiB), gpus(1), "gpu")
    # tasks pass through: they may fill the GPU beyond the share that held data may
    assert placement.choose(big(rows=1000, tasks=70 * GiB), gpus(1), "gpu").where == "host"


def test_what_is_asked_for_is_what_is_had():
    small = big(rows=60_000_000)
    asked = placement.choose(small, gpus(1), "gpu", "host")
    assert asked.where == "host" and asked.reason.startswith("asked for;")
    forced = placement.choose(big(), gpus(1), "gpu", "device")
    assert forced.where == "device" and "do not fit (asked for: expect spilling)" in forced.reason
    with pytest.raises(ValueError, match="--training-data somewhere: choose one of auto, "
                                         "device, host"):
        placement.choose(small, gpus(1), "gpu", "somewhere")


def test_cpu_workers_keep_it_in_their_memory_or_say_what_it_needs():
    cpus = placement.Memory(gpus=(), host_bytes=256 * GiB)
    chosen = placement.choose(big(), cpus, "cpu")
    assert chosen.where == "host" and chosen.reason.startswith("CPU workers: the feature table")
    with pytest.raises(ValueError, match=r"need 81.91 GiB, more than the workers hold in "
                                         r"memory before they spill to disk \(44.80 GiB\): use "
                                         r"more workers or machines, or fewer quarters"):
        placement.choose(big(), placement.Memory(gpus=(), host_bytes=64 * GiB), "cpu")
    with pytest.raises(ValueError, match="--training-data device: the workers have no GPU"):
        placement.choose(big(rows=10), cpus, "cpu", "device")


# ---------------------------------------------------------------------------------------------
# What the workers may hold, and the command


def test_the_workers_memory_limits_and_cores_are_measured():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, memory_limit="1GB",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        found = placement.measure(client, "cpu")
    assert found.gpus == ()
    assert found.host_bytes == 2 * 10**9  # one host: the sum of its workers' limits
    cores = min(len(os.sched_getaffinity(0)), os.cpu_count() // 2)  # shared by the two
    assert found.cores_per_worker == max(1, cores)


@pytest.mark.parametrize("allowed, workers, cores", [
    (32, 2, 16),  # not pinned: the host's cores shared out
    (16, 2, 16),  # pinned to its GPU's cores (dask-cuda): those
    (16, 4, 8),  # pinned, four sharing a host: no more than a fourth each
])
def test_a_worker_s_cores_are_those_it_may_use_shared_with_its_host(monkeypatch, allowed,
                                                                    workers, cores):
    def pinned(dask_worker=None):
        return {"host": "h", "limit": 10**9, "total": 2**40, "cpus": 32, "allowed": allowed}

    monkeypatch.setattr(placement, "_worker_memory", pinned)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        assert placement.measure(client, "cpu").cores_per_worker == cores


def test_each_gpu_worker_s_memory_is_its_pools_maximum_or_its_device(monkeypatch):
    snapshots = {}

    def report(client):
        return snapshots

    monkeypatch.setattr("dask_gpu_interop.memory_report", report)
    monkeypatch.setattr(placement, "_device_bytes", lambda dask_worker=None: 24 * GiB)
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        first, second, third = sorted(cluster_workers(client))
        snapshots.update({
            first: {"device": {"total": 80 * GiB}, "maximum_pool_size": 16 * 10**9},
            second: {"device": {"total": 80 * GiB}, "maximum_pool_size": None},
            third: {"status": "no-plugin"},  # asked on the worker
        })
        found = placement.measure(client, "gpu")
    assert found.gpus == (16 * 10**9, 80 * GiB, 24 * GiB)


def test_the_job_refuses_before_any_work_in_one_line(dataset):
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": ""}) as cluster:
        result = CliRunner().invoke(main, ["--device", "cpu", "--scheduler",
                                           cluster.scheduler_address, "--data", SAMPLE,
                                           "--training-data", "device"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1] == (
        "Error: --training-data device: the workers have no GPU; leave it auto")
    assert "ETL" not in result.output


def test_the_option_is_checked_by_the_command():
    result = CliRunner().invoke(main, ["--training-data", "disk"])
    assert result.exit_code == 2 and "'disk' is not one of 'auto', 'device', 'host'" in (
        result.output)

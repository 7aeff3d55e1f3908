"""Where the whole job keeps XGBoost's quantized matrix, decided before any work: the estimate
of the matrix (and of the feature table, made a partition at a time) from the files, what the
workers may hold, the choice between the GPUs' memory and XGBoost's external memory, the
predicted peak, and the one-line refusals."""

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
    found = placement.estimate(plan)
    assert abs(found.rows - rows) < 0.05 * rows, (found.rows, rows)
    assert found.table_bytes == found.rows * ROW
    assert found.quantized_bytes == int(found.rows * len(schema.FEATURES) * 1.1)
    assert found.task_bytes == max(p.nbytes for p in plan.parts) * placement.TASK_PEAK
    assert found.training_bytes == found.rows * placement.TRAINING_BYTES_PER_ROW


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


def big(rows=321_000_000, tasks=2 * GiB) -> placement.Estimate:
    """About 36 GiB of classic text: 14.80 GiB of XGBoost's matrix (55 GiB of table, never
    held), 31.09 GiB of its training memory, partitions of 2 GiB at their peak."""
    return placement.Estimate(rows, rows * ROW, int(rows * 45 * 1.1), tasks)


def gpus(count: int, size: int = 80 * GiB, host: int = 512 * GiB) -> placement.Memory:
    return placement.Memory(gpus=(size,) * count, host_bytes=host)


def test_the_prediction_is_the_matrix_and_the_larger_of_the_partitions_and_the_training():
    chosen = placement.choose(big(), gpus(1), "gpu")
    assert chosen.where == "device" and not chosen.external and chosen.prefetch == 2
    estimate = big()
    # the partitions in flight while the matrix is built, the training memory after
    assert chosen.peak_bytes == int(estimate.quantized_bytes + 321_000_000 * 104)
    assert "fits the 72.00 GiB each of 1 GPU(s) may fill: predicted peak 45.89 GiB" in (
        chosen.reason)
    assert ("then the larger of 3 partitions in flight (6.00 GiB) and XGBoost's training "
            "memory (31.09 GiB)") in chosen.reason
    line = chosen.line()
    assert line.startswith("training data: XGBoost's matrix in the GPUs' memory (device): "
                           "XGBoost's matrix of about 321,000,000 rows (14.80 GiB; the feature "
                           "table would be 55.01 GiB, made a partition at a time)")
    assert "\n" not in line
    # partitions larger than the training memory decide the peak
    wide = placement.Estimate(10_000_000, 10_000_000 * ROW, 495_000_000, 10 * GiB)
    assert placement.choose(wide, gpus(1), "gpu").peak_bytes == 495_000_000 + 30 * GiB


def test_where_two_partitions_ahead_do_not_fit_one_does_then_none():
    wide = placement.Estimate(10_000_000, 10_000_000 * ROW, 495_000_000, 20 * GiB)
    for prefetch in (2, 1, 0):
        size = int((495_000_000 + (prefetch + 1) * 20 * GiB) / placement.DEVICE_SHARE) + 100
        chosen = placement.choose(wide, gpus(1, size=size), "gpu")
        assert chosen.where == "device" and chosen.prefetch == prefetch


def test_a_matrix_that_does_not_fit_goes_to_xgboosts_external_memory():
    chosen = placement.choose(big(), gpus(1, size=48 * GiB), "gpu")
    assert chosen.where == "host" and chosen.external and chosen.prefetch == 0
    # what is left of the 43.2 GiB the GPU may fill beside the training memory and a page's
    # staging (a sixteenth of the GPU)
    room = 0.9 * 48 * GiB - 321_000_000 * 104 - 48 * GiB / 16
    assert chosen.cache_host_ratio == round(1 - room / big().quantized_bytes, 4)
    assert chosen.peak_bytes == pytest.approx(0.9 * 48 * GiB, rel=1e-4)
    assert "XGBoost's external memory: 38% of its pages in host memory" in chosen.reason
    assert chosen.line().startswith("training data: XGBoost's matrix in host memory (host): ")
    # two GPUs hold half of everything each: in-core again
    assert placement.choose(big(), gpus(2, size=48 * GiB), "gpu").where == "device"


def test_training_memory_beyond_a_gpu_is_refused_before_the_work():
    with pytest.raises(ValueError) as info:
        placement.choose(big(), gpus(1, size=32 * GiB), "gpu")
    text = str(info.value)
    for part in ("XGBoost's training memory for about 321,000,000 rows, 31.09 GiB on each of "
                 "1 GPU(s) beside its matrix, with 2.00 GiB for its external memory's pages, "
                 "is more than the 28.80 GiB each of 1 GPU(s) may fill",
                 "use more GPUs (each trains on its share)", "fewer quarters (--data)"):
        assert part in text, (part, text)
    assert "\n" not in text


def test_pages_beyond_the_host_memory_are_refused_before_the_work():
    with pytest.raises(ValueError) as info:
        placement.choose(big(rows=3_000_000_000), gpus(5, host=64 * GiB), "gpu")
    text = str(info.value)
    for part in ("XGBoost's matrix of about 3,000,000,000 rows (138.30 GiB",
                 "more than the 72.00 GiB each of 5 GPU(s) may fill",
                 "of its pages in host memory, more than the workers hold before they spill to "
                 "disk (44.80 GiB)", "use more GPUs or machines", "fewer quarters (--data)",
                 "a larger --partition-size does not help"):
        assert part in text, (part, text)
    assert "\n" not in text
    with dask.config.set({"distributed.worker.memory.spill": 0.95}):
        assert placement.host_share() == 0.95
    with dask.config.set({"distributed.worker.memory.spill": False}):
        assert placement.host_share() == dask.config.get("distributed.worker.memory.pause")


def test_partitions_too_large_for_a_gpu_are_refused_with_what_to_give():
    with pytest.raises(ValueError, match=r"a partition being made on a GPU needs up to 90.00 "
                                         r"GiB \(5x its text\), more than the 80.00 GiB a GPU "
                                         r"has: give a smaller --partition-size"):
        placement.choose(big(rows=1000, tasks=90 * GiB), gpus(1), "gpu")
    # one at a time where two do not fit; past the share the data may fill, it passes through
    assert placement.choose(big(rows=1000, tasks=50 * GiB), gpus(1), "gpu").prefetch == 0
    assert placement.choose(big(rows=1000, tasks=75 * GiB), gpus(1), "gpu").external


def test_what_is_asked_for_is_what_is_had():
    small = big(rows=60_000_000)
    asked = placement.choose(small, gpus(1), "gpu", "host")
    assert asked.external and asked.reason.startswith("asked for;")
    assert asked.cache_host_ratio == 0.0  # all of it fits on the GPU: the pages stay there
    forced = placement.choose(big(), gpus(1, size=40 * GiB), "gpu", "device")
    assert forced.where == "device" and "does not fit (asked for: expect running out)" in (
        forced.reason)
    with pytest.raises(ValueError, match="--training-data somewhere: choose one of auto, "
                                         "device, host"):
        placement.choose(small, gpus(1), "gpu", "somewhere")


def test_cpu_workers_keep_the_partitions_where_the_table_fits_too():
    cpus = placement.Memory(gpus=(), host_bytes=256 * GiB)  # 179.2 GiB before spilling
    chosen = placement.choose(big(), cpus, "cpu")
    assert chosen.where == "host" and chosen.keep and not chosen.external
    assert chosen.reason.startswith("CPU workers: XGBoost's matrix")
    assert "the partitions kept between XGBoost's passes" in chosen.reason
    tight = placement.choose(big(), placement.Memory(gpus=(), host_bytes=96 * GiB), "cpu")
    assert not tight.keep and "made again at each of XGBoost's passes" in tight.reason
    with pytest.raises(ValueError, match=r"and XGBoost's training memory need 45.89 GiB, more "
                                         r"than the workers hold in memory before they spill "
                                         r"to disk \(44.80 GiB\): use more workers or "
                                         r"machines, or fewer quarters"):
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

"""The mortgage pipeline on GPUs: cuDF gives pandas' table in both layouts, bad rows are caught
there too, byte ranges give every row once, training runs on the device (and from host
memory), one partition's ETL stays within a few times its size, and the streamed write's
device memory does not grow with the data."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import sys

import dask
import pandas as pd
import pytest

from dask_gpu_interop import device
from examples.mortgage import etl, files, read, schema
from examples.mortgage.testdata import generate as gen

from .mortgage_rows import raw_lines, to_current_layout
from .mortgage_sample import SAMPLE, SAMPLE_ACQ, SAMPLE_PERF


def _ready() -> tuple[bool, str]:
    if device.gpu_count() == 0:
        return False, "no CUDA GPU visible"
    missing = [m for m in ("cudf", "cupy", "dask_cudf", "rmm") if importlib.util.find_spec(m) is None]
    return (not missing, f"{', '.join(missing)} not installed")


READY, WHY = _ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not READY, reason=WHY)]


@pytest.fixture(autouse=True, scope="module")
def local_threads():
    with dask.config.set(scheduler="threads", num_workers=1):
        yield


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("mortgage-gpu"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=500, loans_per_part=200, seed=7)
    return gen.generate(directory, spec, layout="both")


def _host(result):
    return result.frame.compute().to_pandas().reset_index(drop=True)


def _both(plan, **kwargs):
    return etl.run(plan, device="cpu", **kwargs), etl.run(plan, device="gpu", **kwargs)


def _same_table(cpu, gpu):
    want = cpu.frame.compute().reset_index(drop=True)
    got = _host(gpu)
    pd.testing.assert_series_equal(got.dtypes, want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert (gpu.rows, gpu.bad_count) == (cpu.rows, cpu.bad_count)


@pytest.mark.parametrize("layout", ["classic", "current"])
@pytest.mark.parametrize("partition_size", ["1MiB", "256MiB"])
def test_cudf_and_pandas_give_the_same_feature_table(dataset, layout, partition_size):
    plan = files.plan(dataset.directory_of(layout), partition_size=partition_size)
    if partition_size == "1MiB" and layout == "current":  # its files are larger than 1 MiB
        assert any(p.start > 0 for part in plan.parts for p in part.pieces)  # byte ranges
    _same_table(*_both(plan))


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_small_conversion_chunks_and_two_tasks_at_once_give_the_same_table(
        dataset, layout, monkeypatch):
    """A partition read in many chunks (each converted alone, then joined), two partitions at
    once on the device (local GPU workers run two threads): the table is the same."""
    plan = files.plan(dataset.directory_of(layout), partition_size="256MiB")
    cpu = etl.run(plan, device="cpu")
    monkeypatch.setattr(read, "CHUNK", 64 * 2**10)
    assert len(files.chunks(plan.parts[0].pieces, read.CHUNK)) > 3
    with dask.config.set(scheduler="threads", num_workers=2):
        _same_table(cpu, etl.run(plan, device="gpu"))


def test_a_bad_row_in_a_later_chunk_is_named_by_its_line(tmp_path, monkeypatch):
    rows = raw_lines([SAMPLE_PERF])[:3000]
    rows[2500] = rows[2500][:4] + ["12x.5"] + rows[2500][5:]
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_text("\n".join("|".join(r) for r in rows) + "\n")
    monkeypatch.setattr(read, "CHUNK", 32 * 2**10)
    plan = files.plan(perf=str(path), acq=SAMPLE_ACQ)
    assert len(files.chunks(plan.parts[0].pieces, read.CHUNK)) > 3
    with pytest.raises(read.BadRowsError, match=re.escape(f"{path}:2501: current_actual_upb")):
        etl.run(plan, device="gpu")
    cpu, gpu = _both(plan, bad_rows="skip")
    assert gpu.bad_count == 1 and gpu.rows == 2999
    _same_table(cpu, gpu)


def test_the_real_sample_on_both_devices_and_layouts(tmp_path):
    classic = files.plan(perf=SAMPLE_PERF, acq=SAMPLE_ACQ)
    current = files.plan(to_current_layout(SAMPLE_PERF, SAMPLE_ACQ, tmp_path / "2007Q3.csv"))
    cpu = etl.run(classic, device="cpu")
    for plan in (classic, current):
        gpu = etl.run(plan, device="gpu")
        _same_table(cpu, gpu)
        assert gpu.rows == 10_000


def test_files_with_windows_line_ends_give_the_same_table(tmp_path):
    """A dataset saved with CR LF line ends (an editor, a Windows machine): libcudf's reader
    gives the table of the LF files, as pyarrow's does on CPUs."""
    for source in (SAMPLE_PERF, SAMPLE_ACQ):
        with open(source, "rb") as f:
            (tmp_path / os.path.basename(source)).write_bytes(f.read().replace(b"\n", b"\r\n"))
    crlf = files.plan(str(tmp_path))
    want = etl.run(files.plan(perf=SAMPLE_PERF, acq=SAMPLE_ACQ), device="cpu")
    _same_table(want, etl.run(crlf, device="gpu"))
    pd.testing.assert_frame_equal(etl.run(crlf, device="cpu").frame.compute(),
                                  want.frame.compute(), check_exact=True)


def test_byte_ranges_at_loan_boundaries_read_every_row_once(dataset):
    """cuDF reads the rows that start after a range's offset: each piece's rows are its lines."""
    path = max(dataset.current, key=os.path.getsize)
    size = os.path.getsize(path)
    parts = files.cut([path], size // 5, schema.CURRENT)
    assert len(parts) >= 4
    columns = ("loan_id", "monthly_reporting_period")
    got = [read.read(part.pieces, schema.CURRENT, columns, "gpu").frame.to_pandas()
           for part in parts]
    for part, frame in zip(parts, got, strict=True):
        (piece,) = part.pieces
        with open(path, "rb") as f:
            f.seek(piece.start)
            lines = f.read(piece.nbytes).decode().splitlines()
        assert frame["loan_id"].tolist() == [int(line.split("|")[1]) for line in lines]
    assert sum(len(frame) for frame in got) == len(raw_lines([path]))


@pytest.mark.parametrize("kind, spoil, reason", [
    ("too many fields", lambda f: f + ["x"], "expected 31 fields, found 32"),
    ("bad number", lambda f: f[:4] + ["12x.5"] + f[5:], "current_actual_upb is not a number"),
    ("bad integer id", lambda f: ["10x"] + f[1:], "loan_id is not an integer"),
    ("bad date", lambda f: f[:1] + ["2007-01-01"] + f[2:], "monthly_reporting_period is not"),
    ("bad status", lambda f: f[:10] + ["?"] + f[11:], "current_loan_delinquency_status"),
    ("boolean for a number", lambda f: f[:4] + ["True"] + f[5:],
     "current_actual_upb is not a number"),
    ("misplaced sign", lambda f: f[:4] + ["5.-3"] + f[5:], "current_actual_upb is not a number"),
])
def test_bad_rows_are_caught_on_the_gpu_too(tmp_path, kind, spoil, reason):
    """cuDF reads an unparsable number as null instead of raising: the check must see it."""
    rows = raw_lines([SAMPLE_PERF])[:300]
    rows[122] = spoil(rows[122])
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_text("\n".join("|".join(r) for r in rows) + "\n")
    plan = files.plan(perf=str(path), acq=SAMPLE_ACQ)
    with pytest.raises(read.BadRowsError, match=re.escape(f"{path}:123: {reason}")):
        etl.run(plan, device="gpu")
    cpu, gpu = _both(plan, bad_rows="skip")
    assert gpu.bad_count == 1 and gpu.rows == 299
    _same_table(cpu, gpu)


def test_a_nan_number_reads_as_missing_on_the_gpu_as_on_the_cpus(tmp_path):
    rows = raw_lines([SAMPLE_PERF])[:50]
    rows[4][3], rows[5][3], rows[6][4] = "NaN", "", "nan"
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_text("\n".join("|".join(r) for r in rows) + "\n")
    plan = files.plan(perf=str(path), acq=SAMPLE_ACQ)
    cpu, gpu = _both(plan)
    assert gpu.bad_count == 0
    _same_table(cpu, gpu)
    got = read.read([files.Piece(str(path), 0, os.path.getsize(path))], schema.CLASSIC_PERFORMANCE,
                    schema.PERFORMANCE_READ, "gpu").frame.to_pandas()
    assert got["interest_rate"].tolist()[3:7] == [float(rows[3][3]), -1, -1, float(rows[6][3])]
    assert got["current_actual_upb"].tolist()[6] == -1


def test_a_line_short_of_fields_reads_as_blank_fields_on_the_gpu(tmp_path):
    """What the GPU reader does not catch, as the module says: the missing last fields."""
    rows = raw_lines([SAMPLE_PERF])[:50]
    rows[7] = rows[7][:-1]  # servicing_activity_indicator, often blank anyway
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_text("\n".join("|".join(r) for r in rows) + "\n")
    gpu = etl.run(files.plan(perf=str(path), acq=SAMPLE_ACQ), device="gpu", bad_rows="skip")
    assert gpu.rows == 50 and gpu.bad_count == 0
    assert _host(gpu)["servicing_activity_indicator"][7] == schema.MISSING


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_one_partition_needs_under_five_times_its_size_on_the_device(tmp_path, monkeypatch,
                                                                      layout):
    """Peak device bytes of one partition's whole ETL (read, features, join, feature table,
    the result included), from RMM's statistics: a partition read in two chunks, as a 1 GiB
    one is by default, stays under 5x its text (libcudf's reader alone holds 7.7x the text it
    reads at once)."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    spec = gen.Spec(2007, 2007, loans_per_quarter=30000, loans_per_part=30000, seed=11)
    made = gen.generate(str(tmp_path), spec, layout=layout)
    if layout == "classic":
        plan = files.plan(perf=made.performance[:1], acq=made.acquisition)
    else:
        plan = files.plan(made.current[:1])
    (part,) = plan.parts
    monkeypatch.setattr(read, "CHUNK", part.nbytes // 2 + 1)
    previous = rmm.mr.get_current_device_resource()
    cupy.cuda.set_allocator(rmm_cupy_allocator)
    rmm.statistics.enable_statistics()
    try:
        acq = (etl.load_acquisitions(plan.acquisition_files(part.quarter), "gpu", plan.names)[0]
               if layout == "classic" else None)
        rmm.statistics.push_statistics()
        table, _ = etl.process_part(part, plan.layout, acq, "gpu", plan.names)
        peak = rmm.statistics.pop_statistics().peak_bytes
    finally:
        rmm.mr.set_current_device_resource(previous)
        cupy.cuda.set_allocator(None)
    assert part.nbytes > 60e6 and len(table) > 0
    assert peak < 5 * part.nbytes, f"peak {peak / part.nbytes:.2f}x the partition"


@pytest.mark.slow
def test_training_on_gpu_workers(dataset):
    from dask_gpu_interop import cluster_client
    from examples.mortgage import job

    plan = files.plan(dataset.directory_of("classic"), partition_size="1GiB")
    with cluster_client(device="gpu", n_workers=1, processes=True) as (client, where):
        assert where == "gpu"  # a worker process: this one has set up GPU memory already
        result = job.run(client, "gpu", plan, rounds=20)
    assert result.training.auc > 0.75
    text = "\n".join(result.lines())
    assert "device: gpu" in text and "pool" in text
    # the streamed matrix: two passes over the partitions on a GPU, and what it held there
    assert len(result.training.passes) == 2 and result.training.matrix == "in-core"
    assert result.training.memory["matrices"] > 0


@pytest.mark.slow
def test_the_default_command_on_gpus_says_nothing_it_should_not():
    """The README's command as a user runs it (one GPU: the worker in the command's process):
    no warning about an early CUDA context, no empty-matrix noise or rank lines from
    XGBoost."""
    out = subprocess.run(
        [sys.executable, "-m", "examples.mortgage", "--device", "gpu", "--years", "2007",
         "--loans-per-quarter", "2000", "--rounds", "10"],
        capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "device=gpu" in text and "test AUC" in text
    assert "already exists" not in text, text
    assert "empty DMatrix" not in text and "Empty dataset" not in text, text
    assert "got rank" not in text, text
    assert re.search(r"^\s+xgboost\s+shared ", text, re.M), text  # one pool for every framework


@pytest.mark.slow
def test_the_etl_command_on_gpus_gives_the_cpus_table(dataset, tmp_path):
    """The `etl` command as a user runs it: local GPU workers with two threads, each on its
    own stream, and a task waiting for its stream before another reads its result."""
    tables = {}
    for which in ("gpu", "cpu"):
        out = tmp_path / f"{which}.parquet"
        done = subprocess.run(
            [sys.executable, "-m", "examples.mortgage", "etl", "--data",
             dataset.directory_of("classic"), "--out", str(out), "--device", which,
             "--partition-size", "1MiB"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        tables[which] = pd.read_parquet(out)
    assert len(tables["gpu"]) > 0
    pd.testing.assert_frame_equal(tables["gpu"], tables["cpu"], check_exact=True)


def test_the_streamed_write_on_gpus_writes_the_cpus_table(dataset, tmp_path):
    """Each GPU task writes its partition with cuDF's writer: the same files as the CPUs', the
    same table through pandas' and cuDF's readers."""
    import cudf

    plan = files.plan(dataset.directory_of("classic"), partition_size="1MiB")
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    etl.write(str(cpu), plan, device="cpu")
    written = etl.write(str(gpu), plan, device="gpu")
    assert sorted(os.listdir(gpu)) == sorted(os.listdir(cpu)) and len(plan.parts) > 2
    want = pd.read_parquet(cpu)
    assert written.rows == len(want) and written.written_bytes > 0
    pd.testing.assert_frame_equal(pd.read_parquet(gpu), want, check_exact=True)
    pd.testing.assert_frame_equal(cudf.read_parquet(str(gpu)).to_pandas(), want,
                                  check_exact=True)


@contextlib.contextmanager
def _device_peak(found: list):
    """Appends the peak device bytes allocated through RMM within the block."""
    import rmm

    previous = rmm.mr.get_current_device_resource()
    rmm.statistics.enable_statistics()
    try:
        rmm.statistics.push_statistics()
        yield
        found.append(rmm.statistics.pop_statistics().peak_bytes)
    finally:
        rmm.mr.set_current_device_resource(previous)


def test_the_streamed_write_s_device_memory_does_not_grow_with_the_data(tmp_path):
    """One quarter, then four, in partitions of the same size: the write's peak device memory
    is a partition's in flight (and the acquisitions), not the table's."""
    spec = gen.Spec(2007, 2007, loans_per_quarter=20000, loans_per_part=20000, seed=12)
    made = gen.generate(str(tmp_path / "data"), spec)
    first = [p for p in made.performance if "2007Q1" in p]
    plans = {name: files.plan(perf=perf, acq=made.acquisition, partition_size="8MiB")
             for name, perf in (("one", first), ("four", made.performance))}
    peaks = []
    for name, plan in plans.items():
        with _device_peak(peaks):
            etl.write(str(tmp_path / name), plan, device="gpu")
    text = {name: sum(p.nbytes for p in plan.parts) for name, plan in plans.items()}
    assert text["four"] > 3.5 * text["one"] and len(plans["one"].parts) >= 4
    assert peaks[1] < 1.25 * peaks[0] + 16 * 2**20, (
        f"peak {peaks[1] / 2**20:.0f} MiB for four quarters, {peaks[0] / 2**20:.0f} for one")


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_a_table_kept_in_host_memory_is_pandas_and_the_cpus_table(dataset, layout):
    plan = files.plan(dataset.directory_of(layout), partition_size="1MiB")
    cpu = etl.run(plan, device="cpu")
    host = etl.run(plan, device="gpu", into="host")
    parts = dask.compute(*host.frame.to_delayed())
    assert len(parts) > 1 and all(type(part) is pd.DataFrame for part in parts)
    pd.testing.assert_frame_equal(pd.concat(parts).reset_index(drop=True),
                                  cpu.frame.compute().reset_index(drop=True), check_exact=True)


def _jobs(plan, workers: int):
    from dask_gpu_interop import cluster_client
    from examples.mortgage import job

    with cluster_client(device="gpu", n_workers=workers, processes=True) as (client, where):
        assert where == "gpu"
        return {place: job.run(client, "gpu", plan, rounds=20, training_data=place)
                for place in ("device", "host")}


@pytest.mark.slow
def test_training_from_xgboosts_external_memory_scores_as_from_the_device(dataset):
    """XGBoost's external-memory matrix (its pages in host memory, asked for) against its
    in-core matrix on the GPU: the same rows, about the same test AUC."""
    plan = files.plan(dataset.directory_of("classic"), partition_size="1MiB")
    jobs = _jobs(plan, 1)
    assert jobs["host"].placement.external and jobs["device"].placement.where == "device"
    assert jobs["host"].training.matrix == "external"
    assert jobs["device"].training.matrix == "in-core"
    assert "training data: XGBoost's matrix in host memory (host): asked for" in (
        "\n".join(jobs["host"].lines()))
    assert jobs["host"].training.train_rows == jobs["device"].training.train_rows
    assert jobs["host"].training.auc > 0.75
    assert abs(jobs["host"].training.auc - jobs["device"].training.auc) < 0.01


@pytest.mark.slow
@pytest.mark.multi_gpu
def test_training_from_external_memory_on_two_gpus_scores_as_from_the_device(dataset):
    plan = files.plan(dataset.directory_of("classic"), partition_size="1MiB")
    jobs = _jobs(plan, 2)
    assert jobs["host"].workers == 2
    assert jobs["host"].training.train_rows == jobs["device"].training.train_rows
    assert abs(jobs["host"].training.auc - jobs["device"].training.auc) < 0.01


def test_the_sample_directory_on_gpus():
    gpu = etl.run(files.plan(SAMPLE), device="gpu")
    assert gpu.rows == 10_000


@pytest.mark.parametrize("how", ["zip", "gz"])
def test_compressed_files_on_gpus_give_the_plain_files_table(tmp_path, monkeypatch, how):
    """A zip archive (as Fannie Mae ships a quarter) or gzip'd files, both layouts, read in
    several decompressed blocks: the same table as the plain files on the CPUs."""
    import gzip
    import shutil
    import zipfile

    monkeypatch.setattr(read, "CHUNK", 300_000)
    cpu = etl.run(files.plan(perf=SAMPLE_PERF, acq=SAMPLE_ACQ), device="cpu")
    current = to_current_layout(SAMPLE_PERF, SAMPLE_ACQ, tmp_path / "2007Q3.csv")
    for layout, sources in (("classic", [SAMPLE_PERF, SAMPLE_ACQ]), ("current", [current])):
        data = tmp_path / layout
        data.mkdir()
        if how == "zip":
            with zipfile.ZipFile(data / "2007Q3.zip", "w", zipfile.ZIP_DEFLATED) as archive:
                for source in sources:
                    archive.write(source, os.path.basename(source))
        else:
            for source in sources:
                with open(source, "rb") as f, gzip.open(data / f"{os.path.basename(source)}.gz",
                                                         "wb") as out:
                    shutil.copyfileobj(f, out)
        plan = files.plan(str(data))
        assert all(piece.compressed for part in plan.parts for piece in part.pieces)
        _same_table(cpu, etl.run(plan, device="gpu"))


def test_a_fresh_machine_s_first_etl_compiles_no_kernel(tmp_path):
    """The ETL's GPU steps are libcudf's precompiled operations: on a fresh machine (an empty
    kernel cache) the etl command compiles nothing, where CuPy would have compiled a kernel
    per operation and dtype. A CuPy kernel compiled with the same environment lands in the
    cache, so an empty cache means no compile, not a cache unused."""
    cache = tmp_path / "kernels"
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache), "CUPY_CACHE_SAVE_CUDA_SOURCE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "examples.mortgage", "etl", "--device", "gpu", "--data", SAMPLE,
         "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not list(cache.glob("**/*.*")), sorted(p.name for p in cache.glob("**/*.*"))
    control = subprocess.run(
        [sys.executable, "-c", "import cupy; (cupy.arange(5, dtype='int16') * 3).get()"],
        capture_output=True, text=True, env=env, timeout=300)
    assert control.returncode == 0, control.stderr
    assert list(cache.glob("**/*.cu"))

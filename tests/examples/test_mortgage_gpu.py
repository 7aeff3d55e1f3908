"""The mortgage pipeline on GPUs: cuDF gives pandas' table, bad rows are caught the same way,
training runs on the device, and one chunk's ETL stays within a few times its size."""

from __future__ import annotations

import importlib.util
import os
import re

import dask
import numpy as np
import pandas as pd
import pytest

from dask_gpu_interop import device
from examples.mortgage import chunk_bytes, etl, read, schema
from examples.mortgage import generate as gen

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
    spec = gen.Spec(2006, 2007, loans_per_quarter=300, loans_per_part=120, seed=7)
    gen.generate(directory, spec)
    return etl.find_dataset(directory)


def _both(perf, acq, names=None, **kwargs):
    cpu = etl.run(perf, acq, names, device="cpu", **kwargs)
    gpu = etl.run(perf, acq, names, device="gpu", **kwargs)
    return cpu, gpu


def _host(frame):
    return frame.compute().to_pandas().reset_index(drop=True)


def _same_table(cpu, gpu):
    want = cpu.frame.compute().reset_index(drop=True)
    got = _host(gpu.frame)
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_series_equal(got.dtypes, want.dtypes)
    # both readers give the correctly rounded double of every decimal (number_fields)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for name in (schema.LABEL, *[c for c in want.columns if want[c].dtype.kind in "iu"]):
        assert got[name].tolist() == want[name].tolist(), name
    assert (gpu.rows, gpu.bad_count) == (cpu.rows, cpu.bad_count)


@pytest.mark.parametrize("partition_size", ["256MiB", "200KiB"])
def test_cudf_and_pandas_give_the_same_feature_table(dataset, partition_size):
    cpu, gpu = _both(*dataset, partition_size=partition_size)
    _same_table(cpu, gpu)
    assert gpu.frame.npartitions == len(gpu.quarters)


def test_cudf_and_pandas_give_the_same_intermediate_table(dataset):
    cpu, gpu = _both(*dataset, intermediate=True)
    want = cpu.frame.compute().reset_index(drop=True)
    got = _host(gpu.frame)
    for name in ("loan_id", "monthly_reporting_period", *schema.EVER, schema.LABEL):
        assert got[name].tolist() == want[name].tolist(), name
    for name in schema.FIRST_DELINQUENCY:
        np.testing.assert_array_equal(got[name].to_numpy(float), want[name].to_numpy(float))


@pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="the real sample is absent")
def test_real_sample_on_both_backends():
    cpu, gpu = _both(SAMPLE_PERF, SAMPLE_ACQ)
    _same_table(cpu, gpu)
    assert gpu.rows == 10_000


@pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="the real sample is absent")
@pytest.mark.parametrize("kind, spoil, reason", [
    ("too many fields", lambda f: f + ["x"], "expected 31 fields, found 32"),
    ("too few fields", lambda f: f[:-1], "expected 31 fields, found 30"),
    ("bad number", lambda f: f[:4] + ["12x.5"] + f[5:], "current_actual_upb is not a number"),
    ("bad integer id", lambda f: ["10x"] + f[1:], "loan_id is not an integer"),
    ("bad date", lambda f: f[:1] + ["2007-01-01"] + f[2:], "monthly_reporting_period is not"),
])
def test_bad_rows_are_caught_on_the_gpu_too(tmp_path, kind, spoil, reason):
    """cuDF reads an unparsable number as null instead of raising: the check must see it."""
    with open(SAMPLE_PERF) as f:
        rows = [line.rstrip("\n").split("|") for line in f][:300]
    rows[122] = spoil(rows[122])
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_text("\n".join("|".join(r) for r in rows) + "\n")
    with pytest.raises(read.BadRowsError, match=re.escape(f"{path}:123: {reason}")):
        etl.run(str(path), SAMPLE_ACQ, device="gpu")
    cpu, gpu = _both(str(path), SAMPLE_ACQ, bad_rows="skip")
    assert gpu.bad_count == 1 and gpu.rows == 299
    _same_table(cpu, gpu)


@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    """A quarter's performance file of about 100 MB: big enough that fixed costs do not
    decide the ratio of a chunk's peak device memory to its size."""
    directory = str(tmp_path_factory.mktemp("mortgage-medium"))
    spec = gen.Spec(2007, 2007, loans_per_quarter=30000, loans_per_part=30000, seed=11)
    with dask.config.set(scheduler="processes"):
        gen.generate(directory, spec)
    return etl.find_dataset(directory)


def test_one_chunk_needs_at_most_a_few_times_its_size_on_the_device(medium):
    """Peak device bytes of the whole ETL of one chunk (read, features, join, feature table),
    the result included, from RMM's statistics. Issue 4 asks for about 3x; 3.07x is measured
    on a 0.9 GiB chunk with the reader's number kernel (benchmarks/results/
    mortgage-stages-gpu-dense-1xH200.md), 2.9-3.1x across chunk sizes with the reader before it
    (mortgage-stages-gpu-dense-sizes-1xH200.md), down from 15x and then 3.9x: this guards
    against going back."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    perf, acq, names = medium
    plan = etl.plan(perf, acq, names)
    chunk = max(plan.chunks, key=lambda c: os.path.getsize(c.path))
    acq_frame = etl.load_acquisitions(plan.acquisitions[plan.key(chunk)], "gpu", "error",
                                      plan.names)
    previous = rmm.mr.get_current_device_resource()
    cupy.cuda.set_allocator(rmm_cupy_allocator)
    rmm.statistics.enable_statistics()
    try:
        rmm.statistics.push_statistics()
        etl.process_chunk(chunk, acq_frame, "gpu", "error", plan.names)
        peak = rmm.statistics.pop_statistics().peak_bytes
    finally:
        rmm.mr.set_current_device_resource(previous)
        cupy.cuda.set_allocator(None)
    size = os.path.getsize(chunk.path)
    assert size > 60e6
    assert peak < 3.5 * size, f"peak {peak / size:.2f}x the chunk ({size} bytes)"


@pytest.mark.slow
def test_training_on_gpu_workers(dataset):
    from dask_gpu_interop.cluster import cluster_client
    from examples.mortgage import job

    perf, acq, names = dataset
    with cluster_client(device="gpu", n_workers=1) as (client, where):
        assert where == "gpu"
        result = job.run(client, "gpu", perf, acq, names, rounds=20)
    assert result.training.auc > 0.75
    text = "\n".join(result.lines())
    assert "device: gpu" in text and "pool" in text


@pytest.mark.slow
def test_the_default_command_on_gpus():
    from click.testing import CliRunner

    from examples.mortgage.cli import mortgage as main

    result = CliRunner().invoke(main, ["--device", "gpu", "--years", "2007",
                                       "--loans-per-quarter", "300", "--rounds", "10"])
    assert result.exit_code == 0, result.output
    assert "device=gpu" in result.output and "test AUC" in result.output


def _random_lines(seed=5, size=200_000):
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"|||||ab1.\r\n", dtype=np.uint8)
    return bytes(rng.choice(alphabet, size))


@pytest.mark.parametrize("text", ["random", "sample"])
def test_the_layout_kernel_agrees_with_numpy(text):
    import cupy

    from examples.mortgage import lines

    if text == "sample":
        if not os.path.isdir(SAMPLE):
            pytest.skip("the real sample is absent")
        data = open(SAMPLE_PERF, "rb").read()
    else:
        data = _random_lines()
    raw = np.frombuffer(data, dtype=np.uint8)
    want = lines.of(raw, np, filled=True)
    got = lines.of(cupy.asarray(raw), cupy, filled=True)
    for name in ("starts", "ends", "separators", "filled"):
        np.testing.assert_array_equal(cupy.asnumpy(getattr(got, name)), getattr(want, name), name)
    assert got.rows == want.rows
    assert got.filled_counts(list(range(31))) == want.filled_counts(list(range(31)))


def test_parsing_on_the_device_gives_what_cudf_reads_from_host_bytes(dataset):
    """The reader parses the chunk's device copy; cuDF's own read_csv of the bytes agrees."""
    import cupy

    from examples.mortgage.backend import Backend

    perf = dataset[0][0]
    data = open(perf, "rb").read()
    got = read.parse_device(cupy.asarray(np.frombuffer(data, dtype=np.uint8)), schema.PERFORMANCE)
    want = read.parse_host(data, schema.PERFORMANCE, Backend("gpu"))
    assert list(got.columns) == list(want.columns)
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    pd.testing.assert_frame_equal(got.to_pandas(), want.to_pandas())


def test_the_field_hash_kernel_agrees_with_numpy():
    import cupy

    from examples.mortgage import lines

    if not os.path.isdir(SAMPLE):
        pytest.skip("the real sample is absent")
    raw = np.fromfile(SAMPLE_PERF, dtype=np.uint8)
    layout = lines.of(raw, np)
    device = cupy.asarray(raw)
    starts, ends = cupy.asarray(layout.starts), cupy.asarray(layout.ends)
    for field, col in enumerate(schema.PERFORMANCE.columns):
        if col.kind in (schema.ID, schema.NUMBER):
            continue
        want = lines.field_hashes(raw, layout.starts, layout.ends, field, np)
        got = lines.field_hashes(device, starts, ends, field, cupy)
        np.testing.assert_array_equal(cupy.asnumpy(got), want, col.name)


def test_the_gpu_feature_table_is_the_joined_table_after_the_last_mile(dataset):
    """The one-kernel-per-column table equals cuDF's join + last mile, exactly: loans without
    an acquisition row, rows out of order, nulls and NaN alike."""
    from examples.mortgage import features
    from examples.mortgage.backend import Backend

    gpu = Backend("gpu")
    perf_files, acq_files, _ = dataset
    perf_path = perf_files[0]
    acq_path = next(p for p in acq_files if schema.quarter_of(perf_path) in p)
    perf = features.performance_features(
        read.read_table(read.Source(perf_path), schema.PERFORMANCE, gpu).frame)
    acq = read.read_table(read.Source(acq_path), schema.ACQUISITION, gpu).frame
    acq = acq.iloc[::3]  # two loans in three have no acquisition row
    perf = perf.sample(frac=1.0, random_state=4)
    want = features.last_mile(features.join_acquisition(perf, acq)).to_pandas()
    got = features.feature_table(perf.copy(), acq).to_pandas()
    assert (want["orig_upb"] == schema.MISSING).any()
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("text", ["random", "sample"])
def test_the_field_slots_kernel_agrees_with_numpy(text):
    """Every line's text fields coded in one pass on the device: each line reads back the
    same text through its slot as through NumPy's sorted hashes, and a full table is seen."""
    import cupy

    from examples.mortgage import lines

    if text == "sample":
        if not os.path.isdir(SAMPLE):
            pytest.skip("the real sample is absent")
        raw = np.fromfile(SAMPLE_PERF, dtype=np.uint8)
        fields = [i for i, c in enumerate(schema.PERFORMANCE.columns)
                  if c.kind not in (schema.ID, schema.NUMBER)]
    else:
        rng = np.random.default_rng(9)
        words = np.array([b"", b"01/2007", b"X", b"0", b"12", b"N", b"Y", b"02/2009"])
        rows = rng.integers(0, len(words), (200_000, 6))
        raw = np.frombuffer(b"".join(b"|".join(words[r]) + b"\n" for r in rows), np.uint8)
        fields = [0, 2, 3, 5]
    layout = lines.of(raw, np)
    want = lines.field_slots(raw, layout.starts, layout.ends, fields, np)
    starts, ends = cupy.asarray(layout.starts), cupy.asarray(layout.ends)
    got = lines.field_slots(cupy.asarray(raw), starts, ends, fields, cupy)
    assert not got.full and not want.full
    data = raw.tobytes()

    def texts(found, j, field):
        codes = cupy.asnumpy(found.codes[j]) if hasattr(found.codes, "get") else found.codes[j]
        table = {int(s): data[int(found.starts[j, s]):int(found.ends[j, s])].split(b"|")[field]
                 for s in np.flatnonzero(found.hashes[j])}
        return [table.get(int(c), b"") for c in codes]

    for j, field in enumerate(fields):
        assert texts(got, j, field) == texts(want, j, field), field
        assert set(got.hashes[j][got.hashes[j] != 0]) == set(want.hashes[j][want.hashes[j] != 0])
    np.testing.assert_array_equal(got.blank, want.blank)
    small = lines.field_slots(cupy.asarray(raw), starts, ends, fields, cupy, slots=2)
    assert small.full


def test_numbers_parsed_from_pinned_host_memory_in_parts_equal_the_device_parse(dataset):
    """libcudf reads the numbers straight from the page-locked host copy (the device shares
    its address), a part at a time: the same frame as parsing a device copy at once."""
    import cupy

    perf = max(dataset[0], key=os.path.getsize)
    data = open(perf, "rb").read()
    numeric = [c.name for c in schema.PERFORMANCE.columns if c.kind in (schema.ID, schema.NUMBER)]
    with chunk_bytes.pinned(len(data)) as pinned:
        pinned[:] = np.frombuffer(data, dtype=np.uint8)
        want = read.parse_device(cupy.asarray(pinned), schema.PERFORMANCE, numeric).to_pandas()
        part = -(-len(data) // 5)
        assert len(read.line_cuts(pinned, part)) == 6  # five parts
        got = read.parse_device(pinned, schema.PERFORMANCE, numeric, part_bytes=part)
    pd.testing.assert_frame_equal(got.to_pandas(), want)
    assert len(want) == data.count(b"\n")


_NUMBERS = schema.Table("numbers", (
    schema.Column("id", schema.ID), schema.Column("rate", schema.NUMBER),
    schema.Column("flag", schema.CATEGORY), schema.Column("amount", schema.NUMBER),
))


def _numbers_parsed(text: bytes):
    import cupy

    from examples.mortgage import lines, number_fields

    raw = np.frombuffer(text, dtype=np.uint8)
    layout = lines.of(raw, np)
    return number_fields.parse(cupy.asarray(raw), cupy.asarray(layout.starts),
                               cupy.asarray(layout.ends), _NUMBERS, ["id", "rate", "amount"])


def test_the_number_kernel_gives_pythons_exact_values_and_nulls_for_blanks():
    """Every plain decimal form (signs, leading zeros, a bare point, up to 2**53 units and 22
    decimals) parses to the correctly rounded double Python's float() gives; blank is null."""
    rng = np.random.default_rng(11)
    n = 300_000
    ids = rng.integers(0, 10**18, n)
    forms = ["{:.0f}", "{:.1f}", "{:.2f}", "{:.3f}", "{:.6f}", "{:.9f}", "-{:.2f}", "00{:.4f}"]
    values = rng.lognormal(3, 4, n) % 9e6
    special = ["", ".5", "7.", "-0", "+3.25", "0.000", "9007199254740992", "-.0625",
               "0.0000000000000000000001", "123456789.123456"]
    rate = [forms[k].format(v) for k, v in zip(rng.integers(0, len(forms), n), values,
                                                strict=True)]
    rate[:len(special)] = special
    amount = ["" if k % 7 else f"{v:.2f}" for k, v in enumerate(values[::-1])]
    text = "".join(f"{i}|{r}|Y|{a}\n" for i, r, a in zip(ids.tolist(), rate, amount, strict=True))
    got = _numbers_parsed(text.encode()).to_pandas()
    assert got["id"].dtype == np.int64 and got["id"].tolist() == ids.tolist()
    for name, texts in (("rate", rate), ("amount", amount)):
        want = np.array([float(t) if t else np.nan for t in texts])
        assert got[name].isna().tolist() == np.isnan(want).tolist(), name
        np.testing.assert_array_equal(got[name].to_numpy(dtype=float, na_value=np.nan), want,
                                      name)
    assert np.signbit(got["rate"][3])  # "-0"


@pytest.mark.parametrize("number", ["1e5", " 7", "inf", "1.2.3", "12345678901234567890",
                                    "9007199254740993", "0.00000000000000000000001", "-", "."])
def test_the_number_kernel_leaves_other_forms_to_libcudf(number):
    assert _numbers_parsed(f"1|2.5|Y|3\n2|{number}|N|4\n".encode()) is None


def test_a_chunk_with_exponents_is_parsed_by_libcudf_and_reads_as_on_the_cpu(dataset, tmp_path):
    """A number form the kernel leaves to libcudf: the chunk still reads as pandas reads it."""
    from examples.mortgage.backend import Backend

    perf = dataset[0][0]
    lines_ = open(perf, "rb").read().splitlines(keepends=True)
    fields = lines_[1].split(b"|")
    fields[3] = b"%.3e" % float(fields[3])  # interest rate, as 6.125e+00
    lines_[1] = b"|".join(fields)
    path = tmp_path / "Performance_2006Q1.txt"
    path.write_bytes(b"".join(lines_))
    want = read.read_table(read.Source(str(path)), schema.PERFORMANCE, Backend("cpu")).frame
    got = read.read_table(read.Source(str(path)), schema.PERFORMANCE, Backend("gpu")).frame
    pd.testing.assert_frame_equal(got.to_pandas(), want, check_dtype=False)


def test_one_kernel_cleans_a_group_of_columns_as_numpy_does_nulls_nan_and_offsets():
    """Each column type the ETL makes, with nulls and NaN, whole and sliced (a column that
    starts at an offset in its buffer): the group kernel writes what the host path writes."""
    import cudf
    import cupy

    from examples.mortgage import features

    rng = np.random.default_rng(3)
    n = 5_000
    columns = []
    for dtype in ("float64", "float32", "int64", "int32", "int16", "int8"):
        values = rng.integers(-100, 100, n).astype(dtype)
        if dtype.startswith("float"):
            values[rng.random(n) < 0.1] = np.nan
        series = cudf.Series(values, nan_as_null=False).mask(cudf.Series(rng.random(n) < 0.2))
        assert series.null_count > 0
        if dtype.startswith("float"):  # NaN kept apart from the nulls
            assert series.nans_to_nulls().null_count > series.null_count
        columns.append(series)
    for sliced in (False, True):
        group = [c.iloc[37:] if sliced else c for c in columns]
        assert not sliced or group[0].to_pylibcudf()[0].offset() == 37
        got = [cupy.empty(len(group[0]), dtype=cupy.float32) for _ in group]
        features._clean_columns(group, got)
        for column, out in zip(group, got, strict=True):
            want = np.empty(len(column), dtype=np.float32)
            features._clean_columns([column.to_pandas(nullable=True)], [want])
            np.testing.assert_array_equal(cupy.asnumpy(out), want, str(column.dtype))
            assert (want == schema.MISSING).any()
    with pytest.raises(TypeError, match="flag: a bool column is not a feature type"):
        features._clean_columns([cudf.Series([True, False], name="flag")],
                                [cupy.empty(2, dtype=cupy.float32)])


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 16_383, 16_384, 16_385, 3_000_017])
def test_the_newline_kernel_finds_what_numpy_finds(size):
    """Every newline, in order, whatever the size against the kernel's 64-byte pieces and
    16 KiB blocks; bytes next to a newline's value (0x0b, 0x8a, 0x09) are not newlines; a view
    that starts off a 16-byte boundary takes CuPy's way."""
    import cupy

    from examples.mortgage import lines

    rng = np.random.default_rng(size)
    raw = rng.choice(np.array([0x0A, 0x0B, 0x8A, 0x09, 0x00, ord("7")], dtype=np.uint8), size,
                     p=[0.05, 0.1, 0.1, 0.1, 0.05, 0.6])
    want = np.flatnonzero(raw == 0x0A)
    got = lines.newlines(cupy.asarray(raw), cupy)
    assert got.dtype == cupy.int64
    np.testing.assert_array_equal(cupy.asnumpy(got), want)
    shifted = cupy.asarray(raw)[3:]
    np.testing.assert_array_equal(cupy.asnumpy(lines.newlines(shifted, cupy)),
                                  np.flatnonzero(raw[3:] == 0x0A))


def test_a_chunk_copied_to_the_device_block_by_block_is_the_file(dataset, monkeypatch):
    """The reader's device copy, queued block by block from the reading threads, is the
    chunk's bytes; the table read that way is the one read with a copy after the read, and
    the page-locked buffers are lent again, not pinned anew."""
    import cupy

    from examples.mortgage.backend import Backend

    monkeypatch.setattr(chunk_bytes, "READ_BLOCK", 4096)
    perf = max(dataset[0], key=os.path.getsize)
    source = read.Source(perf, 1000, os.path.getsize(perf) - 1000)
    upload = chunk_bytes.DeviceUpload()
    data, offset = source.read(upload.allocate, upload.done)
    device = upload.take()
    assert upload.take() is None  # the caller holds the only reference
    assert len(data) > 10 * 4096
    with open(perf, "rb") as f:
        f.seek(offset)
        want = f.read(len(data))
    assert cupy.asnumpy(device).tobytes() == want
    chunk_bytes.PINNED.give(data)
    pinned = chunk_bytes.PINNED.allocated
    got = read.read_table(source, schema.PERFORMANCE, Backend("gpu")).frame.to_pandas()
    assert chunk_bytes.PINNED.allocated == pinned
    monkeypatch.setattr(chunk_bytes, "fetch", lambda source, gpu: chunk_bytes.Chunk(
        *source.read(), None, None))  # NumPy bytes, copied to the device after the read
    plain = read.read_table(source, schema.PERFORMANCE, Backend("gpu")).frame.to_pandas()
    pd.testing.assert_frame_equal(got, plain)


def test_the_label_kernel_gives_the_label_and_loan_places_of_the_scan():
    """One thread per row looking twelve months ahead gives the label and each row's loan
    place that the reverse running minimum gives on the host: gaps in the months, a loan's
    last months, zero and missing balances, statuses around the rule's 3, one-row loans."""
    import cudf
    import cupy

    from examples.mortgage import features

    rng = np.random.default_rng(5)
    loans, rows = [], []
    for loan in range(3_000):
        months = np.cumsum(rng.integers(1, 4, rng.integers(1, 40)))  # gaps of 0-2 months
        for m in months:
            loans.append(10_000 + 7 * loan)
            rows.append((2005 * 12 + int(m), int(rng.choice([-1, 0, 1, 3, 4, 6], p=[
                0.05, 0.7, 0.1, 0.05, 0.05, 0.05])), rng.choice([np.nan, 0.0, 1.5],
                                                                 p=[0.1, 0.02, 0.88])))
    host = pd.DataFrame({"loan_id": np.array(loans, dtype="int64"),
                         "monthly_reporting_period": np.array([r[0] for r in rows], "int32"),
                         "current_loan_delinquency_status": np.array([r[1] for r in rows],
                                                                     "int32"),
                         "current_actual_upb": np.array([r[2] for r in rows], "float64")})
    want_label, want_run = features._label(host)
    device = cudf.DataFrame(host).reset_index(drop=True)
    device["current_actual_upb"] = device["current_actual_upb"].mask(
        cudf.Series(host["current_actual_upb"].isna().to_numpy()))  # missing as null, as read
    label, run = features._label_on_device(device)
    np.testing.assert_array_equal(cupy.asnumpy(label), want_label)
    np.testing.assert_array_equal(cupy.asnumpy(run), want_run)
    assert 0.05 < want_label.mean() < 0.95

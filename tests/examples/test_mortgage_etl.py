"""The mortgage ETL on CPUs, checked against a slow, obviously correct per-loan reference."""

from __future__ import annotations

import glob
import os
import shutil
from itertools import pairwise

import dask
import numpy as np
import pandas as pd
import pytest
from dask.utils import parse_bytes

from examples.mortgage import chunk_bytes, etl, features, read, schema
from examples.mortgage import generate as gen
from examples.mortgage.backend import Backend

from .mortgage_sample import SAMPLE, SAMPLE_ACQ, SAMPLE_PERF

needs_sample = pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="the real sample is absent")


@pytest.fixture(autouse=True, scope="module")
def local_threads():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small generated dataset of a crisis vintage: many delinquencies, cures, mods, ends."""
    directory = str(tmp_path_factory.mktemp("mortgage"))
    spec = gen.Spec(2007, 2007, loans_per_quarter=60, loans_per_part=25, end_year=2010, seed=3)
    with dask.config.set(scheduler="synchronous"):
        gen.generate(directory, spec)
    return directory


# ---------------------------------------------------------------------------------------------
# The reference: plain Python over the text, one loan at a time


def raw_lines(paths):
    rows = []
    for path in sorted(paths, key=etl._natural):
        with open(path) as f:
            rows += [line.rstrip("\n").split("|") for line in f if line.strip()]
    return rows


def month(text):  # MM/DD/YYYY or MM/YYYY
    return int(text[-4:]) * 12 + int(text[:2]) - 1


def status_of(text):
    return -1 if text in ("", "X", "XX") else int(text)


def reference_features(perf_rows):
    """ever_*, delinquency_* and the label of every row, loan by loan."""
    loans = {}
    for n, row in enumerate(perf_rows):
        upb = float(row[4]) if row[4] else None
        loans.setdefault(row[0], []).append((n, month(row[1]), status_of(row[10]), upb))
    out = [None] * len(perf_rows)
    for history in loans.values():
        worst = max(s for _, _, s, _ in history)
        first = {k: min((m for _, m, s, _ in history if s >= t), default=None)
                 for k, t in schema.THRESHOLDS.items()}
        for n, t, _, _ in history:
            label = any(t <= m <= t + 11 and (s > 3 or u == 0.0) for _, m, s, u in history)
            out[n] = dict(
                ever_30=int(worst >= 1), ever_90=int(worst >= 3), ever_180=int(worst >= 6),
                delinquency_30=first["30"], delinquency_90=first["90"],
                delinquency_180=first["180"], delinquency_12=int(label),
            )
    return out


def reference_table(perf_rows, acq_rows, names):
    """The 45 features and the label, field by field from the text."""
    acq = {row[0]: row for row in acq_rows}
    feats = reference_features(perf_rows)
    perf_cols, acq_cols = schema.PERFORMANCE.columns, schema.ACQUISITION.columns
    records = []
    for row, f in zip(perf_rows, feats, strict=True):
        fields = dict(zip([c.name for c in perf_cols], row, strict=True))
        other = acq.get(row[0])
        if other is not None:
            fields.update(zip([c.name for c in acq_cols[1:]], other[1:], strict=True))
        kinds = {c.name: c.kind for c in perf_cols + acq_cols}
        record = {}
        for name in schema.FEATURES:
            text = fields.get(name, "")
            if kinds[name] == schema.CATEGORY:
                record[name] = schema.category_code(name, text or None, names)
            elif kinds[name] == schema.STATUS:
                record[name] = status_of(text)
            else:
                record[name] = float(text) if text else -1.0
        record[schema.LABEL] = f["delinquency_12"]
        records.append(record)
    return pd.DataFrame(records).astype({n: "float32" for n in schema.FEATURES}).astype(
        {schema.LABEL: "int32"})


# ---------------------------------------------------------------------------------------------
# Features and label


@pytest.mark.parametrize("partition_size", ["64KiB", "256MiB"])
def test_features_and_label_match_the_per_loan_reference(dataset, partition_size):
    perf_files = glob.glob(os.path.join(dataset, "perf", "*"))
    result = etl.run(os.path.join(dataset, "perf"), os.path.join(dataset, "acq"),
                     os.path.join(dataset, "names.csv"), partition_size=partition_size,
                     intermediate=True)
    got = result.frame.compute().reset_index(drop=True)
    rows = raw_lines(perf_files)
    want = reference_features(rows)
    assert len(got) == len(rows) == result.rows
    assert got["loan_id"].tolist() == [int(r[0]) for r in rows]  # one row per line, in order
    for name in (*schema.EVER, schema.LABEL):
        assert got[name].tolist() == [w[name] for w in want], name
    for name in schema.FIRST_DELINQUENCY:
        expected = [np.nan if w[name] is None else w[name] for w in want]
        np.testing.assert_array_equal(got[name].to_numpy(dtype=float), expected, err_msg=name)
    # the data exercise every branch of the rule
    assert 0 < got[schema.LABEL].mean() < 0.5
    assert got["ever_180"].sum() > 0 and (got["current_loan_delinquency_status"] < 0).any()
    if partition_size == "64KiB":
        assert result.partitions > len(perf_files)  # files were cut, at loan boundaries


def test_feature_table_matches_the_raw_fields(dataset):
    names = read.read_names(os.path.join(dataset, "names.csv"))
    result = etl.run(os.path.join(dataset, "perf"), os.path.join(dataset, "acq"),
                     os.path.join(dataset, "names.csv"))
    got = result.frame.compute().reset_index(drop=True)
    want = reference_table(raw_lines(glob.glob(os.path.join(dataset, "perf", "*"))),
                           raw_lines(glob.glob(os.path.join(dataset, "acq", "*"))), names)
    assert list(got.columns) == [*schema.FEATURES, schema.LABEL]
    assert len(schema.FEATURES) == 45
    assert (got.dtypes[list(schema.FEATURES)] == "float32").all()
    assert got[schema.LABEL].dtype == "int32"
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # codes are fixed vocabularies, the same in every partition
    states = got["property_state"].astype(int)
    assert states.between(0, len(schema.STATES) - 1).all()
    assert (got["servicer"] >= -1).all() and (got["servicer"] != len(schema.vocabulary(
        "servicer", names))).all()


def _perf_frame(rows):
    """A performance frame (as read) from (loan, month, status, upb) tuples."""
    cols = schema.PERFORMANCE.columns
    blank = {c.name: np.nan if read.DTYPES[c.kind].startswith("float") else -1 for c in cols}
    names = ["loan_id", "monthly_reporting_period", "current_loan_delinquency_status",
             "current_actual_upb"]
    frame = pd.DataFrame([{**blank, **dict(zip(names, row, strict=True))} for row in rows])
    return frame[[c.name for c in cols]].astype({c.name: read.DTYPES[c.kind] for c in cols})


def test_label_rule_edge_cases():
    t = 2010 * 12
    rows = [
        # loan 1: a 4-months-behind row 11 months ahead counts, 12 months ahead does not
        (1, t, 0, 100.0), (1, t + 1, 0, 100.0), (1, t + 12, 4, 100.0), (1, t + 13, 3, 100.0),
        # loan 2: a gap in the months; a zero balance counts; status 3 does not
        (2, t, 3, 50.0), (2, t + 5, 0, 0.0), (2, t + 30, 3, np.nan),
        # loan 3: missing status and balance count for nothing; its first row is not dropped
        (3, t + 40, -1, np.nan), (3, t + 41, 5, 10.0),
    ]
    got = features.performance_features(_perf_frame(rows))
    assert got[schema.LABEL].tolist() == [0, 1, 1, 0, 1, 1, 0, 1, 1]
    assert got["ever_90"].tolist() == [1] * 4 + [1] * 3 + [1] * 2
    assert got["ever_180"].tolist() == [0] * 4 + [0] * 3 + [0] * 2
    assert got["delinquency_30"].tolist() == [t + 12] * 4 + [t] * 3 + [t + 41] * 2


def test_label_does_not_depend_on_row_order():
    t = 2012 * 12
    rows = [(7, t + m, 4 if m == 20 else 0, 1.0) for m in range(30)]
    rows += [(5, t + m, 0, 0.0 if m == 3 else 1.0) for m in range(6)]
    rows.append((5, t + 3, 0, 2.0))  # the same month twice: either row may be the bad one
    in_order = features.performance_features(_perf_frame(rows))
    shuffled = np.random.default_rng(0).permutation(len(rows))
    mixed = features.performance_features(_perf_frame([rows[i] for i in shuffled]))
    assert mixed[schema.LABEL].tolist() == in_order[schema.LABEL].iloc[shuffled].tolist()
    assert in_order[schema.LABEL].tolist()[:30] == [0] * 9 + [1] * 12 + [0] * 9
    assert in_order[schema.LABEL].tolist()[30:] == [1] * 4 + [0] * 2 + [1]


def test_feature_table_is_the_joined_table_after_the_last_mile(dataset):
    """The column-at-a-time table equals the plain one (join, then last mile), also for loans
    without an acquisition row and for rows out of order."""
    cpu = Backend("cpu")
    perf_path = sorted(glob.glob(os.path.join(dataset, "perf", "*")))[0]
    acq_path = glob.glob(os.path.join(dataset, "acq", f"*{schema.quarter_of(perf_path)}*"))[0]
    perf = features.performance_features(
        read.read_table(read.Source(perf_path), schema.PERFORMANCE, cpu).frame)
    acq = read.read_table(read.Source(acq_path), schema.ACQUISITION, cpu).frame
    acq = acq.iloc[::3]  # two loans in three have no acquisition row
    perf = perf.sample(frac=1.0, random_state=4)
    want = features.last_mile(features.join_acquisition(perf, acq))
    got = features.feature_table(perf.copy(), acq)
    assert (want["orig_upb"] == schema.MISSING).any()
    pd.testing.assert_frame_equal(got, want, check_exact=True)


# ---------------------------------------------------------------------------------------------
# The real files


@needs_sample
def test_real_sample_one_row_per_performance_row_and_the_rule_s_label_rate():
    result = etl.run(SAMPLE_PERF, SAMPLE_ACQ)
    got = result.frame.compute().reset_index(drop=True)
    rows = raw_lines([SAMPLE_PERF])
    assert len(rows) == 10_000 and len(got) == 10_000 and result.rows == 10_000
    want = reference_features(rows)
    rate = np.mean([w["delinquency_12"] for w in want])
    assert got[schema.LABEL].mean() == pytest.approx(rate, abs=0)
    assert 0.01 < rate < 0.5
    assert got[schema.LABEL].tolist() == [w["delinquency_12"] for w in want]
    # the first data row of the file is in the output (the notebook dropped it)
    first = rows[0]
    assert got.loc[0, "interest_rate"] == np.float32(first[3])
    assert got.loc[0, "loan_age"] == float(first[5]) == 0.0
    assert got.loc[0, "servicer"] == schema.category_code("servicer", first[2])
    pd.testing.assert_frame_equal(got, reference_table(rows, raw_lines([SAMPLE_ACQ]), None),
                                  check_exact=True)


@needs_sample
def test_sample_directory_layout_is_found():
    perf, acq, names = etl.find_dataset(SAMPLE)
    assert [os.path.basename(p) for p in perf] == ["Performance_2007Q3.txt_0"]
    assert [os.path.basename(p) for p in acq] == ["Acquisition_2007Q3.txt"]
    assert names is None


# ---------------------------------------------------------------------------------------------
# Chunks at loan boundaries


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


@pytest.mark.parametrize("ending", ["\n", ""])
def test_loan_boundary(tmp_path, ending):
    lines = ["1|a", "1|b", "2|c", "3|d", "3|e", "3|f", "4|g"]
    path = _write(tmp_path / "p", "\n".join(lines) + ending)
    size = os.path.getsize(path)
    starts = np.cumsum([0] + [len(x) + 1 for x in lines])[:-1]
    new_loan = [s for s, line, before in zip(starts, lines, [None] + lines[:-1], strict=True)
                if before is None or line[0] != before[0]]
    with open(path, "rb") as f:
        for offset in range(size + 2):
            want = next((s for s in new_loan if s >= offset), size)
            assert read.loan_boundary(f, offset, size) == min(want, size), offset


def test_chunks_hold_whole_loans_and_cover_every_line(dataset):
    path = sorted(glob.glob(os.path.join(dataset, "perf", "*")))[0]
    size = os.path.getsize(path)
    seen = []
    for pieces in (1, 3, 7, 40):
        bounds = [round(i * size / pieces) for i in range(pieces + 1)]
        chunks = [read.Source(path, a, b).read()[0].tobytes() for a, b in pairwise(bounds)]
        assert b"".join(chunks) == open(path, "rb").read()
        loans = [{line.split(b"|")[0] for line in c.splitlines()} for c in chunks]
        for i, a in enumerate(loans):
            for b in loans[i + 1:]:
                assert not a & b
        seen.append(pieces)
    assert seen


@needs_sample
def test_text_columns_coded_from_field_hashes_equal_the_parsed_strings():
    """The GPU reader's coding of text columns (field hashes, one text per distinct hash),
    run with NumPy, against pandas' parsed strings converted the plain way."""
    from examples.mortgage import lines

    cpu = Backend("cpu")
    raw = np.fromfile(SAMPLE_PERF, dtype=np.uint8)
    layout = lines.of(raw, np)
    parsed = read.parse_host(raw, schema.PERFORMANCE, cpu)
    text = [c for c in schema.PERFORMANCE.columns if c.kind not in (schema.ID, schema.NUMBER)]
    want = read._converted(parsed, text, cpu, None, {})
    for col in text:
        got = read._coded(raw, raw, layout.starts, layout.ends, schema.PERFORMANCE, col, np,
                          None, {})
        np.testing.assert_array_equal(got, want[col.name], col.name)
    every = _coded_all(raw, layout, text)
    assert list(every) == [c.name for c in text]
    for col in text:
        np.testing.assert_array_equal(every[col.name], want[col.name], col.name)


def _coded_all(raw, layout, text):
    """The GPU reader's text coding, both steps, run with NumPy."""
    codes = read._text_codes(raw, raw, layout.starts, layout.ends, schema.PERFORMANCE, text, np,
                             None, {})
    return read._text_columns(codes, raw, schema.PERFORMANCE, text, np, None, {})


@needs_sample
def test_text_coding_falls_back_to_sorting_when_a_field_has_too_many_texts(monkeypatch):
    from examples.mortgage import lines

    raw = np.fromfile(SAMPLE_PERF, dtype=np.uint8)
    layout = lines.of(raw, np)
    text = [c for c in schema.PERFORMANCE.columns if c.kind not in (schema.ID, schema.NUMBER)]
    want = _coded_all(raw, layout, text)
    monkeypatch.setattr(lines, "SLOTS", 2)  # the reporting periods alone need more
    calls = []
    sort_each = read._coded
    monkeypatch.setattr(read, "_coded", lambda *a: calls.append(a[5].name) or sort_each(*a))
    got = _coded_all(raw, layout, text)
    assert calls == [c.name for c in text]
    for col in text:
        np.testing.assert_array_equal(got[col.name], want[col.name], col.name)


def test_number_fields_take_number_columns_in_table_order_and_size_libcudf_masks():
    """The GPU number parser's arguments, checked on the host before any kernel runs; its null
    masks are libcudf's size: a bit per row, padded to 64 bytes."""
    from examples.mortgage import number_fields

    numeric = schema.PERFORMANCE.of_kind(schema.ID, schema.NUMBER)
    fields, integers = number_fields.fields_of(schema.PERFORMANCE, numeric)
    assert fields == [schema.PERFORMANCE.names.index(n) for n in numeric]
    assert integers == [1] + [0] * (len(numeric) - 1)  # loan_id alone is an integer
    with pytest.raises(ValueError, match="servicer.*not number columns"):
        number_fields.fields_of(schema.PERFORMANCE, ["loan_id", "servicer"])
    with pytest.raises(ValueError, match="table's order"):
        number_fields.fields_of(schema.PERFORMANCE, ["current_actual_upb", "loan_id"])
    many = schema.Table("wide", tuple(schema.Column(f"n{i}", schema.NUMBER) for i in range(33)))
    with pytest.raises(ValueError, match="at most 32"):
        number_fields.fields_of(many, many.names)
    assert [number_fields.mask_bytes(n) for n in (0, 1, 512, 513, 10_000)] == [0, 64, 64, 128,
                                                                                1280]


def test_line_cuts_fall_on_line_starts_and_cover_the_chunk():
    data = b"".join(b"%d|%s\n" % (i, b"x" * (i % 17)) for i in range(500))
    raw = np.frombuffer(data, dtype=np.uint8)
    assert read.line_cuts(raw, None) == [0, len(data)]
    assert read.line_cuts(raw, len(data)) == [0, len(data)]
    cuts = read.line_cuts(raw, 1000)
    assert cuts[0] == 0 and cuts[-1] == len(data) and cuts == sorted(set(cuts))
    assert all(data[c - 1:c] == b"\n" for c in cuts[1:])
    assert len(cuts) - 1 == -(-len(data) // 1000)
    assert max(b - a for a, b in pairwise(cuts)) < 1000 + 30
    assert read.parse_part_bytes(10) == read.PARSE_PART_MIN
    assert read.parse_part_bytes(1 << 30) == (1 << 30) // read.PARSE_PARTS


@needs_sample
def test_the_lenient_parser_check_passes_clean_data(dataset, monkeypatch):
    """The null-versus-filled check that guards cuDF's reader finds nothing in clean data
    (run here with pandas), so a clean chunk never takes the slow path on GPUs."""
    strict = {}
    for lenient in (False, True):
        monkeypatch.setattr(read, "strict_parser", lambda backend, lenient=lenient: not lenient)
        monkeypatch.setattr(read, "_slow", None)  # the slow path must not be needed
        for perf, acq in ((os.path.join(dataset, "perf"), os.path.join(dataset, "acq")),
                          (SAMPLE_PERF, SAMPLE_ACQ)):
            got = etl.run(perf, acq).frame.compute()
            if lenient:
                pd.testing.assert_frame_equal(got, strict[perf])
            strict[perf] = got


# ---------------------------------------------------------------------------------------------
# Bad rows


BAD_LINES = {
    "too many fields": (lambda f: f + ["extra"], "expected 31 fields, found 32"),
    "too few fields": (lambda f: f[:-2], "expected 31 fields, found 29"),
    "bad number": (lambda f: f[:3] + ["6.3x75"] + f[4:], "interest_rate is not a number"),
    "bad date": (lambda f: f[:1] + ["13/01/2007"] + f[2:], "monthly_reporting_period is not"),
    "bad status": (lambda f: f[:10] + ["?"] + f[11:], "current_loan_delinquency_status"),
    "blank loan id": (lambda f: [""] + f[1:], "loan_id is blank"),
}


@pytest.fixture()
def dirty(tmp_path):
    """The sample's first 400 rows with bad lines at known line numbers (1-based)."""
    rows = raw_lines([SAMPLE_PERF])[:400]
    bad_at = {}
    for (spoil, reason), line in zip(BAD_LINES.values(), (1, 57, 150, 151, 260, 400),
                                    strict=True):
        rows[line - 1] = spoil(rows[line - 1])
        bad_at[line] = reason
    path = _write(tmp_path / "Performance_2007Q3.txt_0", "\n".join("|".join(r) for r in rows)
                  + "\n")
    return path, bad_at


@needs_sample
@pytest.mark.parametrize("partition_size", ["256MiB", "9KiB"])
def test_bad_rows_error_names_file_and_line(dirty, partition_size):
    path, bad_at = dirty
    with pytest.raises(read.BadRowsError) as info:
        etl.run(path, SAMPLE_ACQ, partition_size=partition_size)
    message = str(info.value)
    for line, reason in bad_at.items():
        if partition_size == "256MiB":
            assert f"{path}:{line}: {reason}" in message
    assert "bad_rows='warn'" in message
    reported = {row.line: row.reason for row in info.value.rows}
    assert set(reported) <= set(bad_at)
    for line, reason in reported.items():
        assert reason.startswith(bad_at[line])


@needs_sample
@pytest.mark.parametrize("policy", ["warn", "skip"])
@pytest.mark.parametrize("partition_size", ["256MiB", "9KiB"])
def test_bad_rows_warn_or_skip_drop_and_count_them(dirty, policy, partition_size, recwarn):
    path, bad_at = dirty
    result = etl.run(path, SAMPLE_ACQ, bad_rows=policy, partition_size=partition_size)
    assert result.rows == 400 - len(bad_at) == len(result.frame.compute())
    assert result.bad_count == len(bad_at)
    assert {(row.path, row.line) for row in result.bad} == {(path, line) for line in bad_at}
    for row in result.bad:
        assert row.reason.startswith(bad_at[row.line])
    texts = [str(w.message) for w in recwarn.list if "bad row" in str(w.message)]
    if policy == "warn":
        assert texts and all(f"{path}:{line}:" in texts[0] for line in bad_at)
        assert "dropped" in texts[0]
    else:
        assert not texts
    assert f"{len(bad_at)} bad rows dropped" in result.summary()


@needs_sample
@pytest.mark.parametrize("partition_size", ["256MiB", "9KiB"])
def test_bad_acquisition_rows_are_counted_once_whichever_task_loads_them(tmp_path,
                                                                        partition_size):
    """One chunk of the quarter loads its acquisitions in its own task; several share one
    load: either way each bad acquisition row is reported once."""
    rows = raw_lines([SAMPLE_ACQ])
    rows[4] = rows[4][:-1]  # too few fields
    rows[9] = rows[9][:3] + ["7.x"] + rows[9][4:]  # a bad number
    acq = _write(tmp_path / "Acquisition_2007Q3.txt", "\n".join("|".join(r) for r in rows))
    perf = _write(tmp_path / "Performance_2007Q3.txt_0",
                  "\n".join("|".join(r) for r in raw_lines([SAMPLE_PERF])[:400]) + "\n")
    the_plan = etl.plan(perf, acq, partition_size=partition_size)
    chunks, shared = etl._tasks(the_plan, "cpu", "skip", False)
    assert (len(chunks) == 1) == (partition_size == "256MiB")
    assert len(shared) == (0 if len(chunks) == 1 else 1)  # the loads of acquisitions
    result = etl.run(perf, acq, bad_rows="skip", partition_size=partition_size)
    assert result.bad_count == 2
    assert sorted((row.path, row.line) for row in result.bad) == [(acq, 5), (acq, 10)]
    assert result.rows == 400


@needs_sample
def test_unknown_status_is_missing_not_bad(tmp_path):
    rows = raw_lines([SAMPLE_PERF])[:50]
    rows[4][10] = "X"
    rows[5][10] = "XX"
    path = _write(tmp_path / "Performance_2007Q3.txt_0", "\n".join("|".join(r) for r in rows))
    got = etl.run(path, SAMPLE_ACQ).frame.compute()
    assert got["current_loan_delinquency_status"].tolist()[4:6] == [-1, -1]


@needs_sample
def test_duplicate_acquisition_rows_are_bad_rows(tmp_path):
    with open(SAMPLE_ACQ) as f:
        lines = f.readlines()[:300]
    path = _write(tmp_path / "Acquisition_2007Q3.txt", "".join(lines + lines[:1]))
    with pytest.raises(read.BadRowsError, match=f"{path}:301: duplicate loan_id"):
        etl.run(SAMPLE_PERF, path)


def test_non_utf8_and_blank_lines(tmp_path):
    good = "1|01/01/2007" + "|" * 29
    text = (good + "\n\n" + good.replace("1|", "2|", 1) + "\n").encode() + b"\xff|x\n"
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_bytes(text)
    with pytest.raises(read.BadRowsError, match=r":4: not UTF-8 text"):
        read.read_table(read.Source(str(path)), schema.PERFORMANCE, Backend("cpu"))
    result = read.read_table(read.Source(str(path)), schema.PERFORMANCE, Backend("cpu"), "skip")
    assert result.rows == 2 and len(result.bad) == 1


# ---------------------------------------------------------------------------------------------
# Inputs, outputs and errors


def test_meta_matches_the_output(dataset):
    for intermediate in (False, True):
        got = etl.run(os.path.join(dataset, "perf"), os.path.join(dataset, "acq"),
                      intermediate=intermediate).frame.partitions[0].compute()
        pd.testing.assert_series_equal(got.dtypes, etl.meta(intermediate=intermediate).dtypes)


def test_write_parquet_equals_the_persisted_table(dataset, tmp_path):
    args = (os.path.join(dataset, "perf"), os.path.join(dataset, "acq"),
            os.path.join(dataset, "names.csv"))
    out = str(tmp_path / "features.parquet")
    written = etl.write(out, *args, partition_size="100KiB")
    kept = etl.run(*args).frame.compute().reset_index(drop=True)
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, kept)
    assert written.rows == len(kept)
    with pytest.raises(FileExistsError, match="overwrite"):
        etl.write(out, *args)
    etl.write(out, *args, overwrite=True)


def test_missing_inputs_say_what_to_give(dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="no performance files found"):
        etl.plan(str(tmp_path / "nothing*"), os.path.join(dataset, "acq"))
    acq = tmp_path / "acq"
    acq.mkdir()
    shutil.copy(os.path.join(dataset, "acq", "Acquisition_2007Q1.txt"), acq)
    with pytest.raises(FileNotFoundError, match="no acquisition file of 2007Q2"):
        etl.plan(os.path.join(dataset, "perf"), str(acq))
    with pytest.raises(ValueError, match="bad_rows='maybe'"):
        etl.run(os.path.join(dataset, "perf"), os.path.join(dataset, "acq"), bad_rows="maybe")
    names = _write(tmp_path / "names.csv", "seller_name|new\nONLY ONE FIELD\n")
    with pytest.raises(ValueError, match=r"names.csv:2: expected 'seller name\|short name'"):
        read.read_names(names)


def test_files_without_quarters_join_every_acquisition_file(dataset, tmp_path):
    perf = tmp_path / "p.txt"
    acq = tmp_path / "a.txt"
    shutil.copy(sorted(glob.glob(os.path.join(dataset, "perf", "*")))[0], perf)
    with open(acq, "w") as f:
        for path in sorted(glob.glob(os.path.join(dataset, "acq", "*"))):
            f.write(open(path).read())
    got = etl.run(str(perf), str(acq)).frame.compute()
    assert (got["borrower_credit_score"] > 0).all()  # every row found its acquisition


@needs_sample
@pytest.mark.parametrize("path, table", [(SAMPLE_PERF, schema.PERFORMANCE),
                                         (SAMPLE_ACQ, schema.ACQUISITION)])
def test_pyarrow_reads_the_values_pandas_c_parser_reads(path, table):
    """The CPU's parser (pyarrow) gives pandas' C parser's numbers bit for bit, and its text."""
    import io as _io

    raw = np.fromfile(path, dtype=np.uint8)
    got = read.parse_host(raw, table, Backend("cpu"))
    want = pd.read_csv(_io.BytesIO(raw.tobytes()), sep="|", header=None, names=table.names,
                       keep_default_na=False, na_values=[""], quoting=3, dtype=str)
    for col in table.columns:
        if col.kind in (schema.ID, schema.NUMBER):
            expected = want[col.name].astype("float64" if col.kind == schema.NUMBER else "int64")
            np.testing.assert_array_equal(got[col.name].to_numpy(), expected.to_numpy(),
                                          err_msg=col.name)
        else:
            texts = got[col.name].astype(object).where(got[col.name].notna(), "").tolist()
            assert [str(t) for t in texts] == want[col.name].fillna("").tolist(), col.name


def test_the_cpu_parser_refuses_a_short_line_that_pandas_would_pad():
    line = "|".join(["1"] + ["x"] * (len(schema.PERFORMANCE) - 3)) + "\n"  # two fields short
    with pytest.raises(ValueError, match="columns"):
        read.parse_host(np.frombuffer(line.encode(), dtype=np.uint8), schema.PERFORMANCE,
                        Backend("cpu"))


def test_each_device_has_its_own_default_chunk_size():
    assert parse_bytes(etl.partition_size_for("gpu")) > parse_bytes(etl.partition_size_for("cpu"))
    assert etl.partition_size_for("gpu", "5MB") == "5MB"
    assert etl.DEFAULT_PARTITION_SIZE == etl.PARTITION_SIZES["cpu"]


def test_a_range_is_read_in_blocks_each_reported_once_as_soon_as_it_is_in(tmp_path, monkeypatch):
    """What the GPU reader's block-by-block copies rest on: every block of the output is
    reported once, and its bytes are the file's when it is."""
    monkeypatch.setattr(chunk_bytes, "READ_BLOCK", 1000)
    data = bytes(range(256)) * 40 + b"tail"
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    out = np.zeros(len(data) - 7, dtype=np.uint8)
    seen = []

    def done(a, b):
        seen.append((a, b, out[a:b].tobytes() == data[7 + a:7 + b]))

    chunk_bytes.read_range(str(path), 7, out, done)
    assert out.tobytes() == data[7:]
    assert sorted(seen) == [(a, min(a + 1000, len(out)), True) for a in range(0, len(out), 1000)]
    one = np.zeros(10, dtype=np.uint8)
    blocks = []
    chunk_bytes.read_range(str(path), 0, one, lambda a, b: blocks.append((a, b)))  # one block: inline
    assert blocks == [(0, 10)] and one.tobytes() == data[:10]

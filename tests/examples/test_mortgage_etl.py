"""The mortgage ETL on CPUs, checked against a slow, obviously correct per-loan reference, in
both file layouts."""

from __future__ import annotations

import glob
import gzip
import os
import shutil
from dataclasses import replace

import dask
import numpy as np
import pandas as pd
import pytest
from dask.utils import parse_bytes

from examples.mortgage import etl, features, files, read, schema
from examples.mortgage.testdata import generate as gen

from .mortgage_rows import raw_lines, to_current_layout
from .mortgage_sample import SAMPLE, SAMPLE_ACQ, SAMPLE_PERF


@pytest.fixture(autouse=True, scope="module")
def local_threads():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small generated dataset of a crisis vintage (many delinquencies, cures, mods, ends)
    in both layouts, from the same loans."""
    directory = str(tmp_path_factory.mktemp("mortgage"))
    spec = gen.Spec(2007, 2007, loans_per_quarter=60, loans_per_part=25, end_year=2010, seed=3)
    with dask.config.set(scheduler="synchronous"):
        return gen.generate(directory, spec, layout="both")


def classic(made):
    return made.directory_of("classic")


def current(made):
    return made.directory_of("current")


def run(data=None, device="cpu", **kwargs):
    plan_args = {k: kwargs.pop(k) for k in ("perf", "acq", "names", "partition_size")
                 if k in kwargs}
    return etl.run(files.plan(data, **plan_args), device=device, **kwargs)


# ---------------------------------------------------------------------------------------------
# The reference: plain Python over the text, one loan at a time


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
    """The 45 features and the label, field by field from the classic text."""
    acq = {row[0]: row for row in acq_rows}
    feats = reference_features(perf_rows)
    kinds = {**schema.PERFORMANCE.kinds, **schema.ACQUISITION.kinds}
    records = []
    for row, f in zip(perf_rows, feats, strict=True):
        fields = dict(zip(schema.PERFORMANCE.names, row, strict=True))
        other = acq.get(row[0])
        if other is not None:
            fields.update(zip(schema.ACQUISITION.names[1:], other[1:], strict=True))
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


def read_all(paths, layout=schema.CLASSIC_PERFORMANCE, columns=schema.PERFORMANCE_READ,
             **kwargs):
    pieces = [files.Piece(p, 0, os.path.getsize(p)) for p in sorted(paths, key=files._natural)]
    return read.read(pieces, layout, columns, "cpu", **kwargs)


# ---------------------------------------------------------------------------------------------
# Features and label


def test_features_and_label_match_the_per_loan_reference(dataset):
    perf_files = dataset.performance
    got = features.performance_features(read_all(perf_files).frame)
    rows = raw_lines(perf_files)
    want = reference_features(rows)
    assert len(got) == len(rows)
    assert got["loan_id"].tolist() == [int(r[0]) for r in rows]  # one row per line, in order
    for name in (*schema.EVER, schema.LABEL):
        assert got[name].tolist() == [w[name] for w in want], name
    for name in schema.FIRST_DELINQUENCY:
        expected = [np.nan if w[name] is None else w[name] for w in want]
        np.testing.assert_array_equal(got[name].to_numpy(dtype=float), expected, err_msg=name)
    # the data exercise every branch of the rule
    assert 0 < got[schema.LABEL].mean() < 0.5
    assert got["ever_180"].sum() > 0 and (got["current_loan_delinquency_status"] < 0).any()


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_feature_table_matches_the_raw_fields_in_either_layout(dataset, layout):
    names = files.read_names(dataset.names or os.path.join(classic(dataset), "names.csv"))
    result = run(dataset.directory_of(layout))
    got = result.frame.compute().reset_index(drop=True)
    want = reference_table(raw_lines(dataset.performance), raw_lines(dataset.acquisition), names)
    assert list(got.columns) == [*schema.FEATURES, schema.LABEL]
    assert (got.dtypes[list(schema.FEATURES)] == "float32").all()
    assert got[schema.LABEL].dtype == "int32"
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert result.rows == len(want)
    # codes are fixed vocabularies, the same in every partition
    assert got["property_state"].astype(int).between(0, len(schema.STATES) - 1).all()


def test_both_layouts_give_the_same_table_partition_by_partition(dataset):
    by_layout = {layout: run(dataset.directory_of(layout), partition_size="1MiB")
                 for layout in ("classic", "current")}
    tables = {k: r.frame.compute().reset_index(drop=True) for k, r in by_layout.items()}
    pd.testing.assert_frame_equal(tables["classic"], tables["current"], check_exact=True)
    assert by_layout["classic"].quarters == by_layout["current"].quarters


def _perf_frame(rows):
    """A performance frame (as read: a blank is -1) from (loan, month, status, upb) tuples."""
    blank = {c: schema.MISSING for c in schema.PERFORMANCE_READ}
    names = ["loan_id", "monthly_reporting_period", "current_loan_delinquency_status",
             "current_actual_upb"]
    frame = pd.DataFrame([{**blank, **dict(zip(names, row, strict=True))} for row in rows])
    return frame[list(schema.PERFORMANCE_READ)].astype(
        {c: read.DTYPES[schema.kind_of(c)] for c in schema.PERFORMANCE_READ})


def test_label_rule_edge_cases():
    t = 2010 * 12
    rows = [
        # loan 1: a 4-months-behind row 11 months ahead counts, 12 months ahead does not
        (1, t, 0, 100.0), (1, t + 1, 0, 100.0), (1, t + 12, 4, 100.0), (1, t + 13, 3, 100.0),
        # loan 2: a gap in the months; a zero balance counts; status 3 does not
        (2, t, 3, 50.0), (2, t + 5, 0, 0.0), (2, t + 30, 3, -1.0),
        # loan 3: missing status and balance count for nothing; its first row is not dropped
        (3, t + 40, -1, -1.0), (3, t + 41, 5, 10.0),
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


def test_feature_table_is_the_merged_table_after_the_last_mile(dataset):
    """The column-at-a-time table equals pandas' plain merge then fill, also for loans
    without an acquisition row and for rows out of order."""
    perf = features.performance_features(read_all(dataset.performance[:2]).frame)
    acq = read_all(dataset.acquisition[:1], schema.CLASSIC_ACQUISITION,
                   schema.ACQUISITION_READ).frame
    acq = acq.iloc[::3]  # two loans in three have no acquisition row
    perf = perf.sample(frac=1.0, random_state=4).reset_index(drop=True)
    merged = perf.merge(acq, on="loan_id", how="left")
    want = merged[list(schema.FEATURES)].astype("float32").fillna(schema.MISSING)
    want[schema.LABEL] = merged[schema.LABEL].astype("int32")
    got = features.feature_table(perf.copy(), features.acquisitions(acq))
    assert (want["orig_upb"] == schema.MISSING).any()
    pd.testing.assert_frame_equal(got, want, check_exact=True)


# ---------------------------------------------------------------------------------------------
# The real files


def test_real_sample_one_row_per_performance_row_and_the_rule_s_label_rate():
    result = run(perf=SAMPLE_PERF, acq=SAMPLE_ACQ)
    got = result.frame.compute().reset_index(drop=True)
    rows = raw_lines([SAMPLE_PERF])
    assert len(rows) == 10_000 and len(got) == 10_000 and result.rows == 10_000
    want = reference_features(rows)
    rate = np.mean([w["delinquency_12"] for w in want])
    assert 0.01 < rate < 0.5
    assert got[schema.LABEL].tolist() == [w["delinquency_12"] for w in want]
    first = rows[0]  # the first data row of the file is in the output (the notebook dropped it)
    assert got.loc[0, "interest_rate"] == np.float32(first[3])
    assert got.loc[0, "servicer"] == schema.category_code("servicer", first[2])
    pd.testing.assert_frame_equal(got, reference_table(rows, raw_lines([SAMPLE_ACQ]), None),
                                  check_exact=True)


def test_the_real_sample_gives_the_same_table_in_the_current_layout(tmp_path):
    path = to_current_layout(SAMPLE_PERF, SAMPLE_ACQ, tmp_path / "2007Q3.csv")
    plan = files.plan(path)
    assert plan.layout is schema.CURRENT and plan.quarters == ["2007Q3"]
    got = etl.run(plan).frame.compute().reset_index(drop=True)
    want = run(perf=SAMPLE_PERF, acq=SAMPLE_ACQ).frame.compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_the_sample_directory_is_found_with_its_layout():
    plan = files.plan(SAMPLE)
    assert plan.layout is schema.CLASSIC_PERFORMANCE
    assert [os.path.basename(p.path) for part in plan.parts for p in part.pieces] == [
        "Performance_2007Q3.txt_0"]
    assert {q: [os.path.basename(p) for p in v] for q, v in plan.acquisitions.items()} == {
        "2007Q3": ["Acquisition_2007Q3.txt"]}
    assert plan.names is None


# ---------------------------------------------------------------------------------------------
# Partitions: by bytes, at loan boundaries


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


@pytest.mark.parametrize("ending", ["\n", ""])
@pytest.mark.parametrize("loan_field", [0, 1])
def test_loan_boundary(tmp_path, ending, loan_field):
    lines = ["1|a", "1|b", "2|c", "3|d", "3|e", "3|f", "4|g"]
    if loan_field == 1:
        lines = ["|" + line for line in lines]
    path = _write(tmp_path / "p", "\n".join(lines) + ending)
    size = os.path.getsize(path)
    starts = np.cumsum([0] + [len(x) + 1 for x in lines])[:-1]
    ids = [line.split("|")[loan_field] for line in lines]
    new_loan = [s for s, i, before in zip(starts, ids, [None] + ids[:-1], strict=True)
                if i != before]
    with open(path, "rb") as f:
        for offset in range(size + 2):
            want = next((s for s in new_loan if s >= offset), size)
            assert files.loan_boundary(f, offset, size, loan_field) == min(want, size), offset


def _largest_loan(paths, layout):
    """The most bytes of lines one loan has in one of ``paths``."""
    largest = 0
    for path in paths:
        sizes = {}
        for line in open(path, "rb"):
            loan = line.split(b"|")[layout.loan_field]
            sizes[loan] = sizes.get(loan, 0) + len(line)
        largest = max(largest, *sizes.values())
    return largest


def _assert_whole_loans_cover(parts, paths, layout):
    """The parts' pieces cover each of ``paths`` once and in order, and no loan is in two."""
    for path in paths:
        chunks = _covered(parts, path)
        assert b"".join(chunks) == open(path, "rb").read()
        loans = [{line.split(b"|")[layout.loan_field] for line in c.splitlines()}
                 for c in chunks]
        for i, a in enumerate(loans):
            for b in loans[i + 1:]:
                assert not a & b


def _covered(parts, path):
    """The bytes of ``path`` the parts' pieces cover, in the parts' order."""
    data = []
    with open(path, "rb") as f:
        for piece in (p for part in parts for p in part.pieces if p.path == path):
            f.seek(piece.start)
            data.append(f.read(piece.nbytes))
    return data


@pytest.mark.parametrize("layout", ["classic", "current"])
def test_pieces_hold_whole_loans_and_cover_every_line(dataset, layout):
    paths = (dataset.performance if layout == "classic" else dataset.current)[:2]
    file_layout = schema.CLASSIC_PERFORMANCE if layout == "classic" else schema.CURRENT
    size = os.path.getsize(paths[0])
    for target in (size // 7, size // 3, size * 10):
        parts = files.cut(paths, target, file_layout)
        if target > size:  # whole files; a partition per quarter (the files' are different)
            quarters = {schema.quarter_of(p) for p in paths}
            assert len(parts) == len(quarters) == 2
        _assert_whole_loans_cover(parts, paths, file_layout)


@pytest.mark.parametrize("layout", ["classic", "current"])
@pytest.mark.parametrize("slots", [1, 2, 3, 5, 16])
def test_balanced_partitions_come_in_full_waves_of_whole_loans(dataset, layout, slots):
    """Cut again for ``slots`` threads: a multiple of them (bytes allowing), each at most
    about the size, every line once and in order, each loan in one partition of its quarter."""
    paths = dataset.performance if layout == "classic" else dataset.current
    file_layout = schema.CLASSIC_PERFORMANCE if layout == "classic" else schema.CURRENT
    total = sum(os.path.getsize(p) for p in paths)
    for size in (total // 9, total // 2, total * 2):
        parts = files.cut(paths, size, file_layout)
        balanced = files.balance(parts, size, slots, file_layout, minimum=1)
        assert len(balanced) % slots == 0 and len(balanced) >= len(parts)
        assert [p.index for p in balanced] == list(range(len(balanced)))
        assert max(p.nbytes for p in balanced) <= size + _largest_loan(paths, file_layout)
        for part in balanced:
            assert {schema.quarter_of(p.path) for p in part.pieces} == {part.quarter}
        _assert_whole_loans_cover(balanced, paths, file_layout)


def test_balancing_evens_out_the_last_wave(tmp_path):
    """Sizes alone cut these files into five partitions: a wave and a lone task on four
    threads. Balanced: eight of about equal size, two full waves, none larger than before,
    the larger quarter cut into more."""
    lines = [f"{1000 + loan}|x" for loan in range(1000) for _ in range(3)]
    big = _write(tmp_path / "Performance_2007Q1.txt", "\n".join(lines[:1800]) + "\n")
    small = _write(tmp_path / "Performance_2007Q2.txt", "\n".join(lines[1800:]) + "\n")
    layout = schema.CLASSIC_PERFORMANCE
    size = os.path.getsize(big) // 3 + 1
    parts = files.cut([big, small], size, layout)
    assert [p.quarter for p in parts] == ["2007Q1"] * 3 + ["2007Q2"] * 2
    balanced = files.balance(parts, size, 4, layout, minimum=1)
    assert [p.quarter for p in balanced] == ["2007Q1"] * 5 + ["2007Q2"] * 3
    assert max(p.nbytes for p in balanced) < max(p.nbytes for p in parts)
    assert max(p.nbytes for p in balanced) < 1.2 * min(p.nbytes for p in balanced)


def test_balancing_keeps_partitions_above_the_minimum(dataset):
    paths = dataset.performance
    layout = schema.CLASSIC_PERFORMANCE
    total = sum(os.path.getsize(p) for p in paths)
    parts = files.cut(paths, total * 2, layout)  # a partition per quarter
    assert files.balance(parts, total * 2, 64, layout) == parts  # all below the 1 MiB minimum
    more = files.balance(parts, total * 2, 64, layout, minimum=total // (len(parts) + 2))
    assert len(more) == len(parts) + 2  # as many as the minimum allows, not 64


def test_a_compressed_file_stays_whole_when_balanced(dataset, tmp_path):
    layout = schema.CLASSIC_PERFORMANCE
    plain, packed = dataset.performance[:2]
    zipped = str(tmp_path / (os.path.basename(packed) + ".gz"))
    with open(packed, "rb") as src, gzip.open(zipped, "wb") as dst:
        dst.write(src.read())
    parts = files.cut([plain, zipped], 1 << 30, layout)
    balanced = files.balance(parts, 1 << 30, 6, layout, minimum=1)
    assert [p for part in balanced for p in part.pieces if p.path == zipped] == [
        p for part in parts for p in part.pieces if p.path == zipped]
    assert b"".join(_covered(balanced, plain)) == open(plain, "rb").read()


def test_a_balanced_plan_gives_the_same_table(dataset):
    for layout in ("classic", "current"):
        plan = files.plan(dataset.directory_of(layout), partition_size="1MiB")
        balanced = replace(plan, parts=files.balance(plan.parts, parse_bytes("1MiB"), 7,
                                                     plan.layout, minimum=1))
        assert len(balanced.parts) == 7 and len(plan.parts) < 7
        want = etl.run(plan).frame.compute().reset_index(drop=True)
        got = etl.run(balanced)
        assert got.partitions == 7 and got.quarters == balanced.quarters
        pd.testing.assert_frame_equal(got.frame.compute().reset_index(drop=True), want,
                                      check_exact=True)


def test_chunks_cover_each_piece_once_at_line_starts(tmp_path):
    """What a GPU converts at once: small pieces together, a large one cut at line starts,
    every byte once and in order, no chunk over the size by more than a line."""
    lines = [f"{i}|{'x' * (i % 13)}" for i in range(400)]
    big = _write(tmp_path / "big", "\n".join(lines) + "\n")
    small = [_write(tmp_path / f"s{i}", "1|a\n2|bb\n") for i in range(3)]
    data = open(big, "rb").read()
    fifth = sum(len(line) + 1 for line in lines[:5])  # a piece starts at a line start
    pieces = [files.Piece(small[0], 0, 9), files.Piece(big, fifth, len(data)),
              files.Piece(small[1], 0, 9), files.Piece(small[2], 0, 9)]
    total = sum(p.nbytes for p in pieces)
    longest = max(len(line) + 1 for line in lines)
    for limit in (10, 64, 1000, total):
        groups = files.chunks(pieces, limit)
        flat = [p for g in groups for p in g]
        runs = [path for i, path in enumerate(p.path for p in flat)
                if i == 0 or flat[i - 1].path != path]
        assert runs == [p.path for p in pieces]  # in order, each piece's chunks together
        for piece in pieces:
            mine = [p for p in flat if p.path == piece.path]
            assert (mine[0].start, mine[-1].stop) == (piece.start, piece.stop)
            assert all(a.stop == b.start for a, b in zip(mine, mine[1:], strict=False))  # no gap, no overlap
        assert all(data[p.start - 1:p.start] == b"\n" for p in flat if p.path == big)
        assert all(sum(p.nbytes for p in g) <= limit + longest for g in groups)
    assert len(files.chunks(pieces, total)) == 1
    assert len([p for p in flat if p.path == big]) == 1


def test_text_columns_decode_through_one_vocabulary():
    """The text columns share one list of distinct texts (None: a blank, a text of its own):
    each column's texts decode by its kind, a blank as the column's blank value; a text that
    is bad for a column the column does not hold is never judged."""
    texts = ["current_loan_delinquency_status", "mod_flag", "monthly_reporting_period"]
    uniques = ["0", None, "X", "Y", "01/01/2007"]
    codes = np.array([[0, 1, 2, 1], [3, 1, 3, 3], [4, 4, 4, 4]], np.int32)
    used = read.used_texts(codes, len(uniques))
    assert used.tolist() == [[True, True, True, False, False], [False, True, False, True, False],
                             [False, False, False, False, True]]
    got = read.decode(texts, uniques, codes, used)
    y = schema.category_code("mod_flag", "Y")
    assert got.tolist() == [[0, schema.MISSING, schema.MISSING, schema.MISSING],
                            [y, schema.MISSING, y, y], [2007 * 12] * 4]
    codes[2, 1] = 1  # a blank reporting month: the piece is unclean
    with pytest.raises(read._Unclean, match="blank monthly_reporting_period"):
        read.decode(texts, uniques, codes, read.used_texts(codes, len(uniques)))
    codes[2, 1] = 3  # "Y" is no month
    with pytest.raises(read._Unclean, match="bad value in monthly_reporting_period"):
        read.decode(texts, uniques, codes, read.used_texts(codes, len(uniques)))


def test_a_cpu_text_column_decodes_through_its_own_dictionary():
    """pyarrow's reader gives a text column as a dictionary per block: each distinct text is
    converted once and every row gets its text's value, a blank the column's blank value,
    whatever the blocks' dictionaries; a text that is bad for the column makes it unclean."""
    import pyarrow as pa

    def column(*chunks):
        return pa.chunked_array([pa.array(c, pa.string()).dictionary_encode() for c in chunks])

    status = column(["0", None, "X"], ["2", "0", None, "XX"])
    got = read._text_values("current_loan_delinquency_status", status, None)
    assert got.dtype == np.int32 and got.flags.writeable
    assert got.tolist() == [0, schema.MISSING, schema.MISSING, 2, 0, schema.MISSING,
                            schema.MISSING]
    sellers = {"A BANK": "Wells Fargo"}
    servicer = column(["A BANK", "ELSE"], [None])
    assert read._text_values("servicer", servicer, sellers).tolist() == [
        schema.category_code("servicer", t, sellers) for t in ("A BANK", "ELSE", None)]
    months = column(["01/01/2007", "02/01/2007"], ["01/01/2007"])
    assert read._text_values("monthly_reporting_period", months, None).tolist() == [
        2007 * 12, 2007 * 12 + 1, 2007 * 12]
    with pytest.raises(read._Unclean, match="blank monthly_reporting_period"):
        read._text_values("monthly_reporting_period", column(["01/01/2007", None]), None)
    with pytest.raises(read._Unclean, match="bad value in current_loan_delinquency_status"):
        read._text_values("current_loan_delinquency_status", column(["1"], ["Y"]), None)


def test_the_cpu_reader_reads_a_piece_where_the_file_is_mapped():
    """A piece of a file, read where the file is mapped, gives what its bytes give, and its
    arrays stay valid once the mapping is closed."""
    import gc

    with open(SAMPLE_PERF, "rb") as f:
        text = f.read()
    starts = [0] + [i + 1 for i, byte in enumerate(text) if byte == ord("\n")]
    piece = files.Piece(SAMPLE_PERF, starts[5], starts[40])
    columns = schema.PERFORMANCE_READ
    mapped = read._read_cpu([piece], None, schema.CLASSIC_PERFORMANCE, columns, None)
    gc.collect()
    given = read._read_cpu([piece], text[piece.start:piece.stop], schema.CLASSIC_PERFORMANCE,
                           columns, None)
    assert len(mapped["loan_id"]) == 35
    for name in columns:
        np.testing.assert_array_equal(mapped[name], given[name])
    assert mapped["loan_id"].tolist() == [int(r[0]) for r in raw_lines([SAMPLE_PERF])[5:40]]


def test_a_cpu_flag_column_reads_as_booleans_or_else_as_text(tmp_path):
    """A flag column (N or Y) is read as booleans; a piece where one holds another text is
    read again with dictionaries, and every text gets its code as before (another: "other")."""
    import pyarrow as pa

    flags = pa.chunked_array([[True, None], [False, True]])
    assert read._text_values("mod_flag", flags, None).tolist() == [
        schema.category_code("mod_flag", t) for t in ("Y", None, "N", "Y")]
    rows = raw_lines([SAMPLE_PERF])[:60]
    flag = schema.PERFORMANCE.names.index("mod_flag")
    rows[7][flag], rows[8][flag] = "P", ""
    path = _write(tmp_path / "Performance_2007Q3.txt_0", "\n".join("|".join(r) for r in rows))
    got = read_all([path]).frame["mod_flag"].tolist()
    assert got == [schema.category_code("mod_flag", r[flag]) for r in rows]
    assert got[7:9] == [len(schema.VOCABULARIES["mod_flag"]), schema.MISSING]
    assert read.FLAG == schema.VOCABULARIES["mod_flag"]


def test_a_cpu_number_column_is_float32_with_blank_and_nan_missing():
    """Numbers read as float64 are rounded to float32; a blank (null) or a NaN is MISSING, and
    a column of blanks only is MISSING throughout."""
    import pyarrow as pa

    numbers = pa.chunked_array([[0.1, None], [float("nan"), 3.5]], pa.float64())
    got = read._number_values(numbers, 4)
    assert got.dtype == np.float32
    assert got.tolist() == [np.float32(0.1), -1, -1, 3.5]
    blank = read._number_values(pa.chunked_array([[None, None], [None]], pa.float64()), 3)
    assert blank.dtype == np.float32 and blank.tolist() == [-1, -1, -1]


def test_next_flagged_row_is_the_first_flagged_at_or_after_each_row():
    """The next flagged index of every index (len when none), from the running count and
    from the search among flagged indices alike, and on small cases spelled out."""
    flags = np.array([0, 1, 0, 0, 1, 1, 0], bool)
    assert features._next_flagged(np, flags).tolist() == [1, 1, 4, 4, 4, 5, 7]
    assert features._first_flagged(np, flags, np.array([6, 0, 2, 5])).tolist() == [7, 1, 4, 5]
    assert features._first_flagged(np, np.zeros(4, bool), np.array([0, 3])).tolist() == [4, 4]
    assert features._next_flagged(np, np.zeros(3, bool)).tolist() == [3, 3, 3]
    assert features._next_flagged(np, np.zeros(0, bool)).tolist() == []
    rng = np.random.default_rng(1)
    for density in (0.01, 0.3, 1.0):
        flags = rng.random(2000) < density
        np.testing.assert_array_equal(features._next_flagged(np, flags),
                                      features._first_flagged(np, flags, np.arange(2000)))


def test_rows_of_finds_each_key_s_loan_in_runs_or_not():
    """Each key's column in the acquisitions' values (the first of equal ids; the last
    column when the loan has none), for keys in runs, out of order, or none at all."""
    acq = pd.DataFrame({"loan_id": np.array([30, 10, 20, 10], np.int64)})
    for name in features.ACQUIRED:
        acq[name] = np.float32(1)
    joined = features.acquisitions(acq)
    assert joined.ids.tolist() == [10, 10, 20, 30]
    keys = [20, 20, 5, 10, 10, 10, 30, 99, 20, 10]
    assert joined.rows_of(pd.Series(keys, dtype="int64")).tolist() == [2, 2, 4, 0, 0, 0, 3, 4,
                                                                       2, 0]
    assert joined.rows_of(pd.Series([], dtype="int64")).tolist() == []
    rng = np.random.default_rng(2)
    keys = np.repeat(rng.integers(0, 40, 300), rng.integers(1, 5, 300))
    at = np.minimum(np.searchsorted(joined.ids, keys), len(joined.ids) - 1)
    want = np.where(joined.ids[at] == keys, at, len(joined.ids))
    np.testing.assert_array_equal(joined.rows_of(pd.Series(keys)), want)
    none = features.acquisitions(acq.iloc[:0])
    assert none.rows_of(pd.Series([7, 7, 8])).tolist() == [0, 0, 0]


def test_features_of_are_the_values_of_each_key_s_loan():
    """The acquired features of each key: its loan's column of the values (MISSING where
    the loan has no acquisition row), a row per feature."""
    rng = np.random.default_rng(3)
    acq = pd.DataFrame({"loan_id": rng.permutation(50).astype(np.int64)})
    for name in features.ACQUIRED:
        acq[name] = rng.integers(0, 100, 50).astype(np.float32)
    joined = features.acquisitions(acq)
    keys = np.repeat(rng.integers(0, 60, 200), rng.integers(1, 4, 200))
    got = joined.features_of(pd.Series(keys))
    assert got.shape == (len(features.ACQUIRED), len(keys)) and got.dtype == np.float32
    np.testing.assert_array_equal(got, joined.values[:, joined.rows_of(pd.Series(keys))])
    missing = ~np.isin(keys, acq["loan_id"])
    assert missing.any() and (got[:, missing] == schema.MISSING).all()
    assert (got[:, ~missing] == acq.set_index("loan_id").loc[keys[~missing]].T).all(axis=None)
    assert joined.features_of(pd.Series([], dtype="int64")).shape == (len(features.ACQUIRED), 0)


def test_the_feature_table_s_arrays_are_its_own(dataset):
    """The CPU table's columns are writable arrays that share no memory with the frame it was
    made from."""
    perf = features.performance_features(read_all(dataset.performance[:1]).frame)
    acq = read_all(dataset.acquisition[:1], schema.CLASSIC_ACQUISITION,
                   schema.ACQUISITION_READ).frame
    kept = perf.copy(deep=False)  # shares perf's arrays
    table = features.feature_table(perf, features.acquisitions(acq))
    before = kept["interest_rate"].to_numpy().copy()
    table.iloc[:, :] = 0  # in place
    assert (table.to_numpy() == 0).all()
    np.testing.assert_array_equal(kept["interest_rate"].to_numpy(), before)


def test_small_files_are_packed_up_to_the_partition_size(dataset, tmp_path):
    """A quarter written as several small files of whole loans: packed into one partition
    when they fit, into several (each file whole) when the partition size is smaller."""
    perf_dir, acq_dir = tmp_path / "perf", tmp_path / "acq"
    perf_dir.mkdir()
    acq_dir.mkdir()
    rows = raw_lines(dataset.performance[:1])
    loans = sorted({r[0] for r in rows})
    for part in range(3):
        mine = set(loans[part::3])
        _write(perf_dir / f"Performance_2007Q1.txt_{part}",
               "\n".join("|".join(r) for r in rows if r[0] in mine) + "\n")
    shutil.copy(dataset.acquisition[0], acq_dir)
    paths = sorted(glob.glob(str(perf_dir / "*")))
    sizes = [os.path.getsize(p) for p in paths]

    packed = files.plan(perf=str(perf_dir), acq=str(acq_dir), partition_size="1MiB")
    assert len(packed.parts) == 1 and packed.quarters == ["2007Q1"]
    assert sorted(p.path for p in packed.parts[0].pieces) == paths
    assert all(p.start == 0 and p.nbytes == size
               for p, size in zip(sorted(packed.parts[0].pieces, key=lambda p: p.path), sizes,
                                  strict=True))

    two_smallest = sum(sorted(sizes)[:2])
    assert two_smallest > max(sizes)
    parts = files.cut(paths, two_smallest - 1, packed.layout)  # each fits, no two together
    assert len(parts) == 3
    assert [[(p.path, p.start, p.nbytes) for p in part.pieces] for part in parts] == [
        [(path, 0, size)] for path, size in zip(paths, sizes, strict=True)]


def test_too_small_a_partition_size_is_refused_with_the_minimum():
    for bad in ("10", "100KiB", 5):
        with pytest.raises(ValueError, match="below 1.00 MiB.*at least 1MiB"):
            files.partition_size_for("cpu", bad)
    with pytest.raises(ValueError, match="is not a size"):
        files.partition_size_for("cpu", "lots")
    assert files.partition_size_for("gpu") > files.partition_size_for("cpu")
    assert files.partition_size_for("gpu", "5MB") == 5_000_000


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


def test_bad_rows_error_names_file_and_line(dirty):
    path, bad_at = dirty
    with pytest.raises(read.BadRowsError) as info:
        run(perf=path, acq=SAMPLE_ACQ)
    message = str(info.value)
    for line, reason in bad_at.items():
        assert f"{path}:{line}: {reason}" in message
    assert "bad_rows='warn'" in message
    assert {row.line for row in info.value.rows} == set(bad_at)


@pytest.mark.parametrize("policy", ["warn", "skip"])
def test_bad_rows_warn_or_skip_drop_and_count_them(dirty, policy, recwarn):
    path, bad_at = dirty
    result = run(perf=path, acq=SAMPLE_ACQ, bad_rows=policy)
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


def test_bad_acquisition_rows_are_counted_once_whatever_the_partitions(tmp_path):
    """A quarter's acquisitions are read by one task that its partitions share: each bad
    acquisition row is reported once, however many partitions join it."""
    rows = raw_lines([SAMPLE_ACQ])
    rows[4] = rows[4][:-1]  # too few fields
    rows[9] = rows[9][:3] + ["7.x"] + rows[9][4:]  # a bad number
    acq = _write(tmp_path / "Acquisition_2007Q3.txt", "\n".join("|".join(r) for r in rows))
    perf_dir = tmp_path / "perf"
    perf_dir.mkdir()
    perf_rows = raw_lines([SAMPLE_PERF])
    for part in range(3):  # three files of whole loans
        loans = sorted({r[0] for r in perf_rows})[part::3]
        _write(perf_dir / f"Performance_2007Q3.txt_{part}",
               "\n".join("|".join(r) for r in perf_rows if r[0] in loans) + "\n")
    plan = files.plan(perf=str(perf_dir), acq=acq, partition_size="1MiB")
    perf_files = sorted(glob.glob(str(perf_dir / "*")))
    largest = max(os.path.getsize(p) for p in perf_files)  # a partition per file
    plan.parts = files.cut(perf_files, largest, plan.layout)
    assert len(plan.parts) == 3
    result = etl.run(plan, bad_rows="skip")
    assert result.bad_count == 2
    assert sorted((row.path, row.line) for row in result.bad) == [(acq, 5), (acq, 10)]
    assert result.rows == 10_000


def test_unknown_status_is_missing_not_bad(tmp_path):
    rows = raw_lines([SAMPLE_PERF])[:50]
    rows[4][10] = "X"
    rows[5][10] = "XX"
    path = _write(tmp_path / "Performance_2007Q3.txt_0", "\n".join("|".join(r) for r in rows))
    got = run(perf=path, acq=SAMPLE_ACQ).frame.compute()
    assert got["current_loan_delinquency_status"].tolist()[4:6] == [-1, -1]


def test_a_nan_number_reads_as_missing_as_a_blank_does(tmp_path):
    rows = raw_lines([SAMPLE_PERF])[:50]
    rows[4][3], rows[5][3], rows[6][4] = "NaN", "", "nan"
    path = _write(tmp_path / "Performance_2007Q3.txt_0", "\n".join("|".join(r) for r in rows))
    got = read_all([path]).frame
    assert got["interest_rate"].tolist()[3:7] == [float(rows[3][3]), -1, -1, float(rows[6][3])]
    assert got["current_actual_upb"].tolist()[6] == -1


def test_duplicate_acquisition_rows_are_bad_rows(tmp_path):
    with open(SAMPLE_ACQ) as f:
        lines = f.readlines()[:300]
    path = _write(tmp_path / "Acquisition_2007Q3.txt", "".join(lines + lines[:1]))
    with pytest.raises(read.BadRowsError, match=f"{path}:301: duplicate loan_id"):
        run(perf=SAMPLE_PERF, acq=path)


@pytest.fixture
def read_as_one_group(monkeypatch):
    """The CPU reader given the pieces as one group, as the GPU's reads small pieces
    together: one fast read of all of them, whose failure sends the group line by line."""
    original = read._fast

    def together(pieces, data, *args):
        if data is not None or len(pieces) == 1:
            return original(pieces, data, *args)
        parts = [original([piece], None, *args) for piece in pieces]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    monkeypatch.setattr(read, "_groups", lambda pieces, device: iter([list(pieces)]))
    monkeypatch.setattr(read, "_fast", together)


def test_a_loan_in_two_acquisition_files_read_together_is_a_bad_row(tmp_path,
                                                                      read_as_one_group):
    with open(SAMPLE_ACQ) as f:
        lines = f.readlines()[:300]
    first = _write(tmp_path / "Acquisition_2007Q3.txt_0", "".join(lines[:200]))
    second = _write(tmp_path / "Acquisition_2007Q3.txt_1", "".join(lines[199:]))
    paths = [first, second]
    kwargs = dict(layout=schema.CLASSIC_ACQUISITION, columns=schema.ACQUISITION_READ,
                  unique_ids=True)
    with pytest.raises(read.BadRowsError, match=f"{second}:1: duplicate loan_id"):
        read_all(paths, **kwargs)
    result = read_all(paths, policy="skip", **kwargs)
    assert [(row.path, row.line) for row in result.bad] == [(second, 1)]
    assert result.rows == 300


def test_a_bad_row_in_the_second_piece_read_together_is_found(tmp_path, read_as_one_group):
    rows = raw_lines([SAMPLE_PERF])[:100]
    first = _write(tmp_path / "Performance_2007Q3.txt_0",
                   "".join("|".join(r) + "\n" for r in rows[:50]))
    rows[60][3] = "x"  # the interest rate of the second piece's 11th line
    second = _write(tmp_path / "Performance_2007Q3.txt_1",
                    "".join("|".join(r) + "\n" for r in rows[50:]))
    result = read_all([first, second], policy="skip")
    assert [(row.path, row.line) for row in result.bad] == [(second, 11)]
    assert result.rows == 99


def test_non_utf8_and_blank_lines(tmp_path):
    good = "1|01/01/2007" + "|" * 29
    text = (good + "\n\n" + good.replace("1|", "2|", 1) + "\n").encode() + b"\xff|x\n"
    path = tmp_path / "Performance_2007Q3.txt_0"
    path.write_bytes(text)
    result = read_all([str(path)], policy="skip")
    assert result.rows == 2 and len(result.bad) == 1
    assert result.bad[0].line == 4 and result.bad[0].reason.startswith("not UTF-8 text")


def test_the_cpu_reader_refuses_a_short_line(tmp_path):
    good = "1|01/01/2007" + "|" * 29
    path = _write(tmp_path / "Performance_2007Q3.txt_0", good + "\n" + good[:-2] + "\n")
    result = read_all([path], policy="skip")
    assert [(r.line, r.reason) for r in result.bad] == [(2, "expected 31 fields, found 29")]


# ---------------------------------------------------------------------------------------------
# Inputs, outputs and errors


def test_meta_matches_the_output(dataset):
    got = run(classic(dataset)).frame.partitions[0].compute()
    pd.testing.assert_series_equal(got.dtypes, etl.meta().dtypes)


def test_write_parquet_equals_the_persisted_table(dataset, tmp_path):
    out = str(tmp_path / "features.parquet")
    plan = files.plan(classic(dataset))
    written = etl.write(out, plan)
    kept = etl.run(plan).frame.compute().reset_index(drop=True)
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, kept)
    assert written.rows == len(kept)
    with pytest.raises(FileExistsError, match="overwrite"):
        etl.write(out, plan)
    etl.write(out, plan, overwrite=True)


def test_nothing_is_written_when_bad_rows_stop_the_etl(dirty, tmp_path):
    path, _ = dirty
    out = tmp_path / "features.parquet"
    with pytest.raises(read.BadRowsError):
        etl.write(str(out), files.plan(perf=path, acq=SAMPLE_ACQ))
    assert not out.exists()


def test_missing_inputs_say_what_to_give(dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="no files found"):
        files.plan(str(tmp_path / "nothing*"))
    with pytest.raises(FileNotFoundError, match="no Fannie Mae acquisition files"):
        files.plan(perf=os.path.join(classic(dataset), "perf"))
    acq = tmp_path / "acq"
    acq.mkdir()
    shutil.copy(os.path.join(classic(dataset), "acq", "Acquisition_2007Q1.txt"), acq)
    with pytest.raises(FileNotFoundError, match="no acquisition file of 2007Q2"):
        files.plan(perf=os.path.join(classic(dataset), "perf"), acq=str(acq))
    with pytest.raises(ValueError, match="bad_rows='maybe'"):
        run(classic(dataset), bad_rows="maybe")
    names = _write(tmp_path / "names.csv", "seller_name|new\nONLY ONE FIELD\n")
    with pytest.raises(ValueError, match=r"names.csv:2: expected 'seller name\|short name'"):
        files.read_names(names)


def test_mixed_layouts_are_refused(dataset):
    with pytest.raises(ValueError, match="mixes the current layout"):
        files.plan([classic(dataset), current(dataset)])


def test_files_without_quarters_join_every_acquisition_file(dataset, tmp_path):
    perf = tmp_path / "p.txt"
    acq = tmp_path / "a.txt"
    shutil.copy(sorted(dataset.performance)[0], perf)
    with open(acq, "w") as f:
        for path in sorted(dataset.acquisition):
            f.write(open(path).read())
    got = run(perf=str(perf), acq=str(acq)).frame.compute()
    assert (got["borrower_credit_score"] > 0).all()  # every row found its acquisition


def test_numbers_read_as_pandas_c_parser_reads_them():
    """The CPU's reader (pyarrow) gives pandas' C parser's numbers bit for bit, once rounded
    to the float32 that the ETL keeps (a blank as -1)."""
    got = read_all([SAMPLE_PERF]).frame
    want = pd.read_csv(SAMPLE_PERF, sep="|", header=None, names=schema.PERFORMANCE.names,
                       keep_default_na=False, na_values=[""], quoting=3, dtype=str)
    for name in schema.PERFORMANCE_READ:
        if schema.kind_of(name) == schema.NUMBER:
            np.testing.assert_array_equal(got[name].to_numpy(),
                                          want[name].astype("float64").astype("float32")
                                          .fillna(schema.MISSING).to_numpy(), name)

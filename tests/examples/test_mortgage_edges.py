"""The mortgage commands at their edges, on CPUs: a user's files are never lost, compressed
files read as Fannie Mae ships them, and every mistake is answered in one line before any work
starts."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import time
import zipfile

import dask
import pandas as pd
import pytest

from dask_gpu_interop import without_xgboost_rank_lines
from examples.mortgage import cli, etl, files, output, read
from examples.mortgage.cli import mortgage as main
from examples.mortgage.testdata import generate as gen

from .commands import CPU, interrupted, invoke, refused
from .mortgage_rows import generated_dataset, to_current_layout
from .mortgage_sample import SAMPLE, SAMPLE_ACQ, SAMPLE_PERF


def _run(args, **kwargs):
    started = time.perf_counter()
    result = invoke(main, args, **kwargs)
    result.seconds = time.perf_counter() - started
    return result


def _tree(directory):
    return sorted(os.path.relpath(os.path.join(root, name), directory)
                  for root, _, names in os.walk(directory) for name in names)


def _user_files(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "notes.txt").write_text("my notes")
    (directory / "thesis").mkdir()
    (directory / "thesis" / "chapter1.tex").write_text("\\chapter{One}")
    return _tree(directory)


def _no_leftovers(parent):
    assert not [name for name in os.listdir(parent) if ".partial-" in name or ".old-" in name]


# ---------------------------------------------------------------------------------------------
# Never lose data


def test_overwrite_keeps_files_the_command_did_not_write(tmp_path):
    out = tmp_path / "out"
    before = _user_files(out)
    result = _run(["etl", *CPU, "--data", SAMPLE, "--out", str(out), "--overwrite"])
    refused(result, str(out), "did not write", "notes.txt")
    assert _tree(out) == before


def test_overwrite_replaces_only_an_earlier_feature_table(tmp_path):
    out = tmp_path / "features"
    assert _run(["etl", *CPU, "--data", SAMPLE, "--out", str(out)]).exit_code == 0
    first = pd.read_parquet(out)
    refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(out)]), "--overwrite")
    again = _run(["etl", *CPU, "--data", SAMPLE, "--out", str(out), "--overwrite"])
    assert again.exit_code == 0, again.output
    pd.testing.assert_frame_equal(pd.read_parquet(out), first)
    (out / "mine.txt").write_text("added by hand")  # now the directory is not only ours
    refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(out), "--overwrite"]),
            "mine.txt")
    assert (out / "mine.txt").read_text() == "added by hand"
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_the_output_is_never_the_input(tmp_path, where):
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    before = _tree(data)
    out = {"same": data, "inside": data / "features", "around": tmp_path}[where]
    result = _run(["etl", *CPU, "--data", str(data), "--out", str(out), "--overwrite"])
    refused(result, "the input")
    assert _tree(data) == before


def test_an_etl_that_fails_or_is_interrupted_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "features"
    plan = files.plan(SAMPLE)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(etl, "_compute", interrupted)
    with dask.config.set(scheduler="threads"), pytest.raises(KeyboardInterrupt):
        etl.write(str(out), plan)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    with dask.config.set(scheduler="threads"):
        etl.write(str(out), plan)  # a first table, then one that fails while replacing it
    kept = _tree(out)
    monkeypatch.setattr(etl, "_compute", interrupted)
    with dask.config.set(scheduler="threads"), pytest.raises(KeyboardInterrupt):
        etl.write(str(out), plan, overwrite=True)
    assert _tree(out) == kept
    _no_leftovers(tmp_path)


def test_a_dataset_that_fails_half_way_leaves_no_files(tmp_path, monkeypatch):
    written = []
    real = gen.write_part

    def fails_third(*args):
        written.append(args)
        if len(written) == 3:
            raise OSError("disk full")
        return real(*args)

    monkeypatch.setattr(gen, "write_part", fails_third)
    spec = gen.Spec(2007, 2007, loans_per_quarter=20, loans_per_part=5)
    with dask.config.set(scheduler="synchronous"), pytest.raises(OSError, match="disk full"):
        gen.generate(str(tmp_path / "data"), spec)
    assert os.listdir(tmp_path) == []


def test_generate_replaces_only_an_earlier_dataset(tmp_path):
    spec = gen.Spec(2007, 2007, loans_per_quarter=5)
    data = tmp_path / "data"
    with dask.config.set(scheduler="synchronous"):
        made = gen.generate(str(data), spec)
        assert made.directory == str(data)  # where it was renamed to, not the hidden folder
        assert all(p.startswith(f"{data}/") and os.path.exists(p)
                   for p in made.performance + made.acquisition + [made.names])
        with pytest.raises(FileExistsError, match="--overwrite"):
            gen.generate(str(data), spec)
        gen.generate(str(data), spec, overwrite=True)
        (data / "perf" / "mine.txt").write_text("mine")
        with pytest.raises(FileExistsError, match="mine.txt"):
            gen.generate(str(data), spec, overwrite=True)
    assert (data / "perf" / "mine.txt").read_text() == "mine"
    mine = tmp_path / "mine"
    before = _user_files(mine)
    with pytest.raises(FileExistsError, match="did not write"):
        gen.check_directory(str(mine), overwrite=True)
    assert _tree(mine) == before


def test_generate_checks_the_free_space_first(tmp_path, monkeypatch):
    free = shutil.disk_usage(tmp_path).free
    spec = gen.Spec(2007, 2007, loans_per_quarter=1000)
    assert 0 < gen.space_needed(spec) < free
    for layout in ("classic", "current", "both"):
        assert gen.space_bound(spec, layout) > gen.space_needed(spec, layout)
    assert gen.space_needed(spec, "both") > gen.space_needed(spec, "current") > gen.space_needed(spec)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(gen.shutil, "disk_usage",
                        lambda path: usage._replace(free=gen.space_needed(spec) // 2))
    with pytest.raises(OSError, match="free"):
        gen.check_space(str(tmp_path / "new"), spec)
    result = _run(["generate", "--out", str(tmp_path / "big"), "--size", "200GB"])
    refused(result, "needs about", "free", "--size")
    assert not (tmp_path / "big").exists()


def test_an_unwritable_output_is_refused_before_the_work(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = _run(["etl", *CPU, "--data", SAMPLE, "--out", str(blocker / "features")])
    refused(result, str(blocker), "is a file")
    monkeypatch.setattr(output.os, "access", lambda path, mode: False)  # a read-only mount
    result = _run(["etl", *CPU, "--data", SAMPLE, "--out", str(tmp_path / "features")])
    refused(result, "not writable")
    assert result.seconds < 10


def test_a_model_path_that_cannot_be_written_is_refused_before_the_work(tmp_path):
    result = _run([*CPU, "--data", SAMPLE, "--model-out", "/nonexistent/dir/model.json"])
    refused(result, "/nonexistent/dir", "does not exist")
    kept = tmp_path / "model.json"
    kept.write_text("my own file")
    refused(_run([*CPU, "--data", SAMPLE, "--model-out", str(kept)]), "not an earlier model")
    assert kept.read_text() == "my own file"


def test_features_out_keeps_files_the_job_did_not_write(tmp_path):
    out = tmp_path / "features"
    before = _user_files(out)
    refused(_run([*CPU, "--data", SAMPLE, "--features-out", str(out)]), "notes.txt")
    assert _tree(out) == before


def _earlier_outputs(tmp_path):
    """An earlier run's generated dataset, feature table and model, as these commands write
    them, and a snapshot of their bytes."""
    import numpy as np
    import xgboost

    workdir, features, model = tmp_path / "work", tmp_path / "features", tmp_path / "model.json"
    generated_dataset(workdir, 5)
    with output.Staged(str(features), what="feature table") as staging:
        pd.DataFrame({"x": [1.0]}).to_parquet(os.path.join(staging, "part.0.parquet"))
    matrix = xgboost.DMatrix(np.arange(8.0).reshape(4, 2), label=[0, 1, 0, 1])
    booster = xgboost.train({"max_depth": 1}, matrix, num_boost_round=1)
    booster.set_attr(**{cli.MODEL_MARK[0]: cli.MODEL_MARK[1]})  # as the job marks its models
    booster.save_model(str(model))

    def snapshot():
        return {str(p): p.read_bytes() for base in (workdir, features, model)
                for p in ([base] if base.is_file() else sorted(base.rglob("*"))) if p.is_file()}

    return workdir, features, model, snapshot


def test_the_job_replaces_an_earlier_output_only_with_overwrite(tmp_path):
    workdir, features, model, snapshot = _earlier_outputs(tmp_path)
    before = snapshot()
    small = [*CPU, "--years", "2007", "--loans-per-quarter", "100", "--rounds", "3"]
    for option, path, what in [("--workdir", workdir, "generated dataset"),
                               ("--features-out", features, "feature table"),
                               ("--model-out", model, "model")]:
        line = refused(_run([*small, option, str(path)]), str(path), f"earlier {what}",
                       "--overwrite")
        assert snapshot() == before, option
        if option == "--workdir":
            assert f"--data {path}" in line  # or use the dataset as it is
    _no_leftovers(tmp_path)
    result = _run([*small, "--workdir", str(workdir), "--features-out", str(features),
                   "--model-out", str(model), "--overwrite"])
    assert result.exit_code == 0, result.output
    after = snapshot()
    assert after[str(model)] != before[str(model)] and cli._is_our_model(str(model))
    assert list(pd.read_parquet(features).columns) != ["x"]  # the job's own table now
    def generated(files):
        return sum(len(data) for path, data in files.items() if path.startswith(str(workdir)))

    assert generated(after) > 10 * generated(before)  # 100 loans a quarter now, not 5
    _no_leftovers(tmp_path)


# ---------------------------------------------------------------------------------------------
# Read the files users have: zip and gzip (and bzip2, xz), either layout


def _compress(source, target, how):
    if how == "zip":
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(source, os.path.basename(source).removesuffix("_0"))
        return
    opener = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[how]
    with open(source, "rb") as f, opener(target, "wb") as out:
        shutil.copyfileobj(f, out)


@pytest.fixture(scope="module")
def plain_table():
    with dask.config.set(scheduler="threads"):
        return etl.run(files.plan(perf=SAMPLE_PERF, acq=SAMPLE_ACQ)).frame.compute()


@pytest.mark.parametrize("layout", ["classic", "current"])
@pytest.mark.parametrize("how", ["zip", "gz", "bz2", "xz"])
def test_compressed_files_give_the_same_table_as_the_plain_ones(tmp_path, layout, how,
                                                                plain_table, monkeypatch):
    monkeypatch.setattr(read, "CHUNK", 200_000)  # several blocks a file
    data = tmp_path / "data"
    data.mkdir()
    if layout == "classic":
        sources = [SAMPLE_PERF, SAMPLE_ACQ]
    else:
        sources = [to_current_layout(SAMPLE_PERF, SAMPLE_ACQ, tmp_path / "2007Q3.csv")]
    if how == "zip":  # one archive a quarter, as Fannie Mae ships them
        with zipfile.ZipFile(data / "2007Q3.zip", "w", zipfile.ZIP_DEFLATED) as archive:
            for source in sources:
                archive.write(source, os.path.basename(source).removesuffix("_0"))
    else:
        for source in sources:
            _compress(source, data / f"{os.path.basename(source)}.{how}", how)
    plan = files.plan(str(data))
    assert plan.quarters == ["2007Q3"] and len(plan.parts) == 1
    assert plan.input_bytes == sum(os.path.getsize(s) for s in sources) or how in ("bz2", "xz")
    with dask.config.set(scheduler="threads"):
        got = etl.run(plan).frame.compute()
    pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                  plain_table.reset_index(drop=True), check_exact=True)


def test_bad_rows_in_a_compressed_file_are_named_by_line(tmp_path, monkeypatch):
    monkeypatch.setattr(read, "CHUNK", 100_000)
    lines = open(SAMPLE_PERF).read().splitlines()
    lines[7000] = lines[7000].replace("|", "|x", 1)  # a bad reporting period
    with gzip.open(tmp_path / "Performance_2007Q3.txt.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    plan = files.plan(perf=str(tmp_path / "Performance_2007Q3.txt.gz"), acq=SAMPLE_ACQ)
    with dask.config.set(scheduler="threads"), pytest.raises(read.BadRowsError) as caught:
        etl.run(plan)
    assert [(row.path.endswith(".gz"), row.line) for row in caught.value.rows] == [(True, 7001)]


def test_an_archive_that_holds_something_else_is_refused_naming_it(tmp_path):
    with zipfile.ZipFile(tmp_path / "2007Q3.zip", "w") as archive:
        archive.writestr("glossary.pdf", b"%PDF-1.4")
        archive.writestr("readme.txt", "hello")
    result = _run(["etl", *CPU, "--data", str(tmp_path / "2007Q3.zip"),
                   "--out", str(tmp_path / "out")])
    refused(result, "2007Q3.zip", "glossary.pdf", "readme.txt")
    (tmp_path / "broken.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="cannot be decompressed"):
        files.plan(str(tmp_path / "broken.csv.gz"))


def test_a_dataset_of_both_layouts_says_which_folder_to_give(tmp_path):
    with dask.config.set(scheduler="synchronous"):
        gen.generate(str(tmp_path / "both"), gen.Spec(2007, 2007, loans_per_quarter=5),
                     layout="both")
    result = _run(["etl", *CPU, "--data", str(tmp_path / "both"), "--out",
                   str(tmp_path / "out")])
    refused(result, "classic, current", os.path.join(str(tmp_path / "both"), "classic"))


# ---------------------------------------------------------------------------------------------
# Every file that looks like Fannie Mae's is read once, or refused by name with the reason


@pytest.fixture
def data(tmp_path):
    """A copy of the real sample (2007Q3, classic layout) to add files to."""
    directory = tmp_path / "data"
    shutil.copytree(SAMPLE, directory)
    return directory


def _etl(data, tmp_path, *more):
    return _run(["etl", *CPU, "--data", str(data), "--out", str(tmp_path / "out"), *more])


def test_a_named_pipe_named_like_a_performance_file_is_refused_not_skipped(data, tmp_path):
    pipe = data / "Performance_2007Q3.txt_1"
    os.mkfifo(pipe)  # opening it to read would wait for a writer: it must never be opened
    result = _etl(data, tmp_path)
    refused(result, str(pipe), "named pipe")
    assert result.seconds < 10 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("delimiter, named", [(",", "',' (comma)"), ("\t", "a tab"),
                                              (";", "';'")])
def test_a_file_with_another_delimiter_among_the_others_is_refused_naming_it(
        data, tmp_path, delimiter, named):
    text = open(SAMPLE_PERF).read().replace("|", delimiter)
    odd = data / "Performance_2007Q4.txt"
    odd.write_text(text)
    refused(_etl(data, tmp_path), str(odd), "31 fields", named, "'|'")


def test_a_dataset_of_another_delimiter_names_it(tmp_path):
    data = tmp_path / "mine"
    data.mkdir()
    for source, name in [(SAMPLE_PERF, "perf.csv"), (SAMPLE_ACQ, "acq.csv")]:  # not named
        (data / name).write_text(open(source).read().replace("|", ","))
    refused(_etl(data, tmp_path), "no Fannie Mae performance files", "fields separated by "
            "',' (comma)")


@pytest.mark.parametrize("copy", ["Performance_2007Q3 (1).txt_0", "Performance_2007Q3.txt_0.bak",
                                  "Performance_2007Q3.txt_0.gz", "Acquisition_2007Q3 (2).txt"])
def test_two_copies_of_one_quarter_s_file_are_refused_naming_both(data, tmp_path, copy):
    source = data / ("Acquisition_2007Q3.txt" if copy.startswith("Acq") else
                     "Performance_2007Q3.txt_0")
    if copy.endswith(".gz"):
        _compress(source, data / copy, "gz")
    else:
        shutil.copy(source, data / copy)
    refused(_etl(data, tmp_path), "two files for the same quarter 2007Q3", str(source),
            str(data / copy))


def test_the_parts_of_a_quarter_s_split_file_are_all_read(data):
    lines = open(SAMPLE_PERF).read().splitlines(keepends=True)
    cut = next(i for i in range(5000, len(lines))
               if lines[i].split("|")[0] != lines[i - 1].split("|")[0])
    (data / "Performance_2007Q3.txt_0").write_text("".join(lines[:cut]))
    (data / "Performance_2007Q3.txt_1").write_text("".join(lines[cut:]))
    plan = files.plan(str(data))
    read_from = {piece.path for part in plan.parts for piece in part.pieces}
    assert {os.path.basename(p) for p in read_from} == {"Performance_2007Q3.txt_0",
                                                        "Performance_2007Q3.txt_1"}


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_an_empty_file_is_named_as_empty(data, tmp_path, content):
    empty = data / "Performance_2007Q4.txt"
    empty.write_bytes(content)
    refused(_etl(data, tmp_path), str(empty), "empty" if not content else "blank lines",
            "download it again")
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "2007Q3.csv").write_bytes(content)  # not "no performance files"
    refused(_etl(alone, tmp_path), "2007Q3.csv", "download it again")


def test_a_file_reached_by_two_names_is_read_once(data, tmp_path, monkeypatch):
    once = files.plan(str(data))
    perf = data / "Performance_2007Q3.txt_0"
    (data / "perf").mkdir()
    os.symlink(perf, data / "perf" / "link_to_perf.txt")
    monkeypatch.chdir(tmp_path)
    for given in ([str(data), os.path.relpath(perf)], [str(data), str(perf)]):
        again = files.plan(given)
        assert [p.pieces for p in again.parts] == [p.pieces for p in once.parts]
        assert again.input_bytes == once.input_bytes


def test_a_file_that_cannot_be_read_is_refused_naming_it(data, tmp_path, monkeypatch):
    perf = str(data / "Performance_2007Q3.txt_0")
    real = files.open_text

    def denied(path):
        if path == perf:
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(files, "open_text", denied)
    refused(_etl(data, tmp_path), perf, "cannot be read by this user", "chmod a+r")


def test_a_folder_that_cannot_be_read_is_refused_naming_it(data, tmp_path, monkeypatch):
    (data / "perf").mkdir()
    shutil.move(data / "Performance_2007Q3.txt_0", data / "perf")
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda path, mode: not str(path).endswith("perf")
                        and real(path, mode))
    refused(_etl(data, tmp_path), str(data / "perf"), "cannot be read", "chmod a+rx")


@pytest.mark.parametrize("kind", ["broken link", "download"])
def test_a_link_to_nothing_or_an_unfinished_download_is_refused(data, tmp_path, kind):
    if kind == "broken link":
        odd = data / "Performance_2007Q4.txt"
        os.symlink(tmp_path / "gone.txt", odd)
        words = ["does not exist"]
    else:
        odd = data / "Performance_2007Q4.txt.crdownload"
        odd.write_text(open(SAMPLE_PERF).read()[:5000])
        words = ["has not finished"]
    refused(_etl(data, tmp_path), str(odd), *words)


def test_files_with_windows_line_ends_or_lower_case_names_read_as_the_others(tmp_path,
                                                                             plain_table):
    crlf = tmp_path / "crlf"
    crlf.mkdir()
    for source in (SAMPLE_PERF, SAMPLE_ACQ):  # lower-case names, CR LF line ends
        name = os.path.basename(source).lower()
        (crlf / name).write_bytes(open(source, "rb").read().replace(b"\n", b"\r\n"))
    plan = files.plan(str(crlf))
    assert plan.quarters == ["2007Q3"] and list(plan.acquisitions) == ["2007Q3"]
    assert read.check_start(plan) == []
    with dask.config.set(scheduler="threads"):
        got = etl.run(plan).frame.compute()
    pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                  plain_table.reset_index(drop=True), check_exact=True)


def test_a_folder_of_more_quarters_is_refused_unless_given_too(data, tmp_path):
    more = data / "2007Q4"
    more.mkdir()
    lines = open(SAMPLE_PERF).read().replace("|07/01/2007|", "|10/01/2007|")
    (more / "Performance_2007Q4.txt").write_text(lines)
    (more / "Acquisition_2007Q4.txt").write_text(open(SAMPLE_ACQ).read())
    refused(_etl(data, tmp_path), str(more), "leaves out", f"etl --data {data} {more}")
    plan = files.plan([str(data), str(more)])  # given too: read
    assert sorted(set(plan.quarters)) == ["2007Q3", "2007Q4"]


def _bad_start(result, path, line, *words):
    """Stopped before the cluster, with the bad row named by file and line."""
    assert result.exit_code == 1, result.output
    assert "cluster:" not in result.output and "Traceback" not in result.output
    assert f"{path}:{line}: " in result.output, result.output
    for word in words:
        assert word in result.output, result.output


@pytest.mark.parametrize("flaw", ["header", "short line", "not UTF-8", "byte-order mark"])
def test_a_flaw_in_the_first_lines_is_named_before_the_etl(data, tmp_path, flaw):
    perf = data / "Performance_2007Q3.txt_0"
    lines = perf.read_bytes().splitlines(keepends=True)
    if flaw == "header":
        lines.insert(0, b"|".join(b"COLUMN_%d" % i for i in range(31)) + b"\n")
        line, words = 1, ["loan_id is not an integer"]
    elif flaw == "short line":
        lines[3] = b"|".join(lines[3].split(b"|")[:12]) + b"\n"
        line, words = 4, ["expected 31 fields, found 12"]
    elif flaw == "not UTF-8":
        lines[5] = lines[5].replace(b"|", b"|\xff", 1)
        line, words = 6, ["not UTF-8"]
    else:
        lines[0] = read.BOM + lines[0]
        line, words = 1, ["byte-order mark"]
    perf.write_bytes(b"".join(lines))
    _bad_start(_etl(data, tmp_path), perf, line, *words)
    result = _etl(data, tmp_path, "--bad-rows", "skip")  # the policy still chooses
    assert result.exit_code == 0, result.output


def test_a_loan_in_two_acquisition_files_of_a_quarter_is_named_before_the_etl(data,
                                                                              tmp_path):
    """Two datasets of one quarter that share loans (two downloads, one in part the other's):
    a loan's acquisition row twice, found in the files' first lines, before any work."""
    other = tmp_path / "other"
    shutil.copytree(data, other)
    for name in ("Performance_2007Q3.txt_0", "Acquisition_2007Q3.txt"):  # without the first loan
        path = other / name
        lines = path.read_bytes().splitlines(keepends=True)
        first_loan = lines[0].split(b"|")[0]
        path.write_bytes(b"".join(line for line in lines if line.split(b"|")[0] != first_loan))
    _bad_start(_etl(data, tmp_path, str(other)), other / "Acquisition_2007Q3.txt", 1,
               "duplicate loan_id")


def test_a_file_cut_short_at_its_end_is_named_before_the_etl(data, tmp_path):
    perf = data / "Performance_2007Q3.txt_0"
    text = perf.read_bytes()
    assert len(text) > 2 * files.HEAD
    cut = text[:len(text) - 300]  # a download that stopped in the middle of a line
    perf.write_bytes(cut)
    _bad_start(_etl(data, tmp_path), perf, cut.count(b"\n") + 1, "expected 31 fields")


def test_a_comma_delimited_member_of_an_archive_is_refused_naming_it(data, tmp_path):
    with zipfile.ZipFile(data / "2007Q4.zip", "w") as archive:
        archive.writestr("Performance_2007Q4.txt", open(SAMPLE_PERF).read().replace("|", ","))
    refused(_etl(data, tmp_path), "2007Q4.zip::Performance_2007Q4.txt", "',' (comma)")


# ---------------------------------------------------------------------------------------------
# Stopped, full or raced: one line, and nothing left behind


@pytest.fixture(scope="module")
def larger(tmp_path_factory):
    """A generated dataset with enough work for a command to be stopped in the middle of it."""
    return generated_dataset(tmp_path_factory.mktemp("larger") / "data", 1500)


def _quiet_interruption(output, code, out):
    assert code == 130, output
    assert "interrupted" in output.splitlines()[-1], output
    for noise in ("Traceback", "KeyboardInterrupt", "Aborted", "ERROR", "CancelledError"):
        assert noise not in output, output
    assert not os.path.exists(out)
    _no_leftovers(os.path.dirname(out))


def test_ctrl_c_during_the_etl_stops_it_in_one_line_and_leaves_nothing(larger, tmp_path):
    out = tmp_path / "features"
    output, code = interrupted(
        "examples.mortgage",
        ["etl", "--device", "cpu", "--workers", "2", "--data", str(larger), "--out", str(out),
         "--partition-size", "1MiB"], "ETL partitions:")
    _quiet_interruption(output, code, str(out))


def test_ctrl_c_during_generate_stops_it_in_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "data"
    output, code = interrupted(
        "examples.mortgage",
        ["generate", "--out", str(out), "--workers", "2", "--years", "2006-2007",
         "--loans-per-quarter", "2000", "--loans-per-part", "100"], "files written:")
    _quiet_interruption(output, code, str(out))


def test_a_full_disk_during_the_etl_is_one_line_and_leaves_nothing(tmp_path, monkeypatch,
                                                                   capfd):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)  # each task writes its partition
    out = tmp_path / "features"  # workers in this process (--no-processes) see the patch
    result = _run(["etl", "--device", "cpu", "--workers", "1", "--no-processes", "--data",
                   SAMPLE, "--out", str(out)])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "the disk is full" in line and "free some space" in line
    assert "Traceback" not in result.output
    assert "Compute Failed" not in capfd.readouterr().err  # the workers leave it to the command
    assert os.listdir(tmp_path) == []


def test_a_full_disk_while_generating_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from distributed import LocalCluster

    real = gen.write_part

    def fills_up(roots, spec, year, quarter, part):  # sent to the worker by value
        if (quarter, part) == (2, 1):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(roots, spec, year, quarter, part)

    monkeypatch.setattr(gen, "write_part", fills_up)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:  # its tasks see the patch
        result = _run(["generate", "--out", str(tmp_path / "data"), "--years", "2007",
                       "--loans-per-quarter", "20", "--loans-per-part", "5", "--scheduler",
                       cluster.scheduler_address])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert line.startswith("Error: the disk is full"), result.output
    assert os.listdir(tmp_path) == []


def test_two_runs_at_once_to_one_place_end_in_one_line(tmp_path, monkeypatch):
    """The second run to finish finds the first one's table where it was to write its own."""
    out = tmp_path / "features"
    real = etl._compute  # every partition written to this run's staging folder

    def another_run_finishes_first(*args, **kwargs):
        result = real(*args, **kwargs)
        with output.Staged(str(out), what="feature table") as staging:
            pd.DataFrame({"x": [1.0]}).to_parquet(os.path.join(staging, "part.0.parquet"))
        return result

    monkeypatch.setattr(etl, "_compute", another_run_finishes_first)
    result = _run(["etl", *CPU, "--data", SAMPLE, "--out", str(out)])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert str(out) in line and "another run at once" in line
    assert "Traceback" not in result.output
    assert list(pd.read_parquet(out).columns) == ["x"]  # the other run's table, untouched
    _no_leftovers(tmp_path)


def test_outputs_have_the_mode_the_umask_gives(tmp_path):
    previous = os.umask(0o027)
    try:
        with output.Staged(str(tmp_path / "table"), what="feature table") as staging:
            with open(os.path.join(staging, "part.0.parquet"), "w") as f:
                f.write("x")
        output.replace_file(str(tmp_path / "model.json"),
                            lambda path: open(path, "w").write("{}"), what="model")
    finally:
        os.umask(previous)
    assert (tmp_path / "table").stat().st_mode & 0o777 == 0o750  # not mkdtemp's 0700
    assert (tmp_path / "model.json").stat().st_mode & 0o777 == 0o640  # not mkstemp's 0600


# ---------------------------------------------------------------------------------------------
# Mistakes answered in one line, before the work


@pytest.mark.parametrize("param, words", [
    ("max_depth=abc", ["--xgb-param", "max_depth=abc", "expect int"]),
    ("nosuchparam=1", ["--xgb-param", "no parameter nosuchparam"]),
])
def test_bad_xgboost_parameters_are_refused_before_the_etl(param, words):
    refused(_run([*CPU, "--data", SAMPLE, "--xgb-param", param]), *words)


def test_an_unquoted_glob_is_read_or_explained(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    paths = sorted(str(p) for p in data.iterdir())
    result = _run([*CPU, "--data", *paths])
    refused(result, "quote the glob")
    result = _run(["etl", *CPU, "--out", str(tmp_path / "out"), "--data", *paths])
    assert result.exit_code == 0, result.output
    assert "10,000 rows" in result.output


def test_a_size_too_large_names_the_size():
    line = refused(_run(["generate", "--out", "/tmp/never", "--size", "1TB"]), "--size")
    assert "loans_per_quarter" not in line and "--years" in line


def test_two_runs_with_the_same_seed_on_four_workers_give_the_same_auc(tmp_path):
    args = ["--device", "cpu", "--workers", "4", "--years", "2007", "--loans-per-quarter",
            "300", "--rounds", "20", "--holdout", "2007Q4"]
    aucs = []
    for _ in range(2):
        result = _run(args)
        assert result.exit_code == 0, result.output
        aucs += [line for line in result.output.splitlines() if line.startswith("test AUC")]
    assert len(aucs) == 2 and aucs[0] == aucs[1]


def test_xgboost_rank_lines_are_dropped_from_the_output(capfd):
    """The processes started in the block write through the filter, to the end; this process's
    own standard error is itself again after the block."""
    import subprocess

    with without_xgboost_rank_lines():
        os.write(2, b"[10:31:05] Task [xgboost.dask-0]:tcp://127.0.0.1:4000 got rank 0"
                    b"[10:31:05] Task [xgboost.dask-1]:tcp://127.0.0.1:4001 got rank 1\n\n")
        os.write(2, b"a warning the user should see\n")
        worker = subprocess.Popen(
            ["sh", "-c", "read line; echo '[10:31:06] Task [xgboost.dask-2]:tcp://h:1 got rank"
             " 2' >&2; echo 'from a worker process' >&2"], stdin=subprocess.PIPE)
    os.write(2, b"after the block\n")
    worker.communicate(b"go\n")  # the worker writes after the block has ended
    deadline = time.perf_counter() + 5
    err = ""
    while time.perf_counter() < deadline and "from a worker" not in err:
        time.sleep(0.05)
        err += capfd.readouterr().err
    assert sorted(err.splitlines()) == ["a warning the user should see", "after the block",
                                        "from a worker process"]


def test_a_bad_memory_option_in_the_environment_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("DASK_GPU_INTEROP__MEMORY__POOL_SIZE", "banana")
    dask.config.refresh()
    try:
        line = refused(_run(["etl", *CPU, "--data", SAMPLE, "--out", str(tmp_path / "out")]),
                       "DASK_GPU_INTEROP__MEMORY__POOL_SIZE=banana", "not a size")
    finally:
        monkeypatch.delenv("DASK_GPU_INTEROP__MEMORY__POOL_SIZE")
        dask.config.refresh()
    assert "--pool-size" not in line

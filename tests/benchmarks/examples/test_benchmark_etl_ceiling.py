"""The ETL-ceiling benchmark on CPUs: the reader's jobs cover every file the ETL reads, and a
reader's passes are timed in a process of its own (the first discarded)."""

from __future__ import annotations

import dask

from benchmarks.examples import etl_ceiling


def test_the_cpu_reader_reads_every_file_in_a_process_of_its_own(tmp_path):
    from examples.mortgage.testdata import generate as gen

    spec = gen.Spec(2007, 2007, loans_per_quarter=20, loans_per_part=20, seed=1)
    with dask.config.set(scheduler="synchronous"):
        made = gen.generate(str(tmp_path / "data"), spec)
    jobs = etl_ceiling.read_jobs(made.directory)
    files = sorted(str(p) for p in (tmp_path / "data").rglob("*_2007Q*"))
    assert sorted(path for path, *_ in jobs) == files
    assert all("int64" in dtypes.values() for *_, dtypes in jobs)  # the loan id
    seconds = etl_ceiling.timed_in_child(f"jobs = m.read_jobs({made.directory!r})",
                                         "m.cpu_reader(jobs)", 2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)

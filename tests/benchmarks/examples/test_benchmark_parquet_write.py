"""The Parquet-write benchmark: the etl command's way is the example's own write, the host
buffer's file is the same bytes as the direct write's, its table compares every way with the
etl command's, and bad arguments are one line. The GPU ways run on the GPU machine."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.examples import parquet_write


def test_the_etl_way_is_the_examples_write(monkeypatch, tmp_path):
    from examples.mortgage import etl

    called = []
    monkeypatch.setattr(etl, "write_table", lambda path, table: called.append((path, table)))
    parquet_write.WAYS["etl"]("table", str(tmp_path / "x.parquet"))
    assert called == [(str(tmp_path / "x.parquet"), "table")]


def test_the_host_buffer_writes_the_same_file_as_the_direct_write(tmp_path):
    frame = pd.DataFrame({"a": range(1000), "b": [float(i) / 3 for i in range(1000)]})
    frame.to_parquet(tmp_path / "direct.parquet", index=False)
    parquet_write.WAYS["host buffer"](frame, str(tmp_path / "buffered.parquet"))
    buffered = (tmp_path / "buffered.parquet").read_bytes()
    assert buffered == (tmp_path / "direct.parquet").read_bytes()


def test_the_table_compares_each_way_with_the_etl_commands():
    def runs(*seconds, size=2**20, same=True):
        return [{"table": 0, "seconds": s, "bytes": size, "same rows": same} for s in seconds]

    payload = {"command": "python -m benchmarks.examples.parquet_write --data D", "machine": {},
               "commit": "abc", "date": "d",
               "tables": [{"rows": 10, "columns": 2, "device_bytes": 2**20}],
               "ways": {"etl": runs(0.2, 0.1, 0.3), "zstd": runs(0.3, size=2**19),
                        "pyarrow": runs(1.0, same=False), "lz4": []}}
    text = parquet_write.markdown(payload)
    assert "| etl | 0.200 (0.100-0.300) | 1.0 | 1.00 | yes |" in text
    assert "| zstd | 0.300 (0.300-0.300) | 0.5 | 1.50 | yes |" in text
    assert "| pyarrow | 1.000 (1.000-1.000) | 1.0 | 5.00 | no |" in text
    assert "| lz4 |" not in text


@pytest.mark.parametrize("argv", [["--partitions", "0"], ["--rounds", "0"]])
def test_bad_arguments_are_one_line(capsys, argv):
    with pytest.raises(SystemExit):
        parquet_write.parse(["--data", "/tmp/d", *argv])
    assert "at least 1" in capsys.readouterr().err

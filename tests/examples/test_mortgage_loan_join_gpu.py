"""The join by loan on GPU workers (cuDF partitions, the library's shuffle and dask's): the same
feature table as the per-quarter join, on one GPU and across two. Skipped without a GPU (two
for the multi_gpu test)."""

from __future__ import annotations

import importlib.util
import os

import dask
import pytest

from dask_gpu_interop.device import gpu_count
from examples.mortgage import etl, files
from examples.mortgage.testdata import generate as gen

from .mortgage_rows import move_acquisition_row, sorted_rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_count() == 0 or importlib.util.find_spec("dask_cudf") is None,
                       reason="needs a GPU and dask-cudf"),
]


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("loan-join-gpu"))
    spec = gen.Spec(2006, 2007, loans_per_quarter=500, loans_per_part=200, seed=7)
    with dask.config.set(scheduler="synchronous"):
        return gen.generate(directory, spec).directory


def _tables(workers: int, plan, joins=("quarter", "loan", "dask")) -> dict:
    """Each join's feature table (pandas, rows sorted) and ETL result on ``workers`` GPUs."""
    from dask_gpu_interop import cluster_client

    out = {}
    with cluster_client(device="gpu", n_workers=workers,
                        memory={"pool_size": "0.2"}) as (client, device):
        assert device == "gpu" and len(client.nthreads()) == workers
        for join in joins:
            result = etl.run(plan, device="gpu", join=join)
            out[join] = (result, sorted_rows(result.frame.compute().to_pandas()))
    return out


def _plan(directory):
    return files.plan(directory, partition_size="1MiB").balanced(4, 2**20)


def test_on_one_gpu_the_join_by_loan_equals_the_join_by_quarter(classic, tmp_path):
    import pandas as pd

    tables = _tables(1, _plan(classic))
    for join in ("loan", "dask"):
        pd.testing.assert_frame_equal(tables[join][1], tables["quarter"][1], check_exact=True)
    assert len(tables["loan"][0].shuffles) == 1 + len(set(_plan(classic).quarters))
    # a loan's acquisition row in another quarter's file: found by loan, as before the move
    moved = str(tmp_path / "moved")
    move_acquisition_row(classic, moved)
    got = _tables(1, _plan(moved), ("loan",))
    pd.testing.assert_frame_equal(got["loan"][1], tables["quarter"][1], check_exact=True)


@pytest.mark.multi_gpu
def test_across_two_gpus_the_join_by_loan_equals_the_join_by_quarter(classic):
    import pandas as pd

    if gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    tables = _tables(2, _plan(classic))
    for join in ("loan", "dask"):
        pd.testing.assert_frame_equal(tables[join][1], tables["quarter"][1], check_exact=True)
    shuffles = tables["loan"][0].shuffles
    assert shuffles and any(not line.split(": ", 2)[-1].startswith("0 B crossed")
                            for line in shuffles)


def test_the_etl_command_with_join_loan_on_the_gpus(classic, tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from examples.mortgage.cli import mortgage as main

    workers = min(gpu_count(), 2)
    tables = {}
    for join in ("quarter", "loan"):
        out = tmp_path / join
        result = CliRunner().invoke(main, ["etl", "--device", "gpu", "--workers", str(workers),
                                           "--data", classic, "--out", str(out), "--join", join],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        tables[join] = sorted_rows(pd.read_parquet(out))
    pd.testing.assert_frame_equal(tables["loan"], tables["quarter"], check_exact=True)
    assert os.path.exists(tmp_path / "loan")

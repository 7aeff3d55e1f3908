"""The ECG pipeline on a GPU: zero-copy hand-offs (by pointer) and agreement with the CPU path.

Skipped where there is no GPU, or no CuPy, Numba CUDA, cuDF or CUDA PyTorch.
Run on a GPU machine: ``python -m pytest tests/test_ecg_gpu.py -q -m gpu``.
"""

import importlib

import numpy as np
import pytest

from dask_gpu_interop import device
from examples.ecg import detect, metrics, reader, vae
from examples.ecg.backend import Backend
from examples.ecg.embed import embed_beats
from examples.ecg.handoff import (
    as_numba_device_array,
    column_to_array,
    data_pointer,
    from_torch,
    to_torch,
)
from examples.ecg.nms import local_maxima
from examples.ecg.params import Params
from examples.ecg.pipeline import evaluate, find_beats, run
from examples.ecg.synthetic import make_ecg, write_csv

pytestmark = pytest.mark.gpu
RATE = 250.0
CPU = Backend("cpu")


@pytest.fixture(scope="module")
def gpu():
    if device.gpu_count() == 0:
        pytest.skip("no CUDA GPU visible")
    for name in ("cupy", "numba.cuda", "cudf", "torch"):
        try:
            importlib.import_module(name)
        except ImportError as err:
            pytest.skip(f"{name} is not importable: {err}")
    import torch
    from numba import cuda

    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    if not cuda.is_available():
        pytest.skip("Numba sees no CUDA device")
    return Backend("gpu")


@pytest.fixture(scope="module")
def ecg():
    return make_ecg(600, RATE, seed=7)


@pytest.fixture(scope="module")
def csv_file(ecg, tmp_path_factory):
    path = tmp_path_factory.mktemp("ecg-gpu") / "ecg.csv"
    write_csv(path, ecg.signal)
    return path


# -- zero-copy hand-offs --------------------------------------------------------------------

def test_cudf_column_to_cupy_is_zero_copy(gpu, csv_file):
    import cudf
    import cupy

    frame = cudf.read_csv(csv_file, dtype={"ecg": "float32"})
    series = frame["ecg"]
    array = column_to_array(series, gpu)
    assert isinstance(array, cupy.ndarray) and array.dtype == np.float32
    assert data_pointer(array) == data_pointer(series)


def test_reader_partitions_become_arrays_without_copies(gpu, csv_file):
    frame = reader.read_csv(csv_file, gpu, blocksize="1MB")
    part = frame.partitions[0].compute()
    array = reader._column(part, gpu)
    assert data_pointer(array) == data_pointer(part["ecg"])


@pytest.mark.parametrize("header", ["ecg", None])
def test_reader_agrees_with_pandas_and_libcudf_warns_of_nothing(gpu, ecg, tmp_path, capfd,
                                                               header):
    """Blocks read on the GPU hold the CPU reader's values, and libcudf, which warns on every
    read left to detect an in-memory buffer's compression, says nothing."""
    path = tmp_path / "ecg.csv"
    write_csv(path, ecg.signal, header=header)
    capfd.readouterr()
    frame = reader.read_csv(path, gpu, blocksize=200_000)
    got = frame.compute()
    err = capfd.readouterr().err
    assert frame.npartitions > 1
    expected = reader.read_csv(path, CPU, blocksize=200_000).compute()
    np.testing.assert_array_equal(got["ecg"].to_numpy(), expected["ecg"].to_numpy())
    assert "compression" not in err, err


def test_cupy_to_numba_is_zero_copy(gpu):
    x = gpu.xp.arange(1000, dtype=gpu.xp.float32)
    view = as_numba_device_array(x)
    assert data_pointer(view) == data_pointer(x) == x.data.ptr


def test_cupy_to_torch_and_back_is_zero_copy(gpu):
    x = gpu.xp.random.default_rng(0).standard_normal((64, 256), dtype=gpu.xp.float32)
    tensor = to_torch(x)
    assert tensor.is_cuda and tensor.data_ptr() == data_pointer(x)
    back = from_torch(tensor, gpu)
    assert data_pointer(back) == data_pointer(x)


def test_embeddings_enter_the_vae_without_a_copy(gpu, ecg):
    signal = gpu.xp.asarray(ecg.signal)
    table = detect.beat_table(ecg.peaks, RATE, Params(), len(ecg.signal))
    kept = np.flatnonzero(table.kept)
    emb = embed_beats(signal, table.starts[kept], table.ends[kept], gpu)
    assert isinstance(emb, gpu.xp.ndarray)
    tensor = vae._as_tensor(emb, gpu)
    assert tensor.data_ptr() == data_pointer(emb)


def test_the_vae_steps_replay_as_a_cuda_graph_and_learn_as_ordinary_ones(gpu, ecg):
    signal = gpu.xp.asarray(ecg.signal)
    table = detect.beat_table(ecg.peaks, RATE, Params(), len(ecg.signal))
    kept = np.flatnonzero(table.kept)
    emb = embed_beats(signal, table.starts[kept], table.ends[kept], gpu)
    params = Params(max_steps=200, batch_size=64)
    graphed = vae.train(emb, params, "gpu")
    plain = vae.train(emb, params, "gpu", graphed=False)
    assert (graphed["graphed"], plain["graphed"]) == (True, False)
    assert graphed["steps"] == plain["steps"] == 200
    for state in (graphed, plain):
        assert state["history"][-1] < 0.5 * state["history"][0], state["history"]
    assert abs(graphed["history"][-1] - plain["history"][-1]) < 0.25 * plain["history"][-1]


def test_kernels_read_and_write_cupy_memory_in_place(gpu):
    """The NMS kernel writes its mask into a CuPy array through a Numba view of it."""
    r = gpu.xp.asarray(np.array([0, 1, 3, 1, 0, 0, 5, 5, 1, 0], dtype=np.float32))
    got = local_maxima(r, 0, len(r), 2, gpu)
    assert isinstance(got, gpu.xp.ndarray)
    np.testing.assert_array_equal(gpu.to_host(got), [2, 6])


# -- the GPU and the CPU agree ---------------------------------------------------------------

def test_convolution_agrees(gpu, ecg):
    p = Params()
    k = detect.ricker(p.ricker_sigma(RATE), p.ricker_half_width(RATE))
    cpu = detect.convolve(ecg.signal, k, CPU)
    dev = detect.convolve(gpu.xp.asarray(ecg.signal), gpu.xp.asarray(k), gpu)
    np.testing.assert_allclose(gpu.to_host(dev), cpu, atol=1e-4 * float(cpu.max()))


def test_nms_kernel_agrees_exactly_on_the_same_response(gpu, ecg):
    p = Params()
    r = detect.convolve(ecg.signal, detect.ricker(p.ricker_sigma(RATE), p.ricker_half_width(RATE)), CPU)
    w = p.nms_half_window(RATE)
    for lo, hi in [(0, len(r)), (1234, 56_789), (len(r) - 100, len(r))]:
        np.testing.assert_array_equal(gpu.to_host(local_maxima(gpu.xp.asarray(r), lo, hi, w, gpu)),
                                      local_maxima(r, lo, hi, w, CPU))


def test_embedding_kernel_agrees(gpu, ecg):
    table = detect.beat_table(ecg.peaks, RATE, Params(), len(ecg.signal))
    kept = np.flatnonzero(table.kept)
    cpu = embed_beats(ecg.signal, table.starts[kept], table.ends[kept], CPU)
    dev = embed_beats(gpu.xp.asarray(ecg.signal), table.starts[kept], table.ends[kept], gpu)
    np.testing.assert_allclose(gpu.to_host(dev), cpu, atol=1e-4)


def test_beats_found_agree_within_one_sample(gpu, ecg):
    cpu = find_beats(ecg.signal, RATE, device="cpu", chunks=30_000).positions
    dev = find_beats(ecg.signal, RATE, device="gpu", chunks=30_000).positions
    assert len(dev) == len(cpu)
    for_dev, _ = metrics.match(dev, cpu, tolerance=1)
    assert np.all(for_dev >= 0)


def test_whole_pipeline_on_a_gpu_cluster(gpu, ecg, csv_file):
    """On a dask-cuda worker process with the memory plugin (this test process has used
    PyTorch on the GPU already, which an in-process worker could not bind): scores,
    agreement, and every framework allocating from the worker's RMM resource."""
    from dask_gpu_interop import memory_report
    from dask_gpu_interop.cluster import cluster_client

    with cluster_client(device="gpu", n_workers=1, processes=True) as (client, dev):
        assert dev == "gpu"
        result = run(csv_file, RATE, device="gpu")
        report = memory_report(client)
    scores = evaluate(result, ecg)
    print(f"\nGPU pipeline: {scores}\ntimes: {result.times}\n{report}")
    assert scores["detection"]["f1"] >= 0.98
    assert scores["outliers"]["auc"] >= 0.9
    cpu = find_beats(ecg.signal, RATE, device="cpu").positions
    for_dev, _ = metrics.match(result.beats.positions, cpu, tolerance=1)
    assert len(result.beats) == len(cpu) and np.all(for_dev >= 0)
    for snapshot in report.values():
        assert snapshot["status"] == "active", snapshot
        for name in ("cupy", "numba", "torch"):
            assert snapshot["frameworks"][name]["state"] == "bound", (name, snapshot)

"""The ECG pipeline's pieces on the CPU, each against a plain reference computation."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.ecg import chunks, detect, metrics, reader, synthetic
from examples.ecg.backend import Backend
from examples.ecg.embed import EDGE, embed_beats
from examples.ecg.nms import local_maxima
from examples.ecg.params import EMBED_SIZE, Params, check_rate

from .extras import requirements_of

CPU = Backend("cpu")


def test_ecg_modules_import_no_gpu_library_numba_or_torch():
    code = (
        "import sys\n"
        "import examples.ecg.cli, examples.ecg.pipeline\n"
        "import examples.ecg.nms, examples.ecg.embed\n"
        "import examples.ecg.vae, examples.ecg.plots\n"
        "import examples.ecg.records\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'cupy', 'numba', 'cudf', 'rmm', 'matplotlib'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- the wavelet and the convolution --------------------------------------------------------

def test_ricker_is_zero_mean_symmetric_and_peaks_in_the_middle():
    w = detect.ricker(4.0, 20)
    assert len(w) == 41 and w.dtype == np.float32
    assert abs(float(w.sum())) < 1e-6
    np.testing.assert_allclose(w, w[::-1])
    assert int(np.argmax(w)) == 20 and w[20] > 0 and w[0] < 0.01


def test_ricker_is_sized_to_the_qrs_at_the_rate():
    p = Params()
    assert p.ricker_sigma(360) == pytest.approx(p.ricker_sigma(250) * 360 / 250)
    assert p.ricker_half_width(250) >= 5 * p.ricker_sigma(250)


@pytest.mark.parametrize("n", [1, 7, 100, 1001, 4096])
def test_fft_convolution_matches_direct_convolution(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    k = detect.ricker(3.0, 15)
    expected = np.abs(np.convolve(x.astype(np.float64), k.astype(np.float64), mode="same"))
    if n < len(k):  # np.convolve's "same" follows the longer input
        full = np.convolve(x.astype(np.float64), k.astype(np.float64), mode="full")
        expected = np.abs(full[15:15 + n])
    got = detect.convolve(x, k, CPU)
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_allclose(got, expected, atol=2e-5 * max(1.0, float(np.abs(expected).max())))


def test_fast_fft_lengths():
    for n in [1, 2, 7, 11, 97, 1000, 1025, 300_051]:
        m = detect._fast_length(n)
        assert m >= n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        assert m == 1


# -- non-maximum suppression ----------------------------------------------------------------

def brute_force_maxima(r, lo, hi, w):
    keep = []
    for i in range(lo, hi):
        window = r[max(0, i - w):i + w + 1]
        first = max(0, i - w) + int(np.argmax(window))
        if r[i] > 0 and first == i:
            keep.append(i)
    return np.array(keep, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 6), min_size=1, max_size=120),
    w=st.integers(1, 9),
    cut=st.tuples(st.integers(0, 130), st.integers(0, 130)),
)
def test_nms_matches_brute_force_with_plateaus_and_edges(values, w, cut):
    r = np.array(values, dtype=np.float32)
    lo, hi = min(cut), max(cut)
    got = local_maxima(r, lo, hi, w, CPU)
    expected = brute_force_maxima(r, max(0, lo), min(len(r), hi), w)
    np.testing.assert_array_equal(got, expected)
    assert np.all(np.diff(got) > w)  # never two beats within the half-window


def test_nms_rejects_a_2d_response():
    with pytest.raises(ValueError, match="1-D"):
        local_maxima(np.zeros((3, 3), np.float32), 0, 3, 1, CPU)


# -- embedding ------------------------------------------------------------------------------

def reference_embedding(x, start, end):
    t = np.linspace(start, end, EMBED_SIZE)
    y = np.interp(t, np.arange(len(x)), x.astype(np.float64))
    head, tail = y[:EDGE].mean(), y[-EDGE:].mean()
    line = head + (tail - head) * (np.arange(EMBED_SIZE) - (EDGE - 1) / 2) / (EMBED_SIZE - EDGE)
    return y - line


def test_embedding_resamples_and_removes_the_baseline():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(2000) + np.linspace(0, 5, 2000)).astype(np.float32)
    starts = np.array([0.0, 10.5, 333.25, 1500.0])
    ends = np.array([200.0, 180.0, 700.9, 1997.0])
    got = embed_beats(x, starts, ends, CPU)
    assert got.shape == (4, EMBED_SIZE) and got.dtype == np.float32
    for b in range(4):
        np.testing.assert_allclose(got[b], reference_embedding(x, starts[b], ends[b]), atol=1e-4)


def test_a_pure_ramp_embeds_to_zero():
    x = np.linspace(-3, 7, 1000, dtype=np.float32)
    got = embed_beats(x, np.array([100.0]), np.array([900.0]), CPU)
    np.testing.assert_allclose(got, 0, atol=1e-4)


def test_embedding_refuses_beats_outside_the_signal():
    with pytest.raises(ValueError, match="outside"):
        embed_beats(np.zeros(100, np.float32), np.array([50.0]), np.array([99.5]), CPU)


# -- beat lengths and pruning ---------------------------------------------------------------

def test_beat_table_lengths_pruning_and_segments():
    rate = 100.0
    p = Params()
    # 80 samples = 0.8 s apart, then a 3 s gap (too long), then regular again.
    positions = np.array([100, 180, 260, 340, 640, 720, 800, 880])
    t = detect.beat_table(positions, rate, p, samples=1000)
    np.testing.assert_array_equal(t.lengths[:-1], np.diff(positions))
    assert np.isnan(t.lengths[-1])
    # first and last have one neighbour; 340 and 640 border the gap
    np.testing.assert_array_equal(t.kept, [False, True, True, False, False, True, True, False])
    kept = np.flatnonzero(t.kept)
    np.testing.assert_allclose(t.starts[kept], positions[kept] - p.before_fraction * 80)
    np.testing.assert_allclose(t.ends[kept], positions[kept] + p.after_fraction * 80)


def test_a_premature_beat_does_not_squeeze_its_neighbours_segments():
    positions = np.arange(20) * 200
    positions[10] -= 80  # premature by 40%
    t = detect.beat_table(positions, 250.0, Params(), samples=5000)
    widths = (t.ends - t.starts)[t.kept]
    np.testing.assert_allclose(widths, widths[0])  # the local median is still 200


def test_beat_table_of_too_few_beats():
    for positions in ([], [5], [5, 200]):
        t = detect.beat_table(positions, 250.0, Params())
        assert not t.kept.any() and len(t) == len(positions)


# -- metrics --------------------------------------------------------------------------------

def test_match_is_one_to_one_within_tolerance():
    detected = [10, 100, 104, 300, 500]
    truth = [12, 102, 290, 400]
    for_detected, for_truth = metrics.match(detected, truth, 5)
    np.testing.assert_array_equal(for_detected, [0, 1, -1, -1, -1])
    np.testing.assert_array_equal(for_truth, [0, 1, -1, -1])
    d = metrics.detection_scores(detected, truth, rate=100.0, tolerance_seconds=0.05)
    assert (d["tp"], d["fp"], d["fn"]) == (2, 3, 2)
    assert d["f1"] == pytest.approx(4 / 9)


def test_roc_auc_against_pairwise_counting():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 10, 200).astype(float)  # many ties
    labels = rng.random(200) < 0.2
    pos, neg = scores[labels], scores[~labels]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert metrics.roc_auc(scores, labels) == pytest.approx(pairs)
    assert np.isnan(metrics.roc_auc([1, 2], [False, False]))


# -- chunks ---------------------------------------------------------------------------------

def test_windows_own_every_sample_once_and_read_the_overlap():
    sizes = (3, 1, 10, 0, 2, 25)
    ws = chunks.windows(sizes, overlap=4)
    owned = np.concatenate([np.arange(w.start, w.stop) for w in ws])
    np.testing.assert_array_equal(owned, np.arange(sum(sizes)))
    for w in ws:
        assert w.read_start == max(0, w.start - 4) and w.read_stop == min(41, w.stop + 4)
        assert w.hi - w.lo == w.stop - w.start
    spans = chunks.bounds(sizes)
    np.testing.assert_array_equal(chunks.owner([0, 2, 3, 4, 13, 14, 40], spans),
                                  [0, 0, 1, 2, 2, 3, 4])
    assert sum(chunks.even_chunks(10, 3)) == 10 and chunks.even_chunks(10, 3) == (4, 3, 3)


# -- settings and inputs --------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(qrs_seconds=0), "qrs_seconds"),
        (dict(threshold_fraction=1.5), "threshold_fraction"),
        (dict(min_beat_seconds=3.0), "below max_beat_seconds"),
        (dict(nms_seconds=0.3), "suppress beats"),
        (dict(kl_weight=-1), "kl_weight"),
        (dict(train_fraction=1.0), "train_fraction"),
    ],
)
def test_bad_params_are_refused_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Params(**kwargs)


def test_rates_too_low_or_not_numbers_are_refused():
    assert check_rate("360") == 360.0
    for bad in (10, "fast", float("nan")):
        with pytest.raises(ValueError, match="rate"):
            check_rate(bad)


def test_csv_header_sniffing(tmp_path):
    with_header = tmp_path / "a.csv"
    with_header.write_text("ecg\n0.1\n0.2\n")
    bare = tmp_path / "b.csv"
    bare.write_text("0.1\n0.2\n")
    two = tmp_path / "c.csv"
    two.write_text("0.0,0.1\n0.004,0.2\n")
    assert reader.has_header(with_header) and not reader.has_header(bare)
    assert not reader.has_header(two, column=1)
    with pytest.raises(ValueError, match="column 2"):
        reader.has_header(two, column=2)
    with pytest.raises(FileNotFoundError, match="no such ECG file"):
        reader.read_csv(tmp_path / "missing.csv", CPU)


def test_csv_with_or_without_header_and_with_more_columns(tmp_path):
    x = np.round(np.sin(np.arange(3000) / 7), 4).astype(np.float32)
    files = {
        "plain.csv": ("\n".join(f"{v:.4f}" for v in x), 0),
        "header.csv": ("mV\n" + "\n".join(f"{v:.4f}" for v in x), 0),
        "two.csv": ("t,ecg\n" + "\n".join(f"{i / 250:.3f},{v:.4f}" for i, v in enumerate(x)), 1),
    }
    for name, (text, column) in files.items():
        path = tmp_path / name
        path.write_text(text + "\n")
        frame = reader.read_csv(path, CPU, column=column, blocksize=5000)
        assert frame.npartitions > 1 and list(frame.columns) == ["ecg"]
        lengths = list(frame.map_partitions(len).compute())
        got = reader.frame_to_array(frame, lengths, CPU).compute()
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, x)


class _CudfReadCsv:
    """``cudf.read_csv`` as far as the reader uses it, on pandas: the rows that start inside
    ``byte_range`` of the file at a path. It records each call's source and options."""

    def __init__(self):
        self.calls = []

    def __call__(self, source, *, byte_range, header="infer", names=None, usecols=None,
                 dtype=None, **options):
        import io

        import pandas as pd

        self.calls.append((source, {"byte_range": byte_range, **options}))
        with open(source, "rb") as f:
            data = f.read()

        def row_start(pos):  # where the first row starting at or after ``pos`` begins
            if pos <= 0 or pos >= len(data):
                return min(max(pos, 0), len(data))
            newline = data.find(b"\n", pos - 1)
            return len(data) if newline < 0 else newline + 1

        start, size = byte_range
        text = data[row_start(start):row_start(start + size)]
        if not text:
            columns = [names[i] for i in usecols] if usecols else names
            return pd.DataFrame({c: pd.Series([], dtype=dtype) for c in columns})
        return pd.read_csv(io.BytesIO(text), header=header, names=names, usecols=usecols,
                           dtype=dtype)


def test_gpu_reader_reads_each_block_from_the_file_saying_it_is_not_compressed(
        tmp_path, monkeypatch):
    """The GPU path's own code on the CPU: a stand-in ``cudf`` parses with pandas. libcudf
    warns on every read that leaves the compression to be detected from an in-memory
    buffer; here every call reads the file at its path and says ``compression=None``."""
    import types

    import dask
    import pandas as pd

    read_csv = _CudfReadCsv()
    monkeypatch.setitem(sys.modules, "cudf", types.SimpleNamespace(
        read_csv=read_csv, DataFrame=pd.DataFrame, Series=pd.Series))
    x = np.round(np.sin(np.arange(3000) / 7), 4).astype(np.float32)
    files = {
        "plain.csv": ("\n".join(f"{v:.4f}" for v in x), 0),
        "header.csv": ("mV\n" + "\n".join(f"{v:.4f}" for v in x), 0),
        "two.csv": ("t,ecg\n" + "\n".join(f"{i / 250:.3f},{v:.4f}" for i, v in enumerate(x)), 1),
    }
    for name, (text, column) in files.items():
        path = tmp_path / name
        path.write_text(text + "\n")
        read_csv.calls.clear()
        frame = reader.read_csv(path, Backend("gpu"), column=column, blocksize=5000)
        assert frame.npartitions > 1 and list(frame.columns) == ["ecg"]
        with dask.config.set(scheduler="sync"):
            got = frame.compute()
        np.testing.assert_array_equal(got["ecg"].to_numpy(), x)
        assert got["ecg"].dtype == np.float32
        assert len(read_csv.calls) == frame.npartitions
        for source, options in read_csv.calls:
            assert source == str(path)  # the file itself, never a buffer
            assert "compression" in options and options["compression"] is None


def test_a_compressed_recording_is_refused_with_what_to_do(tmp_path):
    import gzip

    path = tmp_path / "ecg.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(f"{v:.4f}" for v in np.sin(np.arange(3000) / 7)) + "\n")
    with pytest.raises(ValueError, match="gzip-compressed file.*decompress it first"):
        reader.read_csv(path, CPU)


def test_without_pytorch_the_command_names_an_install_that_brings_it(tmp_path, monkeypatch):
    import re

    from click.testing import CliRunner

    from examples.ecg.cli import ecg as main

    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed
    result = CliRunner().invoke(main, ["--device", "cpu", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    extras = re.findall(r"pip install 'dask-gpu-interop\[([^\]]+)\]'", lines[0])
    assert extras, lines[0]
    for extra in extras:
        assert "torch" in requirements_of(extra), f"[{extra}] brings no PyTorch: {lines[0]}"
    # A plain `torch` requirement pulls the CUDA build: without a GPU, the CPU build first.
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in lines[0]
    assert not (tmp_path / "out").exists()  # said before any work


def test_a_gap_in_the_recording_is_refused():
    import pandas as pd

    from examples.ecg.handoff import column_to_array

    with pytest.raises(ValueError, match="missing values"):
        column_to_array(pd.Series([0.1, None, 0.3], name="ecg"), CPU)


def test_cpu_handoffs_share_memory():
    import pandas as pd

    pytest.importorskip("torch")

    from examples.ecg.handoff import column_to_array, data_pointer, to_torch

    series = pd.Series(np.arange(10, dtype=np.float32), name="ecg")
    array = column_to_array(series, CPU)
    assert data_pointer(array) == data_pointer(series)
    assert to_torch(array).data_ptr() == data_pointer(array)


# -- the synthetic recording ----------------------------------------------------------------

def test_synthetic_ecg_is_reproducible_and_has_its_abnormal_beats():
    a = synthetic.make_ecg(300, 250, seed=4, abnormal_fraction=0.05)
    b = synthetic.make_ecg(300, 250, seed=4, abnormal_fraction=0.05)
    np.testing.assert_array_equal(a.signal, b.signal)
    assert len(a.signal) == 75_000 and a.signal.dtype == np.float32
    assert 300 < len(a.peaks) < 450  # about 72 bpm
    assert set(np.unique(a.kinds)) <= {0, 1, 2} and a.abnormal.sum() >= 5
    assert not np.any(a.abnormal[1:] & a.abnormal[:-1])
    rr = np.diff(a.peaks) / 250
    pvc = np.flatnonzero(a.kinds == synthetic.PVC)
    pvc = pvc[(pvc > 0) & (pvc < len(rr))]
    assert np.all(rr[pvc - 1] < np.median(rr))  # premature
    assert np.all(rr[pvc] > np.median(rr))  # compensatory pause
    # the R peak is the largest deflection of a normal beat (up to noise and wander)
    normal = np.flatnonzero(a.kinds == 0)[5:15]
    for p in a.peaks[normal]:
        assert abs(int(np.argmax(a.signal[p - 10:p + 11])) - 10) <= 2


def test_write_csv_round_trips(tmp_path):
    import pandas as pd

    x = synthetic.make_ecg(10, 250, seed=0).signal
    path = tmp_path / "x.csv"
    synthetic.write_csv(path, x)
    back = pd.read_csv(path)["ecg"].to_numpy()
    np.testing.assert_allclose(back, x, atol=5e-5)
    with pytest.raises(ValueError, match="1-D"):
        synthetic.write_csv(path, np.zeros((2, 2)))


def test_write_csv_keeps_the_order_across_blocks_and_writes_plain_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(synthetic, "_CSV_BLOCK", 7)  # many blocks, more than threads
    x = np.arange(200, dtype=np.float64) / 3 - 30
    x[:3] = [-0.00001, 0.00004, 1e-4]
    path = tmp_path / "x.csv"
    synthetic.write_csv(path, x, header=None)
    lines = path.read_text().splitlines()
    assert len(lines) == len(x)
    assert lines[:3] == ["0", "0", "0.0001"]  # rounded to 4 places, no "-0", no exponent
    np.testing.assert_allclose(np.array(lines, dtype=float), np.round(x, 4), atol=1e-12)
    synthetic.write_csv(path, np.empty(0), header="ecg")
    assert path.read_text() == "ecg\n"


def test_the_vae_s_adam_makes_torch_optim_adam_s_update():
    torch = pytest.importorskip("torch")
    from examples.ecg.vae import Adam

    generator = torch.Generator().manual_seed(0)
    ours = [torch.randn(7, 5, generator=generator, requires_grad=True) for _ in range(3)]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    adam, reference = Adam(ours, lr=2e-3), torch.optim.Adam(theirs, lr=2e-3)
    for step in range(50):
        scale = 1.0 if step % 3 == 0 else 1e-3  # gradients of changing size: the bias matters
        grads = [scale * torch.randn(7, 5, generator=generator) for _ in ours]
        for params, optimizer in ((ours, adam), (theirs, reference)):
            optimizer.zero_grad()
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(ours, theirs, strict=True))
    start = [p.detach() for p in ours]
    assert moved < 1e-5
    assert float(adam.count) == 50
    adam.zero_grad()
    assert all(p.grad is None for p in ours)
    assert all(torch.equal(p, q) for p, q in zip(ours, start, strict=True))


def test_training_the_vae_imports_no_torch_dynamo():
    pytest.importorskip("torch")
    code = (
        "import sys\n"
        "from dataclasses import replace\n"
        "import numpy as np\n"
        "from examples.ecg import vae\n"
        "from examples.ecg.params import Params\n"
        "beats = np.random.default_rng(0).standard_normal((600, 256), dtype=np.float32)\n"
        "state = vae.train(beats, replace(Params(), max_steps=6), 'cpu')\n"
        "print(state['steps'], 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["6", "False"]


def test_the_warm_up_imports_torch_and_runs_the_stages_kernels():
    pytest.importorskip("torch")
    code = (
        "import sys, threading\n"
        "from examples.ecg import embed, nms, pipeline, vae\n"
        "pipeline.warm_up_in_background('cpu')\n"
        "for thread in threading.enumerate():\n"
        "    if thread.name == 'ecg-warm-up':\n"
        "        thread.join()\n"
        "print(nms._cpu_function.cache_info().currsize, embed._cpu_function.cache_info().currsize,"
        " 'torch' in sys.modules, vae._model_class.cache_info().currsize)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1", "True", "1"]


def test_the_scoring_warm_up_leaves_the_seeds_draws_as_they_were():
    torch = pytest.importorskip("torch")
    from examples.ecg import vae

    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    vae.warm_up("cpu")
    assert torch.equal(torch.rand(4), expected)


def test_a_stage_is_announced_before_it_runs():
    from examples.ecg import pipeline

    times, seen = {}, []
    stage = pipeline._Stages(times, lambda name: seen.append((name, name in times)))
    with stage("read"):
        seen.append("running")
    assert seen == [("read", False), "running"] and "read" in times


def test_training_waits_for_the_warm_up_still_running(monkeypatch):
    import threading

    from examples.ecg import pipeline

    release = threading.Event()
    warm_up = threading.Thread(target=release.wait, name=pipeline.WARM_UP_THREAD, daemon=True)
    warm_up.start()
    seen = []
    monkeypatch.setattr(pipeline.vae, "train",
                        lambda beats, params, device, threads=None: seen.append(warm_up.is_alive()))
    threading.Timer(0.2, release.set).start()
    pipeline._train_on_one_worker([np.zeros((2, 256), np.float32)], None, "cpu")
    assert seen == [False]


def test_make_and_write_sends_back_the_truth_without_the_signal(tmp_path):
    import pandas as pd

    path = tmp_path / "ecg.csv"
    truth, summary, took = synthetic.make_and_write(path, 30, 250, seed=4)
    full = synthetic.make_ecg(30, 250, seed=4)
    assert len(truth.signal) == 0 and summary == full.summary()
    np.testing.assert_array_equal(truth.peaks, full.peaks)
    np.testing.assert_array_equal(truth.kinds, full.kinds)
    np.testing.assert_allclose(pd.read_csv(path)["ecg"].to_numpy(), full.signal, atol=5e-5)
    assert set(took) == {"generate", "write csv"} and min(took.values()) >= 0


def test_a_small_grid_launches_without_numba_s_occupancy_warning_only(recwarn):
    """The kernels run a block per beat (or per 256 samples): a chunk with few beats is a
    small grid on purpose, and Numba's warning about it is left out; any other passes."""
    import warnings

    from examples.ecg.handoff import launch

    class NumbaPerformanceWarning(UserWarning):
        pass

    ran = []

    class Kernel:  # as a Numba CUDA kernel: the warning comes when it is configured
        def __getitem__(self, config):
            blocks, threads = config
            warnings.warn(NumbaPerformanceWarning(
                f"Grid size {blocks} will likely result in GPU under-utilization due to low "
                "occupancy."), stacklevel=2)
            warnings.warn("another warning, which the user should see", stacklevel=2)
            return lambda *args: ran.append((config, args))

    launch(Kernel(), 3, 256, "x", 1)
    assert ran == [((3, 256), ("x", 1))]
    assert [str(w.message) for w in recwarn] == ["another warning, which the user should see"]


def test_several_gpus_give_the_ecg_one_worker_unless_asked(monkeypatch, capsys):
    import examples.ecg.cli as cli

    monkeypatch.setattr(cli, "gpu_count", lambda: 4)
    assert cli._one_gpu({"device": "gpu"}, "gpu") == {"device": "gpu", "n_workers": 1}
    assert "note: 1 of the 4 GPUs" in capsys.readouterr().out
    for asked in ({"n_workers": 2}, {"scheduler": "tcp://h:8786"}):  # --workers, a cluster
        assert cli._one_gpu(asked, "gpu") == asked
    assert cli._one_gpu({}, "cpu") == {}  # the CPUs' workers are the command's own choice
    monkeypatch.setattr(cli, "gpu_count", lambda: 1)
    assert cli._one_gpu({}, "gpu") == {} and capsys.readouterr().out == ""

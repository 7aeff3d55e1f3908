"""A real recording (MIT-BIH record 208, as SciPy bundles it) when one is on this machine."""

import numpy as np
import pytest

from examples.ecg import metrics, records
from examples.ecg.pipeline import find_beats
from examples.ecg.synthetic import make_ecg


def test_real_record_beats_agree_with_a_reference_detector():
    try:
        record = records.load()
    except records.RecordUnavailable as why:
        pytest.skip(f"real ECG not available offline: {why}")
    beats = find_beats(record.signal, record.rate)
    reference = records.reference_beats(record.signal, record.rate)
    agreement = metrics.detection_scores(beats.positions, reference, record.rate)
    bpm = 60 * record.rate / np.median(np.diff(beats.positions))
    print(f"\n{record.name} from {record.path}: {len(beats)} beats, median {bpm:.0f} bpm; "
          f"agreement with the reference detector: {agreement}")
    assert 40 <= bpm <= 180
    assert agreement["f1"] >= 0.9


def test_the_reference_detector_is_itself_sound():
    ecg = make_ecg(120, 360, seed=2, abnormal_fraction=0.05)
    found = records.reference_beats(ecg.signal, 360)
    assert metrics.detection_scores(found, ecg.peaks, 360)["f1"] >= 0.97


def test_loader_reads_scipys_format_from_the_environment(tmp_path, monkeypatch):
    raw = np.array([1024, 1224, 824, 1024], dtype=np.uint16)  # 0, +1, -1, 0 mV
    path = tmp_path / "ecg.dat"
    with open(path, "wb") as f:
        np.savez(f, ecg=raw)
    monkeypatch.setenv(records.ENV, str(path))
    record = records.load()
    assert record.rate == 360 and record.path == path
    np.testing.assert_allclose(record.signal, [0, 1, -1, 0])


def test_loader_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(records.ENV, str(tmp_path / "nothing-here.dat"))
    monkeypatch.setattr(records, "_pooch_cache", lambda: tmp_path / "empty-cache")
    if any(p.is_file() for p in records.candidates()):
        pytest.skip("SciPy's own copy of the record is installed here")
    with pytest.raises(records.RecordUnavailable, match="nothing-here.dat") as info:
        records.load()
    assert "empty-cache" in str(info.value) and records.ENV in str(info.value)


def test_loader_refuses_a_file_that_is_not_scipys(tmp_path, monkeypatch):
    path = tmp_path / "other.dat"
    with open(path, "wb") as f:
        np.savez(f, signal=np.zeros(3))
    monkeypatch.setenv(records.ENV, str(path))
    with pytest.raises(ValueError, match="not SciPy's ECG file"):
        records.load()


def test_the_real_recording_gives_a_plausible_heartbeat():
    """MIT-BIH record 208 (5 minutes at 360 Hz, about 98 beats a minute over the whole record,
    with frequent premature beats): the segmentation finds its beats at a plausible rate and
    does not doubt them."""
    import os

    from examples.ecg import detect, reader
    from examples.ecg.pipeline import find_beats

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples", "ecg", "data", "record208-5min-360hz.csv")
    assert reader.has_header(path)
    beats = find_beats(path, 360)
    minutes = 108_000 / 360 / 60
    assert 80 <= len(beats) / minutes <= 120, len(beats)
    assert beats.kept.mean() > 0.95
    assert detect.doubts(beats, 360) == []

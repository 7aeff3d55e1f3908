"""cuDF's binding, with stand-ins for cuDF and RMM on CPUs: the plugin's spill setting goes to
cuDF, and where cuDF's spilling handles the pool's refusals, RMM's error line for each is
quieted while the binding lasts."""

from __future__ import annotations

import enum
import sys
import types

import pytest

from dask_gpu_interop.frameworks import cudf as binder


class Level(enum.Enum):
    info = 2
    error = 4
    critical = 5


@pytest.fixture
def fake_rmm(monkeypatch):
    rmm = types.ModuleType("rmm")
    rmm.level_enum = Level
    rmm.level = Level.info
    rmm.get_logging_level = lambda: rmm.level
    rmm.set_logging_level = lambda level: setattr(rmm, "level", level)
    monkeypatch.setitem(sys.modules, "rmm", rmm)
    monkeypatch.setattr(binder, "_QUIETED", [])
    return rmm


class FakeCudf:
    def __init__(self):
        self.options = {}

    def set_option(self, name, value):
        self.options[name] = value


def _state(spill, failure_callback):
    return types.SimpleNamespace(config=types.SimpleNamespace(spill=spill),
                                 plan=types.SimpleNamespace(failure_callback=failure_callback))


def test_with_spilling_rmms_refusals_are_not_logged_as_errors_while_bound(fake_rmm):
    cudf = FakeCudf()
    binding = binder.bind(cudf, None, _state(spill=True, failure_callback=False))
    assert cudf.options == {"spill": True}
    assert fake_rmm.level is Level.critical
    assert "spilling on" in binding.detail and "not logged as errors" in binding.detail
    binder.unbind()
    assert fake_rmm.level is Level.info


def test_without_spilling_rmms_log_is_left_alone(fake_rmm):
    cudf = FakeCudf()
    binding = binder.bind(cudf, None, _state(spill=None, failure_callback=True))
    assert cudf.options == {} and fake_rmm.level is Level.info
    assert "not logged" not in binding.detail
    binder.unbind()
    assert fake_rmm.level is Level.info


def test_cudfs_own_spilling_quiets_it_too_and_an_rmm_without_levels_is_left_alone(fake_rmm):
    """spill=None with cuDF's own setting on (the plan leaves refusals to cuDF)."""
    binder.bind(FakeCudf(), None, _state(spill=None, failure_callback=False))
    assert fake_rmm.level is Level.critical
    binder.unbind()
    del fake_rmm.level_enum  # an RMM that names its levels otherwise
    binding = binder.bind(FakeCudf(), None, _state(spill=True, failure_callback=False))
    assert fake_rmm.level is Level.info and "not logged" not in binding.detail


def test_an_rmm_that_refuses_the_level_leaves_the_binding_bound(fake_rmm):
    def refuse(level):
        raise TypeError("level must be an instance of the level_enum enum")

    fake_rmm.set_logging_level = refuse
    binding = binder.bind(FakeCudf(), None, _state(spill=True, failure_callback=False))
    assert binding.state == "bound" and "not logged" not in binding.detail
    binder.unbind()  # nothing to put back
    assert fake_rmm.level is Level.info

"""The worker-side plan: sizes against the device, frameworks against what is installed."""

import sys

import pytest

from dask_gpu_interop.device import DeviceInfo
from dask_gpu_interop.memory import GPUMemorySetupError, MemoryConfig
from dask_gpu_interop.memory.stack import plan

GiB = 1 << 30
H200 = DeviceInfo(index=0, name="NVIDIA H200", total=140 * GiB, free=139 * GiB)


def everything(name):
    return True


def only(*names):
    return lambda name: name in names


def make(**options):
    return MemoryConfig.from_options(**options)


def test_default_is_a_pool_of_half_the_free_memory():
    p = plan(make(), H200, everything)
    assert p.mode == "pool" and p.pooled
    assert p.initial == (139 * GiB) // 2 and p.maximum is None


def test_fractions_resolve_against_the_device():
    p = plan(make(pool_size="0.5", maximum_pool_size="0.75"), H200, everything)
    assert p.initial == 70 * GiB and p.maximum == 105 * GiB


def test_default_initial_never_exceeds_maximum():
    p = plan(make(maximum_pool_size="8GiB"), H200, everything)
    assert p.initial == p.maximum == 8 * GiB


@pytest.mark.parametrize("option", ["pool_size", "maximum_pool_size"])
def test_size_larger_than_the_device_is_refused(option):
    with pytest.raises(GPUMemorySetupError, match=f"{option} asks for 200.00 GiB, more than the device"):
        plan(make(**{option: "200GiB"}), H200, everything, "tcp://w:1")


def test_initial_pool_larger_than_free_memory_is_refused():
    busy = DeviceInfo(0, "NVIDIA H200", total=140 * GiB, free=10 * GiB)
    with pytest.raises(GPUMemorySetupError, match="only 10.00 GiB is free"):
        plan(make(pool_size="0.5"), busy, everything)


def test_mixed_forms_maximum_below_initial_is_caught_on_the_worker():
    with pytest.raises(GPUMemorySetupError, match="maximum_pool_size .* is below pool_size"):
        plan(make(pool_size="0.5", maximum_pool_size="8GiB"), H200, everything)


def test_managed_without_pool_size_is_unpooled():
    p = plan(make(managed=True), H200, everything)
    assert p.mode == "managed" and not p.pooled and p.initial is None


def test_managed_pool_may_grow_past_the_device_but_not_start_past_free_memory():
    p = plan(make(managed=True, pool_size="8GiB", maximum_pool_size="400GiB"), H200, everything)
    assert p.pooled and p.maximum == 400 * GiB
    with pytest.raises(GPUMemorySetupError, match="more than is free"):
        plan(make(managed=True, pool_size="139.5GiB"), H200, everything)


def test_async_keeps_its_initial_reservation_by_default():
    p = plan(make(async_alloc=True, pool_size="16GiB"), H200, everything)
    assert p.mode == "async" and p.initial == 16 * GiB and p.release_threshold == 16 * GiB
    p = plan(make(async_alloc=True, release_threshold="0.1"), H200, everything)
    assert p.initial is None and p.release_threshold == int(0.1 * 140 * GiB) // 256 * 256


def test_default_frameworks_are_the_installed_ones():
    p = plan(make(), H200, only("cupy", "torch"))
    assert p.frameworks == ("cupy", "torch")
    assert p.skipped == {n: "not installed" for n in ("numba", "xgboost", "jax", "cudf")}


def test_asked_for_framework_that_is_missing_fails_with_the_install_command():
    with pytest.raises(GPUMemorySetupError) as info:
        plan(make(frameworks=["cupy", "torch"]), H200, only("cupy"), "tcp://10.0.0.2:4000")
    text = str(info.value)
    assert "['torch']" in text and "pip install torch" in text and "tcp://10.0.0.2:4000" in text


def test_spill_needs_cudf():
    with pytest.raises(GPUMemorySetupError, match="spill=True is cuDF's spilling"):
        plan(make(spill=True), H200, only("cupy"))
    assert plan(make(spill=True), H200, everything).frameworks[-1] == "cudf"


def test_cudfs_spilling_gets_the_failure_callback_and_the_stack_none_of_its_own():
    assert not plan(make(spill=True), H200, everything).failure_callback
    assert plan(make(spill=False), H200, everything).failure_callback
    assert plan(make(), H200, everything).failure_callback


@pytest.mark.parametrize("value, spilling", [("on", True), ("True", True), ("1", True),
                                             ("off", False), ("0", False), ("", False)])
def test_left_to_cudf_the_stack_follows_cudfs_own_setting(monkeypatch, value, spilling):
    """spill=None leaves cuDF's spilling as cuDF has it: where CUDF_SPILL turns it on, cuDF
    puts its own failure callback on the resource, which a stack holding one refuses."""
    monkeypatch.delitem(sys.modules, "cudf", raising=False)  # cuDF reads the variable
    monkeypatch.setenv("CUDF_SPILL", value)
    assert plan(make(), H200, everything).failure_callback is not spilling
    assert plan(make(spill=False), H200, everything).failure_callback
    assert plan(make(), H200, only("cupy")).failure_callback  # no cuDF: nothing to spill


def test_with_cudfs_spilling_the_pool_leaves_room_on_the_device_unless_told():
    from dask_gpu_interop.memory.stack import SPILL_POOL_PART

    cap = plan(make(spill=True, pool_size="0.5"), H200, everything).maximum
    assert cap == pytest.approx(SPILL_POOL_PART * H200.total, rel=1e-3) and cap < H200.total
    assert plan(make(spill=True, maximum_pool_size="0.97"), H200, everything).maximum \
        == pytest.approx(0.97 * H200.total, rel=1e-3)  # fmt: skip
    assert plan(make(pool_size="0.5"), H200, everything).maximum is None
    # an initial pool above the cap is kept: the cap never refuses what was asked for
    assert plan(make(spill=True, pool_size="0.95"), H200, everything).maximum \
        == pytest.approx(0.95 * H200.total, rel=1e-3)  # fmt: skip


def test_log_file_is_per_worker(tmp_path):
    p = plan(make(log_directory=str(tmp_path)), H200, everything, "tcp://127.0.0.1:4000")
    assert p.log_file == str(tmp_path / "rmm_log.tcp___127.0.0.1_4000.csv")


def test_no_pool_is_plain_device_memory_counted():
    p = plan(MemoryConfig.from_options(pool=False), H200, lambda n: False)
    assert p.mode == "pool" and not p.pooled and p.initial is None and p.statistics

"""The first-run harness's arithmetic on CPUs: busy time is the union of compute intervals,
idle time is the rest of the run, and hot functions count samples from the profile tree."""

from __future__ import annotations

import pytest

from benchmarks.examples import mortgage_first_run as harness


def test_busy_seconds_count_overlapping_tasks_once():
    assert harness.busy_seconds([]) == 0
    assert harness.busy_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.8)]) == pytest.approx(4)


def test_stream_summary_gives_per_prefix_tasks_and_idle_time():
    records = [
        {"key": ("process_part-8f3a2c1d9e7b6a5f4c3d2e1f0a9b8c7d", 0), "startstops": [
            {"action": "transfer", "start": 10.0, "stop": 10.5},
            {"action": "compute", "start": 11.0, "stop": 13.0}]},
        {"key": ("process_part-8f3a2c1d9e7b6a5f4c3d2e1f0a9b8c7d", 1), "startstops": [
            {"action": "compute", "start": 12.0, "stop": 14.0}]},
        {"key": "load_acquisitions-1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f", "startstops": [
            {"action": "compute", "start": 15.0, "stop": 15.5}]},
    ]
    out = harness.stream_summary(records, started=10.0, stopped=16.0)
    assert out["first_compute_after_s"] == pytest.approx(1.0)
    assert out["tasks"]["process_part"] == {"count": 2, "sum_s": 4.0, "median_s": 2.0,
                                            "max_s": 2.0}
    assert list(out["tasks"]) == ["process_part", "load_acquisitions"]  # by total time
    assert out["seconds"]["transfer:process_part"] == pytest.approx(0.5)
    assert out["idle_s"] == pytest.approx(6.0 - 3.5)  # computing 11-14 and 15-15.5


def _node(name, count, children=()):
    return {"identifier": name, "count": count,
            "description": {"name": name, "filename": f"/x/{name}.py", "line_number": 1},
            "children": {c["identifier"]: c for c in children}}


def test_hot_functions_count_own_and_on_stack_samples_and_recursion_once():
    read = _node("read", 2)
    walk = _node("walk", 5, [_node("walk", 3, [read])])
    tree = {"count": 10, "children": {"task": _node("task", 10, [walk, _node("sum", 1)])}}
    hot = {h["function"]: h for h in harness.hot_functions(tree)}
    assert hot["task (task.py:1)"] == {"function": "task (task.py:1)", "on_stack": 10, "own": 4}
    assert hot["walk (walk.py:1)"] == {"function": "walk (walk.py:1)", "on_stack": 5, "own": 3}
    assert hot["read (read.py:1)"]["own"] == hot["read (read.py:1)"]["on_stack"] == 2
    assert [h["function"] for h in harness.hot_functions(tree, top=2)] == [
        "task (task.py:1)", "walk (walk.py:1)"]

"""A local GPU cluster on real GPUs: one GPU's worker in the client's process, with the plugin
and dask-cuda's spilling store; ``processes=True`` a dask-cuda worker process. Each cluster
runs in a Python process of its own, as a command would (an in-process worker sets up the
GPU memory of the process it runs in). Skipped without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = """
import json, os, sys, time
from dask_gpu_interop import cluster_client, memory_report, worker_starts

def total():
    import cudf
    return int(cudf.Series(range(100)).sum())

since = time.time()
with cluster_client(device="gpu", n_workers={workers}, processes={processes},
                    memory={{"pool_size": "0.25"}}) as (client, device):
    ready = time.time() - since
    snap = list(memory_report(client).values())[0]
    print(json.dumps({{
        "device": device,
        "in_process": set(client.run(os.getpid).values()) == {{os.getpid()}},
        "store": sorted(set(client.run(lambda dask_worker: type(dask_worker.data).__name__)
                            .values())),
        "total": client.submit(total).result(),
        "status": snap["status"], "mode": snap["mode"],
        "starts": [s.steps() for s in worker_starts(client, since=since)], "ready": ready,
    }}))
"""


def _cluster_facts(processes, workers=1) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(processes=processes,
                                                               workers=workers)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_one_gpus_worker_runs_in_the_clients_process_with_the_plugin_and_spilling():
    facts = _cluster_facts(None)
    (steps,) = facts.pop("starts")
    assert 0 <= steps["preloads"] <= steps["memory"] <= steps["joined"] <= facts.pop("ready")
    assert list(steps) == ["preloads", "memory", "joined"]  # no process of its own
    assert facts == {"device": "gpu", "in_process": True, "store": ["DeviceHostFile"],
                     "total": 4950, "status": "active", "mode": "pool"}


def test_processes_true_gives_a_dask_cuda_worker_process():
    facts = _cluster_facts(True)
    assert facts["in_process"] is False
    (steps,) = facts["starts"]  # the process, its preloads, its GPU memory, the scheduler's add
    assert 0 <= steps["process"] < steps["preloads"] <= steps["memory"] <= steps["joined"] \
        <= facts["ready"]
    assert (facts["device"], facts["total"], facts["status"], facts["mode"]) == (
        "gpu", 4950, "active", "pool")


@pytest.mark.multi_gpu
def test_each_gpu_worker_process_of_two_sets_its_memory_up_before_it_joins():
    facts = _cluster_facts(None, workers=2)
    assert len(facts["starts"]) == 2
    for steps in facts["starts"]:
        assert list(steps) == ["process", "preloads", "memory", "joined"]
        assert 0 <= steps["process"] < steps["preloads"] <= steps["memory"] <= steps["joined"] \
            <= facts["ready"]


SPILLING = """
import json
from dask_gpu_interop import cluster_client

def frame():
    import cudf
    return cudf.DataFrame({"x": range(1000)})

with cluster_client(device="gpu", n_workers=1, processes=True,
                    memory={"pool_size": "0.1", "spill": True}) as (client, device):
    out = client.submit(frame).result()
    print(json.dumps({"type": type(out).__module__.split(".")[0], "sum": int(out["x"].sum()),
                      "workers": list(client.run(lambda: __import__("cudf").get_option("spill"))
                                      .values())}))
"""


def test_a_client_takes_the_cudf_results_of_workers_that_spill():
    """With cuDF's spilling on the workers, their cuDF results are spillable buffers, which
    a process builds only with spilling on: the client of cluster_client takes them."""
    done = subprocess.run([sys.executable, "-c", SPILLING], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"type": "cudf", "sum": 499500, "workers": [True]}


CUDF_BESIDE_START = """
import json, sys, time
from dask_gpu_interop import cluster_client, memory_report

def options():
    import cudf
    return [cudf.get_option("spill"), cudf.get_option("spill_stats")]

with cluster_client(device="gpu", n_workers=1, processes=True,
                    memory={{"pool_size": "0.1"{spill}}}) as (client, device):
    # the worker may join before cuDF's import ends, which goes on in the background
    plugins = list(client.run(lambda dask_worker: sorted(
        type(plugin).__name__ for plugin in dask_worker.plugins.values())).values())[0]
    found = client.submit(options).result()
    deadline = time.time() + 30  # the binding follows the import, in a thread of its own
    while time.time() < deadline:
        snap = list(memory_report(client).values())[0]
        if snap["frameworks"]["cudf"]["state"] != "pending":
            break
        time.sleep(0.1)
    print(json.dumps({{"options": found, "cudf": snap["frameworks"]["cudf"]["state"],
                      "dask_cuda_plugins": [p for p in plugins
                                            if p in ("CUDFSetup", "PreImport")]}}))
"""


@pytest.mark.parametrize("spill, expected", [("", [False, 0]), (', "spill": True', [True, 0])])
def test_a_dask_cuda_worker_imports_cudf_beside_its_start_with_its_options(spill, expected):
    """dask-cuda's CUDFSetup (which imports cuDF before the worker joins) is taken out and
    cuDF imported in the background from before dask-cuda's CUDA start: cuDF's options are
    dask-cuda's, or the plugin's spilling where it sets one, the plugin binds cuDF once the
    import ends, and dask-cuda finds no CUDA context made before its own."""
    done = subprocess.run([sys.executable, "-c", CUDF_BESIDE_START.format(spill=spill)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # dask-cuda's other plugins are there (PreImport always is): its CUDFSetup alone is not
    assert facts == {"options": expected, "cudf": "bound", "dask_cuda_plugins": ["PreImport"]}
    assert "already exists" not in done.stderr  # dask-cuda: a CUDA context made before its own

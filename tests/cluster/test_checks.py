"""A local cluster that this machine cannot have is refused before anything starts, in one
line naming the option and the limit: more workers than GPUs, cores or memory allow; the
tls protocol without every role's certificates; inproc between worker processes; counts that
are not whole numbers of at least 1."""

from __future__ import annotations

import pytest

from dask_gpu_interop import cluster_client, local_cluster, tls
from dask_gpu_interop.cluster import checks


def test_more_gpu_workers_than_gpus_are_refused(monkeypatch):
    monkeypatch.setattr(checks.device_mod, "gpu_count", lambda: 2)
    checks._check_workers(2, "gpu", None)
    with pytest.raises(checks.ClusterError) as info:
        checks._check_workers(3, "gpu", None)
    assert info.value.message(flags="") == (
        "--workers 3: a GPU worker per GPU, and 2 GPU(s) are visible here: ask for at most 2")
    assert str(info.value).startswith("n_workers=3: ")


def test_cpu_worker_processes_are_bounded_by_cores_and_free_memory(monkeypatch):
    import psutil

    monkeypatch.setattr("dask.system.cpu_count", lambda: 2)
    plenty = psutil.virtual_memory()._replace(available=64 * 2**30)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: plenty)
    checks._check_workers(8, "cpu", None)
    with pytest.raises(checks.ClusterError, match=r"at most 8 worker processes here "
                       r"\(2 cores, 4 worker processes a core\)"):
        checks._check_workers(9, "cpu", None)
    little = plenty._replace(available=checks.WORKER_MEMORY * 3)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: little)
    with pytest.raises(checks.ClusterError, match=r"at most 3 worker processes here "
                       r"\(768.00 MiB of memory free, 256.00 MiB a worker process\)"):
        checks._check_workers(4, "cpu", None)
    checks._check_workers(1000, "cpu", False)  # threads of this process: no processes


def test_a_thousand_workers_are_refused_before_anything_starts():
    with pytest.raises(checks.ClusterError, match="n_workers=1000 is more than this "
                       "machine holds"):
        local_cluster("cpu", n_workers=1000)


def test_tls_needs_every_role_s_certificates(tmp_path):
    made = tls.make_certificates(tmp_path / "certs")
    with pytest.raises(checks.ClusterError) as info:
        checks.check_local("cpu", "tls")
    assert info.value.message(flags="").startswith(
        "--protocol 'tls' needs certificates for the scheduler, the workers and the client")
    with pytest.raises(checks.ClusterError):  # a client's alone cannot start a cluster
        checks.check_local("cpu", "tls", security=tls.security(made.directory))
    assert checks.check_local("cpu", "tls",
                                   security=tls.local_security(made.directory)) == "cpu"


def test_a_machine_of_one_role_needs_only_that_role_s_certificates(tmp_path):
    made = tls.make_certificates(tmp_path / "certs")
    for role in ("scheduler", "worker"):  # what `tls make` says to copy to a client only
        for path in (made.cert(role), made.key(role)):
            path.unlink()
    assert tls.security(made.directory, "client").tls_client_cert == str(made.cert("client"))
    with pytest.raises(FileNotFoundError, match="lacks worker.pem, worker-key.pem"):
        tls.security(made.directory, "worker")


@pytest.mark.parametrize("options, keywords, flags", [
    ({"device": "cpu", "protocol": "inproc"},
     "protocol='inproc' connects workers in this process only, and CPU workers are processes "
     "of their own unless told: add processes=False, or use protocol='tcp'",
     "--protocol 'inproc' connects workers in this process only, and CPU workers are "
     "processes of their own unless told: add --no-processes, or use --protocol 'tcp'"),
    ({"device": "cpu", "n_workers": "2"}, "n_workers='2': give a whole number, such as "
     "n_workers=2", "--workers '2': give a whole number, such as --workers 2"),
    ({"device": "cpu", "n_workers": 2.0}, "n_workers=2.0: give a whole number, such as "
     "n_workers=2", None),
    ({"device": "cpu", "threads_per_worker": 0}, "threads_per_worker=0: give at least 1, or "
     "leave it out for the default", "--threads-per-worker 0: give at least 1, or leave it out "
     "for the default"),
    ({"device": "cpu", "n_workers": 0}, "n_workers=0: give at least 1, or leave it out for the "
     "default", None),
    ({"device": "cpu", "processes": "no"}, "processes='no': give True or False, or leave it "
     "out", None),
])
def test_a_local_cluster_s_mistakes_are_named_before_anything_starts(options, keywords, flags):
    """As cluster_client and local_cluster take them (distributed would fail to start the
    nannies of an inproc cluster in a long traceback, compare a string with an int, or take
    no threads as the default)."""
    for start in (local_cluster, lambda **given: cluster_client(**given).__enter__()):
        with pytest.raises(checks.ClusterError) as info:
            start(**options)
        assert str(info.value) == keywords
        if flags:
            assert info.value.message(flags="") == flags


def test_inproc_on_gpus_is_one_worker_in_this_process(monkeypatch):
    monkeypatch.setattr(checks.device_mod, "gpu_count", lambda: 2)
    monkeypatch.setattr(checks, "resolve_device", lambda device: "gpu")
    assert checks.check_local("gpu", "inproc", n_workers=1) == "gpu"
    for extra in ({}, {"n_workers": 1, "processes": True}):
        with pytest.raises(checks.ClusterError, match=r"protocol='inproc' connects workers in "
                           r"this process only, where one GPU worker runs"):
            checks.check_local("gpu", "inproc", **extra)

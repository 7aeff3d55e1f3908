"""A local cluster that this machine cannot have is refused before anything starts, in one
line naming the option and the limit: more workers than GPUs, cores or memory allow; the
tls protocol without every role's certificates."""

from __future__ import annotations

import pytest

from dask_gpu_interop import local_cluster, tls
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

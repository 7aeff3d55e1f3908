"""dask_gpu_interop.tls and `tls make/env/show`: the certificates, the dask config that uses
them, and a scheduler, worker and client that talk over them (and refuse others)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess

import dask.config
import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from distributed import Client, Scheduler, Worker

from dask_gpu_interop import tls
from dask_gpu_interop.cli import main as cli

from .refused import refused


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return tls.make_certificates(tmp_path_factory.mktemp("tls"), hostnames=["node1", "10.1.2.3"])


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_files_and_permissions(certs):
    names = sorted(p.name for p in certs.directory.iterdir())
    assert names == sorted([
        "ca.pem", "client-key.pem", "client.env", "client.pem", "client.yaml",
        "scheduler-key.pem", "scheduler.env", "scheduler.pem", "scheduler.yaml",
        "worker-key.pem", "worker.env", "worker.pem", "worker.yaml",
    ])  # no ca-key.pem: nobody can issue more certificates for this cluster
    for role in tls.ROLES:
        assert stat.S_IMODE(certs.key(role).stat().st_mode) == 0o600
        assert stat.S_IMODE(certs.cert(role).stat().st_mode) == 0o644


def test_certificates_chain_to_the_ca_with_roles_and_names(certs):
    ca = load(certs.ca_file)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for role in tls.ROLES:
        cert = load(certs.cert(role))
        cert.verify_directly_issued_by(ca)
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        if role == "client":
            assert usages == {ExtendedKeyUsageOID.CLIENT_AUTH}  # cannot serve as scheduler/worker
        else:
            assert usages == {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH}
            names = {str(n.value) for n in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value}
            assert {"localhost", "127.0.0.1", "node1", "10.1.2.3"} <= names


def test_openssl_agrees(certs):
    openssl = subprocess.run(["which", "openssl"], capture_output=True, text=True).stdout.strip()
    if not openssl:
        pytest.skip("no openssl command")
    for role in tls.ROLES:
        for purpose in ("sslclient", "sslserver"):
            out = subprocess.run(
                [openssl, "verify", "-x509_strict", "-purpose", purpose,
                 "-CAfile", str(certs.ca_file), str(certs.cert(role))],
                capture_output=True, text=True,
            )
            # a client certificate cannot stand in for a scheduler's or worker's
            ok = not (role == "client" and purpose == "sslserver")
            assert (out.returncode == 0) == ok, (role, purpose, out.stdout + out.stderr)


def test_refuses_to_overwrite_and_keeps_ca_key_only_when_asked(tmp_path):
    tls.make_certificates(tmp_path)
    first = (tmp_path / "ca.pem").read_bytes()
    with pytest.raises(FileExistsError, match="already holds a cluster's certificates"):
        tls.make_certificates(tmp_path)
    assert (tmp_path / "ca.pem").read_bytes() == first
    tls.make_certificates(tmp_path, overwrite=True, keep_ca_key=True)
    assert (tmp_path / "ca.pem").read_bytes() != first
    assert stat.S_IMODE((tmp_path / "ca-key.pem").stat().st_mode) == 0o600
    tls.make_certificates(tmp_path, overwrite=True)
    assert not (tmp_path / "ca-key.pem").exists()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(hostnames=["https://node1"]), "neither a host name nor an IP address"),
        (dict(hostnames=[""]), "an empty name"),
        (dict(days=0), "days=0"),
    ],
)
def test_bad_arguments_say_what_to_give(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        tls.make_certificates(tmp_path, **kwargs)
    assert not (tmp_path / "ca.pem").exists()


def test_missing_files_name_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="tls make"):
        tls.security(tmp_path)
    with pytest.raises(ValueError, match="role='nanny'"):
        tls.tls_config(tmp_path, "nanny")


def test_config_env_and_yaml_say_the_same(certs):
    for role in tls.ROLES:
        config = tls.tls_config(certs.directory, role)
        comm = config["distributed"]["comm"]
        assert comm["require-encryption"] is True
        assert comm["tls"]["ca-file"] == str(certs.ca_file)
        assert comm["tls"][role] == {"cert": str(certs.cert(role)), "key": str(certs.key(role))}
        # the env variables are what dask reads back as the same config
        from_env = dask.config.collect_env(tls.tls_env(certs.directory, role))
        for key, value in _flat(config):
            assert dask.config.get(key, config=from_env) == value
        on_disk = yaml.safe_load((certs.directory / f"{role}.yaml").read_text())
        assert on_disk == config
        sourced = subprocess.run(
            ["bash", "-c", f"set -a; . {certs.directory / f'{role}.env'}; env"],
            capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]},
        ).stdout.splitlines()
        for key, value in tls.tls_env(certs.directory, role).items():
            assert f"{key}={value}" in sourced


def _flat(config, prefix=""):
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_dashboard_https_is_opt_in(certs):
    assert "scheduler" not in tls.tls_config(certs.directory, "worker")["distributed"]
    dash = tls.tls_config(certs.directory, "worker", dashboard=True)["distributed"]["scheduler"]
    assert dash["dashboard"]["tls"]["cert"] == str(certs.cert("worker"))
    assert "scheduler" not in tls.tls_config(certs.directory, "client", dashboard=True)["distributed"]


def test_security_object_builds_contexts(certs):
    sec = tls.security(certs.directory, "client")
    assert sec.require_encryption
    ctx = sec.get_connection_args("client")["ssl_context"]
    assert ctx is not None  # the key matched the certificate, the CA loaded


def _inc(x):
    return x + 1


def test_scheduler_worker_client_talk_over_tls_and_refuse_another_ca(certs, tmp_path):
    other = tls.make_certificates(tmp_path / "other")

    async def main():
        async with Scheduler(
            protocol="tls", host="127.0.0.1", dashboard_address=":0",
            security=tls.security(certs.directory, "scheduler"),
        ) as s:
            assert s.address.startswith("tls://")
            async with Worker(s.address, security=tls.security(certs.directory, "worker"), nthreads=1):
                async with Client(
                    s.address, security=tls.security(certs.directory, "client"), asynchronous=True,
                ) as c:
                    assert await c.submit(_inc, 1) == 2
                with pytest.raises(OSError):
                    await Client(
                        s.address, security=tls.security(other.directory, "client"),
                        asynchronous=True, timeout="3s",
                    )

    asyncio.run(main())


def test_cli_make_env_show(tmp_path):
    runner = CliRunner()
    target = tmp_path / "certs"
    result = runner.invoke(cli, ["tls", "make", str(target), "--hostname", "gpu01", "--days", "30"])
    assert result.exit_code == 0, result.output
    assert "valid 30 days" in result.output
    again = runner.invoke(cli, ["tls", "make", str(target)])
    assert again.exit_code == 1 and "--force" in again.output
    result = runner.invoke(cli, ["tls", "env", str(target), "--role", "worker"])
    assert result.exit_code == 0
    assert f"export DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT={target / 'worker.pem'}" in result.output
    result = runner.invoke(cli, ["tls", "show", str(target)])
    assert result.exit_code == 0
    assert "gpu01" in result.output and "(29 days)" in result.output
    bad = runner.invoke(cli, ["tls", "show", str(tmp_path)])
    assert bad.exit_code == 1 and "lacks ca.pem" in bad.output


def test_local_gpu_cluster_is_given_the_security(monkeypatch, certs):
    """local_cluster(device="gpu", protocol="tls", security=...) hands the security to
    dask-cuda's cluster (checked on CPU with a stand-in for LocalCUDACluster)."""
    import sys
    import types

    from dask_gpu_interop.cluster import local
    from tests.dask_cuda_stand_ins import LocalCUDACluster

    fake = types.ModuleType("dask_cuda")
    fake.LocalCUDACluster = LocalCUDACluster
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(local, "check_local", lambda device, protocol, **checks: "gpu")
    security = tls.local_security(certs.directory)
    seen = local.local_cluster("gpu", protocol="tls", security=security).kwargs
    assert seen["security"] is security and seen["protocol"] == "tls"


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_tls_local_cluster_refuses_a_client_without_the_certificate(certs, tmp_path, device):
    from dask_gpu_interop import cluster_client

    other = tls.make_certificates(tmp_path / "other")
    with cluster_client(device=device, n_workers=1, protocol="tls",
                        security=tls.local_security(certs.directory)) as (client, found):
        assert found == device and client.scheduler.address.startswith("tls://")
        assert client.submit(_inc, 1).result() == 2
        address = client.scheduler.address
        # no certificate at all: refused before connecting; another CA's: the handshake fails
        for security in (None, tls.security(other.directory, "client")):
            kind, _ = refused(address, security=security, timeout="3s")
            assert issubclass(kind, (OSError, TypeError))

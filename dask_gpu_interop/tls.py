"""TLS for a cluster: one private CA, certificates for scheduler, workers and client, and the
dask config that makes every connection use them (``tls://``, ``require-encryption``).

distributed authenticates both ends of every connection against the CA file (mutual TLS) and
does not check hostnames, so what keeps a stranger out is the CA: keep it private to the
cluster. By default the CA's key is not written at all: nobody can issue another certificate,
and a lost key cannot be misused. Make a new set to rotate or to add a client.

    files = make_certificates("tls/", hostnames=["node1", "10.0.0.5"])
    client = Client("tls://node1:8786", security=security("tls/"))

Files in the directory (keys readable by their owner only):

    ca.pem                       the CA certificate: every process needs it
    scheduler.pem  scheduler-key.pem
    worker.pem     worker-key.pem
    client.pem     client-key.pem
    scheduler.yaml worker.yaml client.yaml   dask config per role (``DASK_CONFIG=...``)
    scheduler.env  worker.env  client.env    the same as ``export DASK_...`` lines
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

ROLES = ("scheduler", "worker", "client")
CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
DEFAULT_DAYS = 365
# Always in the certificates, so a one-machine cluster works without naming hosts.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class TLSFiles:
    """The paths of one cluster's CA and role certificates."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_FILE

    def cert(self, role: str) -> Path:
        return self.directory / f"{_check_role(role)}.pem"

    def key(self, role: str) -> Path:
        return self.directory / f"{_check_role(role)}-key.pem"

    def missing(self, roles=ROLES) -> list[Path]:
        wanted = [self.ca_file] + [p for r in roles for p in (self.cert(r), self.key(r))]
        return [p for p in wanted if not p.is_file()]


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"role={role!r}: choose one of {', '.join(ROLES)}")
    return role


def files(directory, roles=ROLES) -> TLSFiles:
    """The certificates in ``directory``: the CA's and those of ``roles`` (a machine of one
    role holds only its own); raises FileNotFoundError naming what is missing."""
    found = TLSFiles(Path(directory).expanduser().resolve())
    missing = found.missing(roles)
    if missing:
        raise FileNotFoundError(
            f"TLS directory {found.directory} lacks {', '.join(p.name for p in missing)}. "
            f"Make the certificates first: dask-gpu-interop tls make {found.directory}"
        )
    return found


def _check_writable(directory: Path) -> None:
    """ValueError, saying what to do, unless ``directory`` is, or can be made, a folder this
    process may write into."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file: give a folder for the certificates")
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{directory} cannot be made: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{directory} cannot be written here: {existing} is not writable by "
                         "this user (read-only, or another user's); give another folder")


def make_certificates(
    directory,
    *,
    hostnames=(),
    days: int = DEFAULT_DAYS,
    overwrite: bool = False,
    keep_ca_key: bool = False,
    dashboard: bool = False,
) -> TLSFiles:
    """Make a CA and certificates for scheduler, workers and client in ``directory``.

    ``hostnames``: names and IP addresses the scheduler and workers are reached at (put in the
    certificates' subjectAltName for tools that check it; distributed itself does not).
    ``dashboard``: the role configs also serve the dashboards over HTTPS with these files.
    Refuses to replace existing certificates unless ``overwrite``: processes still running
    with the old CA would stop trusting new ones.
    """
    if not isinstance(days, int) or days < 1:
        raise ValueError(f"days={days!r}: give a whole number of days, 1 or more")
    _need_cryptography()
    names = _subject_alt_names(hostnames)
    out = TLSFiles(Path(directory).expanduser().resolve())
    _check_writable(out.directory)
    if out.ca_file.exists() and not overwrite:
        raise FileExistsError(
            f"{out.ca_file} exists: this directory already holds a cluster's certificates. "
            "Use them as they are, choose another directory, or overwrite them (--force)."
        )
    out.directory.mkdir(parents=True, exist_ok=True)

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dask-gpu-interop"),
        x509.NameAttribute(NameOID.COMMON_NAME, "dask-gpu-interop cluster CA"),
    ])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        # The scheduler and workers both accept and open connections; a client only opens them.
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if role != "client":
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dask-gpu-interop"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"dask-{role}"),
            ]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        if role != "client":
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_key(out.key(role), key)
        _write(out.cert(role), _pem(cert), mode=0o644)

    _write(out.ca_file, _pem(ca_cert), mode=0o644)
    ca_key_path = out.directory / CA_KEY_FILE
    if keep_ca_key:
        _write_key(ca_key_path, ca_key)
    elif ca_key_path.exists():
        ca_key_path.unlink()  # a stale key from an older set would sign for nobody
    for role in ROLES:
        write_role_config(out, role, dashboard=dashboard)
    return out


def _need_cryptography() -> None:
    """Certificates are made and read with ``cryptography``, an optional dependency."""
    import importlib.util

    if importlib.util.find_spec("cryptography") is None:
        raise ImportError(
            "making or reading certificates needs the cryptography package: "
            "pip install 'dask-gpu-interop[tls]'"
        )


def _key_usage(*, cert_sign: bool):
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )


def _subject_alt_names(hostnames) -> list:
    from cryptography import x509

    if isinstance(hostnames, str):
        hostnames = [hostnames]
    names, seen = [], set()
    for raw in (*LOCAL_NAMES, *hostnames):
        name = str(raw).strip()
        if not name:
            raise ValueError("hostnames: an empty name was given")
        if name in seen:
            continue
        seen.add(name)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            if any(c in name for c in " /:@") or name.startswith("."):
                raise ValueError(
                    f"hostnames: {name!r} is neither a host name nor an IP address "
                    "(give names like 'node1' or 'node1.cluster', not URLs)"
                ) from None
            names.append(x509.DNSName(name))
    return names


def _pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _write_key(path: Path, key) -> None:
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(path, data, mode=0o600)


def _write(path: Path, data, mode: int) -> None:
    """Write with ``mode`` from the start, so a key is never readable by others, even briefly."""
    if isinstance(data, str):
        data = data.encode()
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def tls_config(directory, role: str, *, dashboard: bool = False) -> dict:
    """Dask config for ``role`` that uses the certificates in ``directory``.

    Every connection is TLS (``require-encryption``) and bare addresses mean ``tls://``.
    ``dashboard``: the scheduler's and workers' HTTP servers (dashboard, ``/metrics``) use
    HTTPS with the same certificate.
    """
    role = _check_role(role)
    tls_files = files(directory, roles=(role,))
    config = {
        "distributed": {
            "comm": {
                "require-encryption": True,
                "default-scheme": "tls",
                "tls": {
                    "ca-file": str(tls_files.ca_file),
                    role: {"cert": str(tls_files.cert(role)), "key": str(tls_files.key(role))},
                },
            }
        }
    }
    if dashboard and role != "client":
        # distributed reads this one key for every HTTP server it starts, workers' included.
        config["distributed"]["scheduler"] = {
            "dashboard": {
                "tls": {
                    "ca-file": str(tls_files.ca_file),
                    "cert": str(tls_files.cert(role)),
                    "key": str(tls_files.key(role)),
                }
            }
        }
    return config


def tls_env(directory, role: str, *, dashboard: bool = False) -> dict[str, str]:
    """``tls_config`` as ``DASK_...`` environment variables, for processes we start."""
    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                name = key.upper().replace("-", "_")
                walk(f"{prefix}__{name}" if prefix != "DASK" else f"DASK_{name}", inner)
        else:
            out[prefix] = str(value)

    walk("DASK", tls_config(directory, role, dashboard=dashboard))
    return out


def write_role_config(tls_files: TLSFiles, role: str, *, dashboard: bool = False) -> None:
    """Write ``<role>.yaml`` (dask config) and ``<role>.env`` (shell exports) next to the certs."""
    import yaml

    config = tls_config(tls_files.directory, role, dashboard=dashboard)
    header = f"# dask config for the {role} of this cluster: DASK_CONFIG={tls_files.directory / role}.yaml\n"
    _write(tls_files.directory / f"{role}.yaml", header + yaml.safe_dump(config, sort_keys=False), 0o644)
    lines = [f"# source this file: the {role}'s TLS settings for dask"]
    for key, value in tls_env(tls_files.directory, role, dashboard=dashboard).items():
        lines.append(f"export {key}={shlex.quote(value)}")
    _write(tls_files.directory / f"{role}.env", "\n".join(lines) + "\n", 0o644)


def security(directory, role: str = "client"):
    """A ``distributed.Security`` for ``role`` with the certificates in ``directory``."""
    from distributed import Security

    role = _check_role(role)
    tls_files = files(directory, roles=(role,))
    return Security(
        require_encryption=True,
        tls_ca_file=str(tls_files.ca_file),
        **{
            f"tls_{role}_cert": str(tls_files.cert(role)),
            f"tls_{role}_key": str(tls_files.key(role)),
        },
    )


def local_security(directory):
    """A ``distributed.Security`` with every role's certificates in ``directory``: for a local
    cluster (``local_cluster(protocol="tls", security=...)``), whose scheduler, workers and
    client all start from this process."""
    from distributed import Security

    tls_files = files(directory)
    certificates = {}
    for role in ROLES:
        certificates[f"tls_{role}_cert"] = str(tls_files.cert(role))
        certificates[f"tls_{role}_key"] = str(tls_files.key(role))
    return Security(require_encryption=True, tls_ca_file=str(tls_files.ca_file), **certificates)


def describe(directory) -> list[dict]:
    """Subject, names and validity of each certificate in ``directory`` (for ``tls show``)."""
    _need_cryptography()
    from cryptography import x509

    tls_files = files(directory)
    now = datetime.datetime.now(datetime.timezone.utc)
    rows = []
    for label, path in [("ca", tls_files.ca_file)] + [(r, tls_files.cert(r)) for r in ROLES]:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = [str(getattr(n, "value", n)) for n in san]
        except x509.ExtensionNotFound:
            names = []
        until = cert.not_valid_after_utc
        rows.append({
            "role": label,
            "file": str(path),
            "subject": cert.subject.rfc4514_string(),
            "names": names,
            "expires": until.isoformat(timespec="seconds"),
            "days_left": (until - now).days,
        })
    return rows

"""``mjfl certs create``: a lab CA and the coordinator's TLS certificate (docs/security.md).

Four PEM files in one folder: ``ca.pem`` (give it to devices: ``--ca``),
``ca.key`` (keep it offline; it signs new server certificates), and
``server.pem`` + ``server.key`` (``--tls-cert``/``--tls-key`` of the
coordinator). Keys are ECDSA P-256, written with mode 0600. The server
certificate names the coordinator by DNS names and IP addresses (subject
alternative names); devices check the name they dial against them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mjfl.errors import ConfigError, UserError

DEFAULT_HOSTS = ("localhost",)
DEFAULT_IPS = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class LabCertificates:
    """Where ``create_certificates`` wrote its files."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def create_certificates(
    out_dir: Path,
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    ips: Sequence[str] = DEFAULT_IPS,
    days: int = 825,
    loopback: bool = True,
) -> LabCertificates:
    """Write a new CA and a server certificate for ``hosts`` and ``ips`` into ``out_dir``.

    ``loopback`` adds localhost, 127.0.0.1 and ::1: the run's own emulated
    devices and phones over adb reverse reach the coordinator there.

    UserError when a file would be overwritten, an address is not an IP,
    or neither hosts nor ips are given.
    """
    if days < 1:
        raise ConfigError("days", f"must be >= 1, got {days}")
    if loopback:
        hosts = list(dict.fromkeys([*hosts, *DEFAULT_HOSTS]))
        ips = list(dict.fromkeys([*ips, *DEFAULT_IPS]))
    if not hosts and not ips:
        raise ConfigError("hosts", "give the coordinator's DNS names, or its IP addresses (ips)")
    try:
        addresses = list(dict.fromkeys(ipaddress.ip_address(ip) for ip in ips))
    except ValueError as exc:
        raise ConfigError("ips", str(exc)) from None
    files = LabCertificates(out_dir / "ca.pem", out_dir / "ca.key", out_dir / "server.pem", out_dir / "server.key")
    existing = [str(p) for p in vars(files).values() if p.exists()]
    if existing:
        raise UserError(f"certs create: {', '.join(existing)} already exist; choose another folder")
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mjfl lab CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    server_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
    names += [x509.IPAddress(a) for a in addresses]
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (list(hosts) + list(ips))[0])]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write(files.ca_key, _key_pem(ca_key), private=True)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(files.server_key, _key_pem(server_key), private=True)
        _write(files.server_cert, server_cert.public_bytes(serialization.Encoding.PEM), private=False)
    except OSError as exc:
        raise UserError(f"certs create: cannot write into {out_dir}: {exc.strerror or exc}") from None
    return files


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Create ``path`` (never overwrite); a private key is 0600 from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)





def certificate_sha256(path: Path) -> str:
    """The sha256 (lowercase hex) of the first certificate in a PEM file: what a phone pins."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a PEM certificate ({exc})") from None
    return cert.fingerprint(hashes.SHA256()).hex()

__all__ = ["DEFAULT_HOSTS", "DEFAULT_IPS", "LabCertificates", "certificate_sha256", "create_certificates"]

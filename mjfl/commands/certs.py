"""`mjfl certs create`: a lab CA and a server certificate for the coordinator's wss:// (docs/security.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from mjfl.coordinator.remote.certs import (
    DEFAULT_HOSTS,
    DEFAULT_IPS,
    LabCertificates,
    create_certificates,
)


def create(out_dir: Path, hosts: Sequence[str], ips: Sequence[str], *, days: int, console: Console) -> LabCertificates:
    """Write the four PEM files and say which goes where."""
    files = create_certificates(out_dir, hosts=hosts, ips=ips, days=days)
    names = ", ".join(dict.fromkeys([*hosts, *ips, *DEFAULT_HOSTS, *DEFAULT_IPS]))
    console.print(
        f"wrote a lab CA and a certificate for {names}, valid {days} days, into {out_dir}:\n"
        f"  coordinator: mjfl testbed run CONFIG --tls-cert {files.server_cert} --tls-key {files.server_key}\n"
        f"  devices:     --ca {files.ca_cert}  (mjfl devices emulate, mjfl-device)\n"
        f"  keep {files.ca_key} offline: it signs certificates every device trusts",
        highlight=False,
    )
    return files

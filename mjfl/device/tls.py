"""The devices' side of ``wss://``: trust exactly the lab's CA (or a pinned certificate).

``--ca FILE`` is a PEM file of the certificates to trust: the lab CA made by
``mjfl certs create`` (``ca.pem``), or the coordinator's own certificate
(``server.pem``), which then acts as a pin (docs/security.md). The
system's CAs are not trusted: a lab coordinator never has a public
certificate, and trusting every public CA would let anyone who holds one
for the name impersonate it.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from mjfl.errors import UserError


def client_context(ca: Path | None) -> ssl.SSLContext:
    """The TLS context a device connects with; UserError names a CA file that will not load."""
    if ca is None:
        return ssl.create_default_context()  # wss:// without --ca: the system's CAs
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the chain and the host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A pinned server certificate is a trust anchor of its own, not only a CA.
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    try:
        context.load_verify_locations(cafile=ca)
    except FileNotFoundError:
        raise UserError(f"CA file {ca}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise UserError(f"CA file {ca}: not a PEM certificate file ({exc})") from None
    return context


__all__ = ["client_context"]

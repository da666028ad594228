"""Device credentials: the hello's proof of a device's secret (docs/protocol.md, section 5.1.1).

The coordinator sends a fresh nonce in the WebSocket handshake response
(header ``MJFL-Nonce``); the device answers with ``hello.proof``, the
HMAC-SHA256 (RFC 2104) of the nonce and its device id under its secret. The
secret never travels, and a hello captured on one connection proves nothing
on the next, whose nonce differs.

Pure: no sockets, no clock; randomness comes from ``secrets`` (the OS).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

NONCE_HEADER = "MJFL-Nonce"
"""The HTTP header of the coordinator's handshake response that carries the nonce."""

PROOF_LABEL = b"mjfl-hello-proof-v1"
"""Domain separation: a proof of the hello never doubles as a MAC of anything else."""

NONCE_BYTES = 32
SECRET_BYTES = 32

_NONCE = re.compile(r"[0-9a-f]{64}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{16,256}")


def new_nonce() -> str:
    """A fresh nonce: 32 random bytes as 64 lowercase hex digits."""
    return secrets.token_hex(NONCE_BYTES)


def new_secret() -> str:
    """A fresh device secret: 32 random bytes, base64url without padding (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def is_nonce(value: str | None) -> bool:
    """Whether ``value`` is a well-formed nonce (64 lowercase hex digits)."""
    return value is not None and _NONCE.fullmatch(value) is not None


def is_secret(value: str) -> bool:
    """Whether ``value`` can be a device secret: 16 to 256 base64url characters."""
    return _SECRET.fullmatch(value) is not None


def proof_message(nonce: str, device_id: str) -> bytes:
    """The bytes the proof covers: label, NUL, nonce (ASCII hex), NUL, device id (UTF-8)."""
    return PROOF_LABEL + b"\x00" + nonce.encode("ascii") + b"\x00" + device_id.encode("utf-8")


def hello_proof(secret: str, nonce: str, device_id: str) -> str:
    """The hello's ``proof``: lowercase hex of HMAC-SHA256(key = the secret's UTF-8 bytes, proof_message)."""
    return hmac.new(secret.encode("utf-8"), proof_message(nonce, device_id), hashlib.sha256).hexdigest()


def proof_matches(secret: str, nonce: str, device_id: str, proof: str) -> bool:
    """Whether ``proof`` is this device's proof for ``nonce``, compared in constant time."""
    expected = hello_proof(secret, nonce, device_id).encode("ascii")
    return hmac.compare_digest(expected, proof.encode("utf-8", "surrogatepass"))


def token_matches(presented: str, token: str) -> bool:
    """Whether the hello's shared ``token`` is the coordinator's, compared in constant time."""
    return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass"))


__all__ = [
    "NONCE_HEADER",
    "PROOF_LABEL",
    "hello_proof",
    "is_nonce",
    "is_secret",
    "new_nonce",
    "new_secret",
    "proof_matches",
    "proof_message",
    "token_matches",
]

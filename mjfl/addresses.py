"""Where mjfl listens: its default ports, and what a host address means for who can reach it.

Every command and room takes these from here, so a default or a rule is
written once:

- the devices' WebSocket server (`testbed run`, `profile`, a lab's
  ``[server]``): ``DEVICE_PORT``; the live dashboard of a real-time run:
  ``LIVE_DASHBOARD_PORT``; `mjfl dashboard` over finished runs:
  ``DASHBOARD_PORT``; a lab's researchers' API and its pages: ``LAB_API_PORT``;
- a host in ``WILDCARD_HOSTS`` listens on every address (``listens_everywhere``);
  a server bound there is reached from this machine at ``LOOPBACK``;
- a page or API bound anywhere but a loopback address (or ``localhost``) is
  reachable from other machines, so it needs a token (``needs_token``,
  docs/security.md).
"""

from __future__ import annotations

import ipaddress

DEVICE_PORT = 8765
LIVE_DASHBOARD_PORT = 8780
LAB_API_PORT = 8790
DASHBOARD_PORT = 8080

LOOPBACK = "127.0.0.1"
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def listens_everywhere(host: str) -> bool:
    """Whether a server bound to ``host`` listens on every address of this machine."""
    return host in WILDCARD_HOSTS


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback only (an address of 127.0.0.0/8, ::1, or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name may resolve anywhere


def needs_token(host: str) -> bool:
    """Whether a page or API bound to ``host`` is reachable from other machines, so that it needs a token."""
    return not is_loopback(host)


def reached_here(host: str) -> str:
    """The address this machine reaches a server bound to ``host`` at (the loopback for a wildcard)."""
    if listens_everywhere(host):
        return LOOPBACK
    return f"[{host}]" if ":" in host else host

"""`mjfl certs create`: TLS certificates for the coordinator's wss://."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.cli import options
from mjfl.cli.options import console
from mjfl.cli.syntax import Typer, comma_list

certs_app = Typer(help="TLS certificates for the coordinator's wss://.", no_args_is_help=True)


@certs_app.command("create")
def certs_create(
    out_dir: Annotated[Path, typer.Argument(help="Folder for ca.pem, ca.key, server.pem, server.key (files must not exist).")],
    dns_names: Annotated[str, typer.Option(metavar="NAME,...", help="The coordinator's DNS names.")] = "",
    ip_addresses: Annotated[str, typer.Option(metavar="ADDR,...", help="The coordinator's IP addresses.")] = "",
    days: Annotated[int, typer.Option(help="Validity of both certificates.")] = 825,
) -> None:
    """A local CA and a server certificate for these names and addresses (always also localhost, 127.0.0.1, ::1)."""
    from mjfl.commands.certs import create

    names, addresses = comma_list("--dns-names", dns_names), comma_list("--ip-addresses", ip_addresses)
    with options.flags_of(arguments={"days": "--days", "hosts": "--dns-names", "ips": "--ip-addresses"}):
        create(out_dir, names, addresses, days=days, console=console)

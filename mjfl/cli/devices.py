"""`mjfl devices ...`: attached phones (list, prepare, check, golden), emulated devices, enrolled devices' keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.cli import options
from mjfl.cli.options import AdbOption, AddressOption, ConnectOption, RayOption, console
from mjfl.cli.syntax import Typer, comma_list
from mjfl.errors import UserError

device_app = Typer(help="Devices: attached phones (over adb) and emulated ones.", no_args_is_help=True)

KeysOption = Annotated[Path | None, typer.Option("--keys", help="The key store (default: $XDG_CONFIG_HOME/mjfl/devices.db).")]


@device_app.command("list")
def devices_list(adb: AdbOption = None, connect: ConnectOption = None) -> None:
    """The phones attached over adb: model, Android, ABI, cores, RAM, battery, thermal, and the mjfl app."""
    from mjfl.commands.devices import list_phones
    from mjfl.device.phones.attached import PhoneOptions

    list_phones(PhoneOptions(adb=adb, connect=tuple(connect or ())), console=console)


@device_app.command("prepare")
def devices_prepare(
    apk: Annotated[Path | None, typer.Option(help="The app to install (default: android/app/build/outputs/apk/debug/app-debug.apk when built).")] = None,
    adb: AdbOption = None,
    connect: ConnectOption = None,
) -> None:
    """Install the mjfl app on every attached phone and set it up to train unattended."""
    from mjfl.commands.devices import prepare_phones
    from mjfl.device.phones.attached import PhoneOptions

    prepare_phones(PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())), console=console)


@device_app.command("check")
def devices_check(
    apk: Annotated[Path | None, typer.Option(help="Install this app where it is missing or another build (default: the local build, when there is one).")] = None,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all seven).")] = None,
    timeout_s: Annotated[float, typer.Option(help="Seconds a phone's self-test may say nothing before the phone is given up.")] = 300.0,
    config: Annotated[Path | None, typer.Option(help="Also this run config's own models (factories), at its jobs' input shapes.")] = None,
) -> None:
    """The first-day check: each phone trains every zoo model (and a config's own) on golden data, compared with the Python runtime."""
    from mjfl.commands.device_check import check_phones, custom_cases
    from mjfl.device.phones.attached import PhoneOptions
    from mjfl.device.phones.selftest import Waits

    if not timeout_s > 0:
        raise UserError(f"--timeout-s {timeout_s}: must be > 0 seconds")
    only = comma_list("--models", models) if models else None
    extra = custom_cases(options.run_config(config)) if config is not None else ()
    check_phones(PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())), models=only, waits=Waits(quiet_s=timeout_s),
                 console=console, extra=extra)


@device_app.command("golden")
def devices_golden(
    out: Annotated[Path, typer.Argument(help="Folder to write the set to (replaced), e.g. android/app/src/androidTest/assets/golden.")],
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all seven).")] = None,
) -> None:
    """Write the first-day check's golden set (what the app's instrumented test trains)."""
    from mjfl.commands.device_check import write_golden

    write_golden(out, models=comma_list("--models", models) if models else None, console=console)


@device_app.command("emulate")
def device_emulate(
    url: Annotated[str, typer.Option(help="The coordinator: ws://HOST:PORT.")],
    count: Annotated[int, typer.Option(help="How many devices to emulate.")] = 1,
    runtime: Annotated[str, typer.Option(help="executorch (the task's .pte), torch (eager model) or batched (the devices of a worker trained together).")] = "executorch",
    profile: Annotated[Path | None, typer.Option(help="Profile file: impersonate its phones, drawn to --count devices.")] = None,
    dropout: Annotated[float, typer.Option(help="Chance that a device's round never comes back (0 <= p < 1).")] = 0.0,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: one per CPU).")] = None,
    id_prefix: Annotated[str | None, typer.Option(help="Device ids are PREFIX-INDEX (default: emu-<host>).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the drawn profiles and the devices' round times.")] = 0,
    token: Annotated[str, typer.Option(help="The coordinator's shared lab token (instead of enrolled secrets).")] = "",
    secret: Annotated[str | None, typer.Option(help="The enrolled secret of the one device (with --count 1: its id is PREFIX-0).")] = None,
    key_file: Annotated[Path | None, typer.Option(help="Enrolled secrets, one 'NAME SECRET' a line (mjfl devices enroll NAME --save FILE).")] = None,
    ca: Annotated[Path | None, typer.Option(help="With wss://: trust this CA (or pinned server certificate), PEM.")] = None,
    log: Annotated[Path | None, typer.Option(help="Log file of the device processes (default: none; --verbose shows it all).")] = None,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """Run emulated devices against a coordinator until Ctrl-C (or the coordinator's shutdown)."""
    from mjfl.commands.emulate import emulate

    with options.flags_of(arguments={"count": "--count", "runtime": "--runtime"}):
        emulate(
            url, count, runtime=runtime, profile=profile, dropout=dropout, workers=workers, id_prefix=id_prefix,
            seed=seed, token=token, secret=secret, key_file=key_file, ca=ca, log_file=log, verbose=options.verbose(),
            console=console, ray=options.ray(ray, address),
        )


@device_app.command("enroll")
def devices_enroll(
    name: Annotated[str, typer.Argument(help="The device id it will connect with (a phone's serial, an emulated id).")],
    keys: KeysOption = None,
    save: Annotated[Path | None, typer.Option(help="Also append 'NAME SECRET' to this key file (0600) for --key-file.")] = None,
) -> None:
    """Issue a device its secret: printed once on stdout, kept in the key store (mode 0600)."""
    from mjfl.commands.devices import enroll_device

    enroll_device(name, keys, save=save, console=console)


@device_app.command("revoke")
def devices_revoke(name: Annotated[str, typer.Argument(help="The enrolled device.")], keys: KeysOption = None) -> None:
    """Erase a device's secret: its hellos get bye unauthorized from now on."""
    from mjfl.commands.devices import revoke_device

    revoke_device(name, keys, console=console)


@device_app.command("keys")
def devices_keys(keys: KeysOption = None) -> None:
    """The enrolled devices: name, enrolled, last seen, revoked."""
    from mjfl.commands.devices import list_keys

    list_keys(keys, console=console)

"""`mjfl devices list`/`prepare`: the phones attached over adb; `enroll`/`revoke`/`keys`: their credentials."""

from __future__ import annotations

import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mjfl.commands.secrets import owner_only_stdout
from mjfl.coordinator.remote.keys import (
    EnrolledDevice,
    KeyStore,
    append_key_file,
    default_key_store,
)
from mjfl.device.phones.adb import Adb, PhoneFacts
from mjfl.device.phones.attached import (
    BUILT_APK,
    PhoneOptions,
    attached_or_fail,
    describe,
    on_each_phone,
    prepare,
)
from mjfl.errors import PhoneError


def list_phones(options: PhoneOptions, *, console: Console) -> dict[str, PhoneFacts]:
    """Print a table of the attached phones and their facts; PhoneError when none can be used."""
    adb = Adb(options.adb)
    phones = attached_or_fail(adb, options.connect)
    with console.status(f"reading {len(phones)} phones ..."):
        facts = on_each_phone(phones, adb.facts)
    table = Table(title=f"phones on the adb server at {adb.address}")
    columns = ("serial", "state", "model", "Android", "ABI", "cores", "RAM (MB)", "battery", "thermal", "energy", "mjfl app")
    for column in columns:
        table.add_column(column, justify="right" if column in ("cores", "RAM (MB)", "battery") else "left")
    for phone in phones:
        f = facts.get(phone.serial)
        if isinstance(f, PhoneFacts):
            battery = "?" if f.battery_pct is None else f"{f.battery_pct}%" + (", charging" if f.charging else "")
            table.add_row(
                f.serial, phone.state, f"{f.manufacturer} {f.model}".strip(),
                f"{f.android} (SDK {f.sdk})" if f.sdk else f.android or "?", f.abi or "?",
                str(f.cores or "?"), str(f.ram_mb or "?"), battery, f.thermal,
                _energy(f), "installed" if f.app_installed else "[yellow]missing[/]",
            )  # fmt: skip
        else:
            table.add_row(phone.serial, f"[yellow]{phone.state}[/]", *["-"] * (len(columns) - 2))
    console.print(table)
    for phone in phones:
        problem = facts[phone.serial] if isinstance(facts.get(phone.serial), PhoneError) else phone.problem()
        if problem:
            console.print(f"[yellow]{problem}[/]", highlight=False)
    ok = {s: f for s, f in facts.items() if isinstance(f, PhoneFacts)}
    if not ok:
        raise PhoneError(f"none of the {len(phones)} attached phones can be used (see above)")
    if any(not f.app_installed for f in ok.values()):
        console.print("install the app with: mjfl devices prepare --apk PATH", highlight=False)
    return ok


def _energy(facts: PhoneFacts) -> str:
    """Whether its tasks' energy can be measured, in a word and why not (`mjfl devices check` says more)."""
    if facts.energy()[0]:
        return "measured"
    return "[yellow]no counter[/]" if facts.charge_counter_uah is None else f"[yellow]not: {facts.plugged} power[/]"


def prepare_phones(options: PhoneOptions, *, console: Console) -> dict[str, PhoneFacts]:
    """Install the app (``--apk``, else a local build when there is one) and set every usable phone up."""
    apk = options.apk if options.apk is not None else (BUILT_APK if BUILT_APK.is_file() else None)
    if apk is not None and not apk.is_file():
        raise PhoneError(f"--apk {apk}: no such file (build it: docs/phones.md, section 1)")
    adb = Adb(options.adb)
    phones = attached_or_fail(adb, options.connect)
    what = f"installing {apk} on" if apk else "preparing"
    with console.status(f"{what} {sum(p.usable for p in phones)} phones ..."):
        results = on_each_phone(phones, lambda serial: prepare(adb, serial, apk=apk))
    for phone in phones:
        if not phone.usable:
            console.print(f"[yellow]{phone.problem()}[/]", highlight=False)
    failed = []
    for serial, result in results.items():
        if isinstance(result, PhoneError):
            failed.append(serial)
            console.print(f"[red]{result}[/]", highlight=False)
        else:
            done = "app installed" if apk else "app already installed"
            console.print(f"phone {serial}: {describe(result)}; {done}, ready", highlight=False)
    if failed or not results:
        raise PhoneError(f"{len(failed) or len(phones)} of {len(phones)} phones are not ready (see above)")
    console.print(
        f"{len(results)} phones ready; train on them with: mjfl testbed run CONFIG --phones", highlight=False
    )
    return {s: r for s, r in results.items() if isinstance(r, PhoneFacts)}


# -- enrolled devices (docs/security.md) -------------------------------------------


def enroll_device(name: str, keys: Path | None, *, save: Path | None, console: Console) -> str:
    """Issue ``name`` a secret in the key store and print it once (also appended to ``save``).

    Then says what enrolment does to later runs: a coordinator that uses
    this store admits only its enrolled devices (docs/security.md).
    """
    owner_only_stdout()  # before the secret exists: `mjfl devices enroll NAME > FILE`
    store = KeyStore(keys or default_key_store(), create=True)
    secret = store.enroll(name)
    if save is not None:
        append_key_file(save, name, secret)
    print(secret)  # stdout, alone: `SECRET=$(mjfl devices enroll NAME)`
    console.print(
        f"enrolled {name} in {store.path}; the secret above is shown only this once"
        + (f" (also written to {save})" if save is not None else ""),
        highlight=False, soft_wrap=True,
    )
    console.print(_what_enrolment_does(store), highlight=False, soft_wrap=True)
    return secret


def _what_enrolment_does(store: KeyStore) -> str:
    """Which runs now refuse devices that are not enrolled, and how to admit them."""
    if store.path == default_key_store():
        runs = "from now on, every mjfl testbed run and mjfl profile of this user uses this key store"
    else:
        runs = f"a run whose testbed.keys (or --keys) is {store.path} uses this key store"
    return (
        f"[yellow]note:[/] {runs} and admits only the devices enrolled in it ({store.enrolled()} now) and those the"
        " run starts itself (--emulate, --phones); admit another device by enrolling it too, by the lab's shared"
        f" token (testbed.token), or every device again by removing {store.path} (docs/security.md)"
    )


def revoke_device(name: str, keys: Path | None, *, console: Console) -> None:
    """Erase ``name``'s secret: its next hello is refused (a connected device stays until it reconnects)."""
    store = KeyStore(keys or default_key_store())
    store.revoke(name)
    console.print(f"revoked {name} in {store.path}", highlight=False)


def list_keys(keys: Path | None, *, console: Console) -> list[EnrolledDevice]:
    """Print the enrolled devices: name, enrolled, last seen, revoked."""
    store = KeyStore(keys or default_key_store())
    devices = store.devices()
    table = Table(title=f"enrolled devices in {store.path}")
    for column in ("name", "enrolled", "last seen", "revoked"):
        table.add_column(column)

    def when(t: float | None) -> str:
        return "-" if t is None else datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")

    for d in devices:
        table.add_row(d.name, when(d.enrolled_at), when(d.last_seen), when(d.revoked_at))
    console.print(table)
    return devices

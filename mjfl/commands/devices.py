"""`mjfl devices list` and `mjfl devices prepare`: the phones attached over adb, and getting them ready."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rich.console import Console
from rich.table import Table

from mjfl.android_bridge.adb import Adb, AttachedPhone, PhoneFacts
from mjfl.android_bridge.phones import BUILT_APK, PhoneOptions, describe, prepare
from mjfl.errors import PhoneError

T = TypeVar("T")


def _each(phones: list[AttachedPhone], work: Callable[[str], T]) -> dict[str, T | PhoneError]:
    """``work(serial)`` on every usable phone at once (adb serves phones in parallel)."""
    usable = [p.serial for p in phones if p.usable]

    def attempt(serial: str) -> T | PhoneError:
        try:
            return work(serial)
        except PhoneError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(usable)))) as pool:
        return dict(zip(usable, pool.map(attempt, usable)))


def _attached(adb: Adb) -> list[AttachedPhone]:
    phones = adb.phones()
    if not phones:
        raise PhoneError(
            f"no phone attached to the adb server at {adb.address}: connect one by USB"
            " with USB debugging on (docs/phones.md, a lab from zero)"
        )
    return phones


def list_phones(options: PhoneOptions, *, console: Console) -> dict[str, PhoneFacts]:
    """Print a table of the attached phones and their facts; PhoneError when none can be used."""
    adb = Adb(options.adb)
    phones = _attached(adb)
    with console.status(f"reading {len(phones)} phones ..."):
        facts = _each(phones, adb.facts)
    table = Table(title=f"phones on the adb server at {adb.address}")
    for column in ("serial", "state", "model", "Android", "ABI", "cores", "RAM (MB)", "battery", "thermal", "mjfl app"):
        table.add_column(column, justify="right" if column in ("cores", "RAM (MB)", "battery") else "left")
    for phone in phones:
        f = facts.get(phone.serial)
        if isinstance(f, PhoneFacts):
            battery = "?" if f.battery_pct is None else f"{f.battery_pct}%" + (", charging" if f.charging else "")
            table.add_row(
                f.serial, phone.state, f"{f.manufacturer} {f.model}".strip(),
                f"{f.android} (SDK {f.sdk})" if f.sdk else f.android or "?", f.abi or "?",
                str(f.cores or "?"), str(f.ram_mb or "?"), battery, f.thermal,
                "installed" if f.app_installed else "[yellow]missing[/]",
            )  # fmt: skip
        else:
            table.add_row(phone.serial, f"[yellow]{phone.state}[/]", *["-"] * 8)
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


def prepare_phones(options: PhoneOptions, *, console: Console) -> dict[str, PhoneFacts]:
    """Install the app (``--apk``, else a local build when there is one) and set every usable phone up."""
    apk = options.apk if options.apk is not None else (BUILT_APK if BUILT_APK.is_file() else None)
    if apk is not None and not apk.is_file():
        raise PhoneError(f"--apk {apk}: no such file (build it: docs/phones.md, section 1)")
    adb = Adb(options.adb)
    phones = _attached(adb)
    what = f"installing {apk} on" if apk else "preparing"
    with console.status(f"{what} {sum(p.usable for p in phones)} phones ..."):
        results = _each(phones, lambda serial: prepare(adb, serial, apk=apk))
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

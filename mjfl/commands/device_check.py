"""`mjfl devices check`: the first-day check of every attached phone; `mjfl devices golden`: its golden set.

docs/phones.md, "First-day check", says what the check does and what to do
when a phone fails it. It also says, for each phone, whether the app can
measure its tasks' energy there (``PhoneFacts.energy``: a charge counter,
and on battery).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from mjfl import logs
from mjfl.coordinator.config import RunConfig
from mjfl.device.emulated.golden import GoldenCase, cached_set, golden_set
from mjfl.device.phones.adb import Adb
from mjfl.device.phones.attached import (
    BUILT_APK,
    PhoneOptions,
    attached_or_fail,
    on_each_phone,
)
from mjfl.device.phones.selftest import (
    DEFAULT_WAITS,
    CaseCheck,
    PhoneCheck,
    SelfTestLines,
    Waits,
    check_phone,
)
from mjfl.errors import PhoneError


def check_phones(
    options: PhoneOptions,
    *,
    models: list[str] | None = None,
    waits: Waits = DEFAULT_WAITS,
    console: Console,
    golden: Path | None = None,
    extra: Sequence[GoldenCase] = (),
) -> dict[str, PhoneCheck]:
    """Run the app's self-test on every usable phone and print the verdicts.

    Installs ``options.apk`` (else a local build when there is one) where the
    app is missing or another build. PhoneError when a phone fails, cannot be
    checked, or none can be used. ``golden``: a set already made (tests).
    """
    apk = options.apk if options.apk is not None else (BUILT_APK if BUILT_APK.is_file() else None)
    if apk is not None and not apk.is_file():
        raise PhoneError(f"--apk {apk}: no such file (build it: docs/phones.md, section 1)")
    adb = Adb(options.adb)
    phones = attached_or_fail(adb, options.connect)
    for phone in phones:
        if not phone.usable:
            console.print(f"[yellow]{phone.problem()}[/]", highlight=False)
    usable = [p.serial for p in phones if p.usable]
    if not usable:
        raise PhoneError(f"none of the {len(phones)} attached phones can be used (see above)")
    if golden is None:
        golden = _golden(models, console, extra)
    run = secrets.token_hex(4)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True) as bar:
        rows = {serial: bar.add_task(f"phone {serial}: waiting") for serial in usable}

        def check(serial: str) -> PhoneCheck:
            def progress(what: str, lines: SelfTestLines) -> None:
                bar.update(rows[serial], description=_progress_text(serial, what, lines))

            return check_phone(adb, serial, golden, run=run, apk=apk, waits=waits, progress=progress)

        results = on_each_phone(phones, check)
    checks = {s: r for s, r in results.items() if isinstance(r, PhoneCheck)}
    if checks:
        console.print(_table(checks))
    bad = 0
    for result in results.values():
        if isinstance(result, PhoneError):
            bad += 1
            console.print(f"[red]{result}[/]", highlight=False, soft_wrap=True)
        else:
            bad += not result.passed
            console.print(_verdict(result), highlight=False, soft_wrap=True)
            console.print(f"phone {result.serial}: can it measure energy? {result.facts.energy()[1]}", highlight=False, soft_wrap=True)
    if bad:
        raise PhoneError(
            f"{bad} of {len(results)} phones failed the first-day check (see above; what to do: docs/phones.md, First-day check)"
        )
    console.print(f"{len(results)} phones passed the first-day check", highlight=False)
    return checks


def _progress_text(serial: str, what: str, lines: SelfTestLines) -> str:
    if lines.started is None:
        return f"phone {serial}: {what} ..."
    done = len(lines.results)
    failed = sum(not c.passed for c in lines.results.values())
    on = f", training {lines.next_case}" if lines.next_case else ""
    return f"phone {serial}: {done}/{len(lines.cases)} cases{on}" + (f" ([red]{failed} failed[/])" if failed else "")


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _diff(c: CaseCheck) -> str:
    if c.max_rel_diff is None:
        return "-"
    return f"{max(c.max_rel_diff, c.loss_rel_diff or 0.0):.1e}"


def _table(checks: dict[str, PhoneCheck]) -> Table:
    table = Table(title="first-day check: each zoo model trained on the phone against the Python runtime")
    for column in ("phone", "model", "result", "max rel diff", "step ms", "planned MB", "peak MB", "battery", "thermal"):
        table.add_column(column, justify="right" if column not in ("phone", "model", "result", "thermal") else "left")
    for serial, check in checks.items():
        for i, c in enumerate(check.cases):
            peak = _mb(c.peak_mb) + ("" if c.peak_reset or c.peak_mb is None else "*")
            table.add_row(
                serial if i == 0 else "", c.case, "pass" if c.passed else "[red]FAIL[/]", _diff(c),
                _ms(c.step_ms), _mb(c.planned_mb), peak,
                c.state.battery, c.state.thermal,
            )  # fmt: skip
        table.add_section()
    return table


def _verdict(check: PhoneCheck) -> str:
    f = check.facts
    facts = f"{f.manufacturer} {f.model}".strip() + f", Android {f.android or '?'}, {f.abi or '?'}"
    took = "" if check.elapsed_s is None else f" in {check.elapsed_s:.1f} s"
    state = (
        f"battery {check.started.battery} -> {check.ended.battery}, thermal {check.started.thermal} -> {check.ended.thermal}"
    )
    installed = "; app installed first" if check.installed else ""
    if check.passed:
        return f"phone {check.serial} ({facts}): passed {len(check.cases)} of {len(check.cases)}{took}; {state}{installed}"
    why = [f"{c.case}: {c.problem()}" for c in check.cases if not c.passed]
    if check.error:
        why.append(check.error)
    return f"[red]phone {check.serial} ({facts}): FAILED[/] {'; '.join(why)}{took}; {state}{installed}"


def _golden(models: list[str] | None, console: Console, extra: Sequence[GoldenCase] = ()) -> Path:
    """The golden set, made on the first use of this version of the programs and the trainer."""
    folder = cached_set(models, extra=extra)
    if folder is not None:
        return folder
    console.print(
        "making the golden set: exporting each model's program and training it in the Python runtime"
        " (minutes, once; then .mjfl-cache/golden) ...",
        highlight=False,
    )
    with logs.native_output():  # the exporter's and the runtime's own lines; --verbose shows them
        return golden_set(models, workers=2, extra=extra)


def write_golden(out: Path, *, models: list[str] | None, console: Console, extra: Sequence[GoldenCase] = ()) -> Path:
    """Copy the golden set (made if need be) to ``out``, replacing what is there: the instrumented test's assets."""
    folder = _golden(models, console, extra)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(folder, out)
    console.print(f"golden set {folder.name} written to {out}", highlight=False)
    return out


def custom_cases(config: RunConfig) -> list[GoldenCase]:
    """One case per job of ``config`` whose model is its own (a factory), at its job's input shape and classes.

    `mjfl devices check --config` adds them to the zoo's: a phone's first day covers the models it will train.
    """
    from mjfl.coordinator.config import model_spec
    from mjfl.jobs.base import MODEL_NAMES
    from mjfl.jobs.datasets import load_dataset

    cases = []
    for index, job in enumerate(config.jobs):
        if job.model in MODEL_NAMES:
            continue
        data = load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels, seed=config.seed)
        spec = model_spec(job, data.input_shape, data.num_classes)
        cases.append(GoldenCase(spec.name, spec.input_shape, seed=20360 + index, classes=spec.num_classes,
                                name=f"custom-{job.name}", args=spec.args, sha256=spec.sha256))
    return cases

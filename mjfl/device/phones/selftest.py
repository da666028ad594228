"""The first-day check on one phone: the app's self-test, started and read over adb.

``mjfl devices check`` (docs/phones.md, "First-day check") runs this on every
attached phone. The golden set (``mjfl.device.emulated.golden``: a
folder of cases in the wire protocol's encoding) is pushed to the phone, the
app's self-test is started as a run starts the app, with ``am start`` of a
component only the adb shell may start, and its lines are read back from
logcat: one JSON object per case, then one with the verdict (their fields:
``org.mjfl.app.selftest.SelfTest``). Command by command:

    pm path org.mjfl.app; sha256sum BASE.apk          is the installed app the --apk?
    cat /data/local/tmp/mjfl-selftest/KEY/manifest.json   is the set there already?
    rm -rf /data/local/tmp/mjfl-selftest; mkdir -p ...; chmod 755 ...;
    sync SEND each file (mode 0644)                   push the set
    am start -n org.mjfl.app/.SelfTestActivity --es run RUN --es dir /data/local/tmp/mjfl-selftest/KEY
    logcat -d -v raw MJFL-CHECK:V *:S                 its lines so far (polled)
    pidof org.mjfl.app                                did the app die? (when it goes quiet)

Why /data/local/tmp: the shell owns it (adb pushes there on every Android),
its mode 0771 lets an app through to files it knows the path of, and the
SELinux policy lets every untrusted app read shell files since Android 8.0
(AOSP system/sepolicy, private/untrusted_app_all.te: ``allow untrusted_app_all
shell_data_file:file r_file_perms``), so the app reads the set without any
permission on API 26-34. The app-specific external folder
(/sdcard/Android/data/org.mjfl.app/files) is the other candidate, but on
Android 11+ a folder there that adb made before the app can end up owned by the
shell, which the app then cannot read; /data/local/tmp has no such history.

The pure part (what the lines say) is ``SelfTestLines``; ``check_phone`` does
the I/O and blocks (run it in a thread per phone).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mjfl.device.phones.adb import (
    APP_PACKAGE,
    THERMAL_STATUS,
    Adb,
    PhoneFacts,
    installed_app,
)
from mjfl.device.phones.attached import prepare
from mjfl.errors import PhoneError

SELFTEST_ACTIVITY = f"{APP_PACKAGE}/.SelfTestActivity"
SELFTEST_TAG = "MJFL-CHECK"
REMOTE_ROOT = "/data/local/tmp/mjfl-selftest"
DUMP = ["logcat", "-d", "-v", "raw", f"{SELFTEST_TAG}:V", "*:S"]


# -- what the self-test says (pure) --------------------------------------------------


@dataclass(frozen=True)
class DeviceState:
    """A result's ``device_state`` (protocol.md 5.5), as the self-test reports it with every line."""

    battery_pct: int | None = None
    charging: bool | None = None
    thermal_status: int | None = None

    @classmethod
    def from_json(cls, o: Any) -> DeviceState:
        if not isinstance(o, dict):
            return cls()
        pct, charging, thermal = o.get("battery_pct"), o.get("charging"), o.get("thermal_status")
        return cls(
            pct if isinstance(pct, int) else None,
            charging if isinstance(charging, bool) else None,
            thermal if isinstance(thermal, int) else None,
        )

    @property
    def battery(self) -> str:
        if self.battery_pct is None:
            return "?"
        return f"{self.battery_pct}%" + (", charging" if self.charging else "")

    @property
    def thermal(self) -> str:
        t = self.thermal_status
        if t is None:
            return "unknown"
        return THERMAL_STATUS[t] if 0 <= t < len(THERMAL_STATUS) else str(t)


def _number(o: dict[str, Any], key: str) -> float | None:
    v = o.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class CaseCheck:
    """One case's line: did the phone train it as the Python runtime did, how fast, in how much memory."""

    case: str
    passed: bool
    max_rel_diff: float | None  # None: no comparison (an error, or NaN)
    worst: str | None  # the tensor of max_rel_diff
    loss_rel_diff: float | None
    steps: int
    step_ms: float | None  # median
    first_step_ms: float | None
    planned_mb: float | None
    peak_mb: float | None
    peak_reset: bool  # False: peak_mb is the app's peak since it started, not this case's
    state: DeviceState
    error: str | None

    @classmethod
    def from_line(cls, o: dict[str, Any]) -> CaseCheck:
        steps = o.get("steps")
        return cls(
            case=str(o.get("case")),
            passed=o.get("pass") is True,
            max_rel_diff=_number(o, "max_rel_diff"),
            worst=o.get("worst") if isinstance(o.get("worst"), str) else None,
            loss_rel_diff=_number(o, "loss_rel_diff"),
            steps=steps if isinstance(steps, int) else 0,
            step_ms=_number(o, "step_ms"),
            first_step_ms=_number(o, "first_step_ms"),
            planned_mb=_number(o, "planned_mb"),
            peak_mb=_number(o, "peak_mb"),
            peak_reset=o.get("peak_reset") is True,
            state=DeviceState.from_json(o.get("device_state")),
            error=o.get("error") if isinstance(o.get("error"), str) else None,
        )

    def problem(self) -> str:
        """Why it failed, in words (empty when it passed)."""
        if self.passed:
            return ""
        if self.error:
            return self.error
        if self.max_rel_diff is None or self.loss_rel_diff is None:
            return "the trained weights or loss are not finite"
        if self.loss_rel_diff > self.max_rel_diff:
            return f"the mean loss differs by {self.loss_rel_diff:.1e}"
        return f"{self.worst} differs by {self.max_rel_diff:.1e}"


def parse_lines(text: str, run: str) -> list[dict[str, Any]]:
    """The self-test's JSON lines of ``run`` in a logcat dump (other runs' lines and logcat's own are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue  # "--------- beginning of main", a line cut by the buffer's end
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if isinstance(o, dict) and o.get("run") == run and isinstance(o.get("event"), str):
            out.append(o)
    return out


@dataclass
class SelfTestLines:
    """What one run's lines said so far; fed every dump, it keeps lines the log buffer has since dropped."""

    run: str
    cases: list[str] = field(default_factory=list)  # from the start line
    tolerance: float | None = None
    started: DeviceState | None = None
    results: dict[str, CaseCheck] = field(default_factory=dict)
    done: dict[str, Any] | None = None
    busy: str | None = None  # the run in progress when this one was refused

    def feed(self, text: str) -> bool:
        """Takes a logcat dump; returns whether it said anything new."""
        news = False
        for o in parse_lines(text, self.run):
            event = o["event"]
            if event == "start" and self.started is None:
                self.cases = [str(c) for c in o.get("cases", [])]
                self.tolerance = _number(o, "tolerance")
                self.started = DeviceState.from_json(o.get("device_state"))
                news = True
            elif event == "case" and str(o.get("case")) not in self.results:
                check = CaseCheck.from_line(o)
                self.results[check.case] = check
                news = True
            elif event == "done" and self.done is None:
                self.done = o
                news = True
            elif event == "busy" and self.busy is None:
                self.busy = str(o.get("running"))
                news = True
        return news

    @property
    def next_case(self) -> str | None:
        """The case the self-test is on (the first without a line), if it said which there are."""
        return next((c for c in self.cases if c not in self.results), None)


@dataclass(frozen=True)
class PhoneCheck:
    """The first-day check of one phone: its facts, how each case went, and the verdict."""

    serial: str
    facts: PhoneFacts
    cases: tuple[CaseCheck, ...]
    passed: bool
    elapsed_s: float | None
    started: DeviceState
    ended: DeviceState
    installed: bool  # the check installed the app first
    error: str | None = None  # why the self-test could not run its set

    @property
    def failed(self) -> list[str]:
        return [c.case for c in self.cases if not c.passed]


# -- on the phone (blocking) ---------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def installed_is(adb: Adb, serial: str, apk: Path) -> bool | None:
    """Whether the app on the phone is ``apk`` (its base.apk has the same sha256); None when it cannot tell."""
    if not adb.shell(serial, ["pm", "path", APP_PACKAGE]).strip().startswith("package:"):
        return False
    installed = installed_app(adb, serial)
    return None if installed is None else installed == _sha256(apk)


def push_set(adb: Adb, serial: str, folder: Path) -> str:
    """Push the golden set in ``folder`` unless the phone has it; returns its folder on the phone.

    Other sets pushed before are removed (one set at a time: they are megabytes).
    """
    manifest = (folder / "manifest.json").read_text()
    key = json.loads(manifest)["key"]
    remote = f"{REMOTE_ROOT}/{key}"
    if adb.shell(serial, ["cat", f"{remote}/manifest.json"]) == manifest:
        return remote
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json")
    folders = sorted({remote, *(f"{remote}/{p.parent.relative_to(folder).as_posix()}" for p in files)} - {f"{remote}/."})
    adb.shell(serial, ["rm", "-rf", REMOTE_ROOT])
    adb.shell(serial, ["mkdir", "-p", *folders])
    # The app is "others" to the shell's files: it needs to pass through the folders and read the files.
    adb.shell(serial, ["chmod", "755", REMOTE_ROOT, *folders])
    for p in files:
        adb.push(serial, p, f"{remote}/{p.relative_to(folder).as_posix()}", mode=0o644)
    adb.push(serial, folder / "manifest.json", f"{remote}/manifest.json", mode=0o644)  # last: the set is whole
    return remote


def start_selftest(adb: Adb, serial: str, run: str, remote: str) -> None:
    output = adb.shell(serial, ["am", "start", "-n", SELFTEST_ACTIVITY, "--es", "run", run, "--es", "dir", remote])
    if "does not exist" in output:
        raise PhoneError(
            f"phone {serial}: the installed app has no self-test; install this build with --apk PATH"
        )
    if "Error" in output or "Exception" in output:
        raise PhoneError(f"phone {serial}: starting the self-test failed: {output.strip().splitlines()[-1]}")


@dataclass(frozen=True)
class Waits:
    """How long the check waits for a phone: its first line, then each next one; how often it looks."""

    start_s: float = 60.0
    quiet_s: float = 300.0
    poll_s: float = 1.0


DEFAULT_WAITS = Waits()

Progress = Callable[[str, SelfTestLines], None]


def check_phone(
    adb: Adb,
    serial: str,
    golden: Path,
    *,
    run: str,
    apk: Path | None,
    waits: Waits = DEFAULT_WAITS,
    progress: Progress = lambda what, lines: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> PhoneCheck:
    """The first-day check of one phone; PhoneError (naming the phone) when it cannot be checked.

    Installs ``apk`` first when the app is missing or another build, pushes the
    set, starts the self-test, and reads its lines until the verdict.
    ``progress(what, lines)`` hears of every step and every new line.
    """
    install = apk is not None and installed_is(adb, serial, apk) is not True
    progress("installing the app" if install else "preparing", SelfTestLines(run))
    facts = prepare(adb, serial, apk=apk if install else None)
    progress("pushing the golden set", SelfTestLines(run))
    remote = push_set(adb, serial, golden)
    lines = SelfTestLines(run)
    start_selftest(adb, serial, run, remote)
    progress("starting the self-test", lines)
    started = last = clock()
    while lines.done is None:
        sleep(waits.poll_s)
        if lines.feed(adb.shell(serial, DUMP)):
            last = clock()
            progress("self-test", lines)
            continue
        if lines.busy is not None:
            raise PhoneError(
                f"phone {serial}: another self-test (run {lines.busy}) is still running on it; wait for it,"
                f" or stop it: adb -s {serial} shell am force-stop {APP_PACKAGE}"
            )
        waited = clock() - last
        if lines.started is None and waited > waits.start_s:
            raise PhoneError(
                f"phone {serial}: the self-test did not start within {waits.start_s:.0f} s"
                f" (no line under {SELFTEST_TAG}); is the phone unlocked? see adb -s {serial} logcat -s MJFL {SELFTEST_TAG}"
            )
        if lines.started is not None and waited > waits.quiet_s:
            raise PhoneError(_silent(adb, serial, lines, waited))
    done = lines.done
    cases = tuple(lines.results[c] for c in lines.cases if c in lines.results)
    error = done.get("error") if isinstance(done.get("error"), str) else None
    lost = [c for c in lines.cases if c not in lines.results]
    if error is None and lost:
        error = f"the lines of {', '.join(lost)} are gone from the phone's log (a busy log buffer?); check it again"
    return PhoneCheck(
        serial=serial,
        facts=facts,
        cases=cases,
        passed=done.get("pass") is True and error is None and len(cases) > 0,
        elapsed_s=_number(done, "elapsed_s") or (clock() - started),
        started=lines.started or DeviceState(),
        ended=DeviceState.from_json(done.get("device_state")),
        installed=install,
        error=error,
    )


def _silent(adb: Adb, serial: str, lines: SelfTestLines, waited: float) -> str:
    """Why a started self-test went quiet, as far as adb can tell."""
    done = f"{len(lines.results)} of {len(lines.cases)} cases done"
    where = f" while training {lines.next_case}" if lines.next_case else ""
    if not adb.app_running(serial):
        return (
            f"phone {serial}: the app stopped during the self-test{where} ({done}):"
            f" see adb -s {serial} logcat -d -s AndroidRuntime"
        )
    return (
        f"phone {serial}: the self-test said nothing for {waited:.0f} s{where} ({done});"
        f" see adb -s {serial} logcat -s MJFL {SELFTEST_TAG}, or wait longer with --timeout-s"
    )

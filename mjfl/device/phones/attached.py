"""The attached phones of a run (or of a lab service's life): prepared, pointed at the coordinator, and kept pointed as they come and go.

`mjfl testbed run --phones`, `mjfl profile --phones` and `mjfl serve --phones` use ``Phones``:
before anything else, ``attached()`` says which phones can be used (or one
line saying why none can); once the coordinator listens, ``serving(port)``
prepares each phone (install when asked, ``adb reverse`` of the port, the
app started with its extras), copies each phone's log into
``<out>/phones/<serial>.logcat``, and follows hot-plug: a phone plugged in
later, or back after a cable pull, gets its reverse forward again (adb drops
it with the connection) and the app started if it is not running. The
phones then connect like any device; the coordinator schedules them once
they are welcomed. A caller that learns an app's connection was lost while
its phone stayed (the lab service does) calls ``lost(serial)``: the app is
started again if it no longer runs (it crashed, or Android killed it), at
most once per ``CRASH_BACKOFF_S``; one that stops again sooner waits for a
replug, so that a phone on which the app always crashes does not fail task
after task. ``explain(serial, reason)`` gives such a lost connection's
reason with how the app ended, as the phone's log says it (``deaths.py``):
the event of the device's leaving names the cause. While a phone is
served, its screen stays on while it is plugged in (``svc power stayon``),
so that it does not suspend between tasks. Phones over wireless debugging
(``PhoneOptions.connect``, the energy set-up: on battery) are connected
first and asked for again every ``RECONNECT_S`` when they drop. However
the run ends (done, an error, Ctrl-C or SIGTERM, or a failure while
preparing), the app is force-stopped on every phone it was started on, so
no phone stays awake for a run that is over, the forwards are taken back
and each phone's stay-on setting is put back as it was.

The adb calls block (adbutils), so each runs in a thread; the hot-plug and
logcat streams have threads of their own, ended on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from mjfl.device.phones.adb import (
    APP_PACKAGE,
    Adb,
    AttachedPhone,
    PhoneFacts,
    installed_app,
)
from mjfl.device.phones.logcat import PhoneLogs
from mjfl.errors import PhoneError
from mjfl.logs import phone_log_name

log = logging.getLogger(__name__)

# An app that stops again this soon after being started again after a stop is left stopped until a replug.
CRASH_BACKOFF_S = 300.0
# How long a lost connection's event waits for the phone's log to say how the app ended: a kill is
# logged just after it (lmkd, ActivityManager), and its line may reach us after the connection's end.
CAUSE_WAIT_S = 5.0
# How often a wireless phone that is not connected is asked for again (``adb connect``).
RECONNECT_S = 10.0
# The phone's setting that keeps its screen on while plugged in, and the value the bridge sets:
# AC, USB and wireless charging (1 | 2 | 4; `svc power stayon true`). On battery it never applies.
STAY_ON = "stay_on_while_plugged_in"

# Where `./gradlew :app:assembleDebug` puts the APK (docs/phones.md, section 1).
BUILT_APK = Path("android/app/build/outputs/apk/debug/app-debug.apk")


T = TypeVar("T")


def on_each_phone(phones: list[AttachedPhone], work: Callable[[str], T]) -> dict[str, T | PhoneError]:
    """``work(serial)`` on every usable phone at once (adb serves phones in parallel)."""
    usable = [p.serial for p in phones if p.usable]

    def attempt(serial: str) -> T | PhoneError:
        try:
            return work(serial)
        except PhoneError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(usable)))) as pool:
        return dict(zip(usable, pool.map(attempt, usable)))


def attached_or_fail(adb: Adb, connect: tuple[str, ...] = ()) -> list[AttachedPhone]:
    """The phones attached to ``adb``'s server, usable or not, the wireless ones of ``connect`` connected first;
    PhoneError (one line) when there is none, or one of ``connect`` does not answer."""
    for address in connect:
        adb.connect(address)
    phones = adb.phones()
    if not phones:
        raise PhoneError(
            f"no phone attached to the adb server at {adb.address}: connect one by USB with USB debugging on,"
            " or over wireless debugging with --connect HOST:PORT (docs/phones.md, a lab from zero)"
        )
    return phones


@dataclass(frozen=True)
class PhoneOptions:
    """How a command reaches the phones: the adb server, an APK to install, the app's token."""

    adb: str | None = None  # "HOST:PORT"; default: adb's own (127.0.0.1:5037)
    apk: Path | None = None  # install it first; default: install nothing
    token: str = ""
    connect: tuple[str, ...] = ()  # phones over wireless debugging, "HOST:PORT" each (`adb connect`), kept connected


def describe(facts: PhoneFacts) -> str:
    """One line on a phone, e.g. ``Google Pixel 7, Android 14, arm64-v8a, 8 cores, 7628 MB, battery 87% charging``."""
    parts = [f"{facts.manufacturer} {facts.model}".strip() or "unknown model", f"Android {facts.android or '?'}"]
    parts += [facts.abi or "unknown ABI", f"{facts.cores or '?'} cores", f"{facts.ram_mb or '?'} MB"]
    if facts.battery_pct is not None:
        parts.append(f"battery {facts.battery_pct}%" + (" charging" if facts.charging else ""))
    if facts.thermal_status:
        parts.append(f"thermal {facts.thermal}")
    return ", ".join(parts)


def prepare(adb: Adb, serial: str, *, apk: Path | None) -> PhoneFacts:
    """Install (when ``apk``) and set the phone up to train unattended; returns its facts.

    Beyond the install: the notification permission (Android 13+, so the
    foreground service shows its state) and the app on the battery
    optimisation allowlist, so Doze does not cut it off mid-run (both
    harmless when already done).
    """
    if apk is not None:
        adb.install(serial, apk)
    facts = adb.facts(serial)
    if not facts.app_installed:
        raise PhoneError(
            f"phone {serial}: the mjfl app is not installed; give --apk PATH"
            f" (build it: docs/phones.md, section 1; by default {BUILT_APK})"
        )
    if facts.sdk is not None and facts.sdk >= 33:
        adb.shell(serial, ["pm", "grant", APP_PACKAGE, "android.permission.POST_NOTIFICATIONS"])
    adb.shell(serial, ["dumpsys", "deviceidle", "whitelist", f"+{APP_PACKAGE}"])
    return facts


class Phones:
    """The phones attached to one adb server, for one run."""

    def __init__(self, options: PhoneOptions, *, log_dir: Path, say: Callable[[str], None]) -> None:
        self.options = options
        self.adb = Adb(options.adb)
        self.log_dir = log_dir
        self.logs = PhoneLogs(log_dir)
        """Each phone's log, in ``log_dir``; ``logs.cut(folder)`` copies it to another folder too, for a while."""
        self.say = say
        self.serials: list[str] = []
        self._states: dict[str, str] = {}
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        # The phones the app was started on (or may have been: a launch whose reply was lost),
        # and the launches under way; a launch is refused once the run ends (_close).
        self._launching = threading.Condition()
        self._launched: set[str] = set()
        self._in_flight = 0
        self.secret_for: Callable[[str], str | None] = lambda serial: None
        """The secret each phone proves in its hello (by serial), handed over in the launch extras."""
        self.pin: str | None = None
        """With wss://: the sha256 (hex) of the coordinator's certificate, which the app pins."""
        self._lost: Callable[[str], None] = lambda serial: None  # set while serving
        self._restarted: dict[str, float] = {}  # when the app was last started again after it stopped, by serial
        self._deaths: dict[str, str] = {}  # how the app last ended, by serial, as its log said (``explain``)
        self._stay_on: dict[str, str] = {}  # each phone's stay-on setting before the bridge set it, by serial
        self.reconnect_s = RECONNECT_S
        """How often a wireless phone that dropped is asked for again."""
        self.cause_wait_s = CAUSE_WAIT_S
        """How long a lost connection's reason waits for the phone's log to say how the app ended."""
        self._reconnector: threading.Thread | None = None
        self.apps: dict[str, str | None] = {}
        """Each prepared phone's installed app: the sha256 of its base.apk as read on the phone (None: unreadable),
        by serial (its device id), read when the app is started for the coordinator (a run's provenance)."""

    def attached(self) -> list[str]:
        """The usable phones' serials; PhoneError (one line) when there is none.

        Unusable ones (unauthorized, offline) are reported and left out. Wireless
        phones (``options.connect``) are connected first; one that does not answer is said.
        """
        for address in self.options.connect:
            try:
                self.adb.connect(address)
            except PhoneError as exc:
                self.say(str(exc))
        phones = self.adb.phones()
        self._states = {p.serial: p.state for p in phones}
        self.serials = [p.serial for p in phones if p.usable]
        if not self.serials:
            why = "; ".join(p.problem() for p in phones) or "none is attached"
            raise PhoneError(
                f"no phone to use on the adb server at {self.adb.address}: {why}"
                " (attach one by USB with USB debugging on: docs/phones.md)"
            )
        for phone in phones:
            if not phone.usable:
                self.say(phone.problem())
        return self.serials

    @contextlib.asynccontextmanager
    async def serving(self, port: int) -> AsyncIterator[list[str]]:
        """Point the attached phones at the coordinator on ``port`` while the body runs; yields their serials.

        A phone that cannot be prepared is reported and left out; none at all is a PhoneError.
        On the way out, however it is taken, the app is force-stopped wherever it was started.
        """
        url = f"{'wss' if self.pin else 'ws'}://127.0.0.1:{port}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        tracker: threading.Thread | None = None
        try:
            results = await asyncio.gather(
                *(asyncio.to_thread(self._point, s, port, url, self.options.apk) for s in self.serials),
                return_exceptions=True,
            )
            ready = []
            for serial, result in zip(self.serials, results):
                if isinstance(result, PhoneError):
                    self.say(str(result))
                elif isinstance(result, BaseException):
                    raise result
                else:
                    ready.append(serial)
            if not ready:
                raise PhoneError(f"none of the {len(self.serials)} attached phones could be prepared (see above)")
            loop = asyncio.get_running_loop()
            changes: asyncio.Queue[list[AttachedPhone] | str] = asyncio.Queue()
            self._lost = lambda serial: loop.call_soon_threadsafe(changes.put_nowait, serial)
            tracker = threading.Thread(
                target=self._track, args=(lambda phones: loop.call_soon_threadsafe(changes.put_nowait, phones),),
                name="adb-track", daemon=True,
            )
            tracker.start()
            if self.options.connect:
                self._reconnector = threading.Thread(target=self._reconnect, name="adb-reconnect", daemon=True)
                self._reconnector.start()
            follower = asyncio.ensure_future(self._follow(changes, set(ready), port, url))
            try:
                yield ready
            finally:
                self._lost = lambda serial: None
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower
        finally:
            await asyncio.to_thread(self._close, tracker, port)

    async def explain(self, serial: str, reason: str) -> str:
        """``reason`` for the lost connection of the app on ``serial``, with how the app ended when its log says
        (within ``cause_wait_s``): e.g. "connection lost (close code 1006); the app ended: native crash (SIGSEGV)".

        Unchanged for a device that is not one of these phones, when the app still runs (a network drop: no
        end to wait for; a process whose connection ended by its death is gone by then), or when the log says
        nothing (a phone unplugged with it).
        """
        if serial not in self._launched or await asyncio.to_thread(self._still_running, serial):
            return reason
        death = await asyncio.to_thread(self.logs.death, serial, wait_s=self.cause_wait_s)
        if death is None:
            return reason
        self._deaths[serial] = str(death)
        return f"{reason}; the app ended: {death}"

    def _still_running(self, serial: str) -> bool:
        try:
            return self.adb.app_running(serial)
        except PhoneError:
            return False  # the phone is leaving: its log's stream ends, and with it the wait

    def lost(self, serial: str) -> None:
        """The coordinator lost the connection of the app on ``serial``: start it again if it no longer runs.

        Only while serving, and only for a phone still attached that the app
        was started on (a phone that left is seen to when it returns).
        """
        self._lost(serial)

    # -- on a phone (worker threads) ------------------------------------------------

    def _point(self, serial: str, port: int, url: str, apk: Path | None) -> PhoneFacts:
        """Prepare a phone, forward the port to it, start the app, and copy its log."""
        facts = prepare(self.adb, serial, apk=apk)
        self._keep_awake(serial)
        self._read_app(serial)
        self.adb.reverse(serial, port)
        self._launch(serial, url)
        self._capture(serial)
        self.say(f"phone {serial}: {describe(facts)}; app started for {url} (adb reverse tcp:{port})")
        return facts

    def _keep_awake(self, serial: str) -> None:
        """Keep the phone's screen on while it is plugged in, for as long as the bridge has it, so Android does
        not suspend it between tasks (docs/phones.md, a week in a lab); the setting it had is put back by ``_close``."""
        if serial not in self._stay_on:
            before = self.adb.shell(serial, ["settings", "get", "global", STAY_ON]).strip()
            self._stay_on[serial] = before if before.isdigit() else "0"  # "null": never set, i.e. off
        self.adb.shell(serial, ["svc", "power", "stayon", "true"])

    def _restore_awake(self, here: list[str]) -> None:
        """Put back each phone's stay-on setting; for a phone not here, say how."""
        for serial, before in sorted(self._stay_on.items()):
            put = ["settings", "put", "global", STAY_ON, before]
            if serial in here:
                try:
                    self.adb.shell(serial, put)
                    continue
                except PhoneError as exc:
                    self.say(str(exc))
            self.say(f"phone {serial}: its screen's stay-on setting was not put back (adb -s {serial} shell {' '.join(put)})")

    def _reconnect(self) -> None:
        """Ask for the wireless phones again, every ``reconnect_s``, while serving (a thread): one that dropped
        (Wi-Fi, sleep, a reboot) comes back as a phone plugged in again, and is re-pointed as one."""
        while not self._stop.wait(self.reconnect_s):
            try:
                present = {p.serial for p in self.adb.phones() if p.usable}
            except PhoneError:
                continue
            for address in self.options.connect:
                if address not in present:
                    with contextlib.suppress(PhoneError):
                        self.adb.connect(address)

    def _read_app(self, serial: str) -> None:
        """Which app build the phone has (``apps``); a phone whose hash cannot be read still trains."""
        try:
            self.apps[serial] = installed_app(self.adb, serial)
        except PhoneError as exc:
            log.info("phone %s: the installed app's sha256 is not known: %s", serial, exc)
            self.apps[serial] = None

    def _launch(self, serial: str, url: str) -> None:
        """Start the app with its extras; refused once the run is ending, so none outlives ``_close``."""
        with self._launching:
            if self._stop.is_set():
                raise PhoneError(f"phone {serial}: the app was not started: the run is ending")
            self._in_flight += 1
            self._launched.add(serial)  # before the command: its reply may be lost, the start not
        self.logs.started(serial)  # what its log says from now on is of this start's end
        try:
            self.adb.launch(
                serial, url=url, device_id=serial, token=self.options.token, secret=self.secret_for(serial), pin=self.pin
            )
        finally:
            with self._launching:
                self._in_flight -= 1
                self._launching.notify_all()

    def _repoint(self, serial: str, port: int, url: str) -> None:
        """A phone back after a cable pull (or a reboot): forward the port again; start the app if it is not running."""
        self.adb.reverse(serial, port)
        self._restarted.pop(serial, None)  # replugged: a stopped app gets its chance again
        running = self.adb.app_running(serial)
        if not running:
            self._launch(serial, url)
        self._capture(serial)
        self.say(f"phone {serial} is back: adb reverse tcp:{port} restored" + ("" if running else ", app started"))

    def _restart(self, serial: str, url: str) -> None:
        """The app's device was lost while its phone stayed: start the app again unless it still runs
        (then it reconnects by itself) or it stopped again within ``CRASH_BACKOFF_S`` of the last such start."""
        try:
            if self.adb.app_running(serial):
                return
        except PhoneError as exc:  # the phone is leaving: its leaving is said, its return seen to
            log.info("%s", exc)
            return
        now, last = time.monotonic(), self._restarted.get(serial)
        if last is not None and now - last < CRASH_BACKOFF_S:
            why = self._deaths.pop(serial, None)
            self.say(
                f"phone {serial}: the app stopped again within {CRASH_BACKOFF_S:g} s of being started again"
                + (f" ({why})" if why else "")
                + f"; it is started again when the phone is replugged (its log: {self.log_dir / phone_log_name(serial)})"
            )
            return
        self._restarted[serial] = now
        self._launch(serial, url)
        self._capture(serial)
        why = self._deaths.pop(serial, None)
        said = f"its log says: {why}" if why else "its logcat may say why"
        self.say(f"phone {serial}: the app stopped ({said}); started again")

    def _capture(self, serial: str) -> None:
        """Copy the phone's app log to <out>/phones/<serial>.logcat (appending across reconnects) and any cut of it."""
        old = self._threads.get(serial)
        if old is not None and old.is_alive():
            return

        def copy() -> None:
            with self.logs.stream(serial) as sink, contextlib.suppress(PhoneError):
                self.adb.logcat(serial, sink, self._stop)

        thread = threading.Thread(target=copy, name=f"logcat-{serial}", daemon=True)
        self._threads[serial] = thread
        thread.start()

    def _track(self, report: Callable[[list[AttachedPhone]], object]) -> None:
        try:
            self.adb.track(report, self._stop)
        except PhoneError as exc:
            self.say(f"{exc}; phones that leave now are not followed")

    async def _follow(self, changes: asyncio.Queue[list[AttachedPhone] | str], ready: set[str], port: int, url: str) -> None:
        """React to hot-plug: new usable phones are pointed, returning ones re-pointed; and to a lost app
        (a serial: ``lost``) on a phone still here, started again if it stopped.

        A phone that could not be prepared at the start is tried again only
        after it left and came back (e.g. replugged once the app is installed).
        """
        pointed = set(ready)  # phones the app was started on, this run
        present = set(self.serials)  # usable phones, as last reported
        states = dict(self._states)  # problems already said stay unsaid until the state changes
        while True:
            change = await changes.get()
            if isinstance(change, str):
                if change in present and change in pointed:
                    await self._on_phone(self._restart, change, url)
                continue
            for phone in change:
                if states.get(phone.serial) != phone.state and not phone.usable:
                    self.say(phone.problem())
            states = {p.serial: p.state for p in change}
            usable = {p.serial for p in change if p.usable}
            for serial in sorted(present - usable):
                self.say(f"phone {serial} left (unplugged or offline); its port forward is restored when it returns")
            for serial in sorted(usable - present):
                if serial in pointed:
                    await self._on_phone(self._repoint, serial, port, url)
                elif await self._on_phone(self._point, serial, port, url, self.options.apk):
                    pointed.add(serial)
            present = usable

    async def _on_phone(self, work: Callable[..., object], *args: object) -> bool:
        """``work(*args)`` in a thread; False when it failed with a PhoneError, which is said."""
        try:
            await asyncio.to_thread(work, *args)
        except PhoneError as exc:
            self.say(str(exc))
            return False
        return True

    def _close(self, tracker: threading.Thread | None, port: int) -> None:
        """End the run on the phones: stop the app wherever it was started, end tracking and log copies,
        take the port's reverse forward back from phones still here."""
        with self._launching:
            self._stop.set()  # no launch from now on; one under way is waited for (bounded)
            self._launching.wait_for(lambda: self._in_flight == 0, timeout=self.adb.timeout_s)
            launched = sorted(self._launched)
        self.adb.interrupt()
        for thread in (tracker, self._reconnector):
            if thread is not None:
                thread.join(5)
        present: set[str] = set()
        with contextlib.suppress(PhoneError):
            present = {p.serial for p in self.adb.phones() if p.usable}
        # Before the log copies end, so that they keep the app's last lines.
        self._stop_apps([s for s in launched if s in present], [s for s in launched if s not in present])
        self._restore_awake(sorted(present))
        self.adb.close_streams()
        for thread in self._threads.values():
            thread.join(5)
        for serial in sorted(present):
            with contextlib.suppress(PhoneError):
                self.adb.unreverse(serial, port)

    def _stop_apps(self, here: list[str], gone: list[str]) -> None:
        """``am force-stop`` the app on ``here``; say which could not be stopped.

        The coordinator's bye has already stopped each app's device (and with it
        its service); this ends the app for good, also after a crash or Ctrl-C
        that left no bye to hear, so that no phone stays awake or keeps
        reconnecting to a run that is over.
        """
        stopped = []
        for serial in here:
            try:
                self.adb.force_stop(serial)
            except PhoneError as exc:
                self.say(str(exc))
            else:
                log.info("phone %s: app stopped (am force-stop %s)", serial, APP_PACKAGE)
                stopped.append(serial)
        if stopped:
            self.say(f"app stopped on {', '.join(stopped)} (am force-stop {APP_PACKAGE})")
        for serial in gone:
            self.say(
                f"phone {serial} is not attached: its app was not stopped"
                f" (once it is back: adb -s {serial} shell am force-stop {APP_PACKAGE})"
            )

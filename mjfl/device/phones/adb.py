"""Attached phones over adb: list them, read their facts, install the app and point it at a coordinator.

Everything goes through the adb server's host protocol (``adb`` itself is a
client of the same server), spoken by adbutils. adbutils is synchronous:
from the coordinator's event loop every call here runs in a worker thread
(``attached.py`` does that). Each method opens its own connection, so calls
for different phones may run at once.

What mjfl does on a phone, command by command (docs/phones.md lists them too):

    getprop; cat /proc/meminfo; cat /sys/devices/system/cpu/possible;
    dumpsys battery; dumpsys thermalservice; pm path org.mjfl.app   facts
    pm path org.mjfl.app; sha256sum BASE.apk                        the app's build (installed_app)
    reverse:forward:tcp:P;tcp:P                                     the coordinator's port
    sync SEND /data/local/tmp/mjfl-app.apk; pm install -r -t ...    install
    am start -n org.mjfl.app/.StartActivity --es url ... (+ device_id, token)
    pidof org.mjfl.app                                              is the app running
    settings get global stay_on_while_plugged_in; svc power stayon true   kept awake while served
    settings put global stay_on_while_plugged_in N                  put back at the end
    host:connect:HOST:PORT                                          a phone over wireless debugging
    am start -n org.mjfl.app/.SelfTestActivity ...; logcat -d ...   the first-day check (selftest.py)
    logcat -v threadtime MJFL:V AndroidRuntime:E libc:F DEBUG:F ... its log, and why it ended (deaths.py)
    am force-stop org.mjfl.app                                      the end of the run
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl.errors import PhoneError

APP_PACKAGE = "org.mjfl.app"
# The app's entry point for a start with extras: only the adb shell may start it (it requires
# android.permission.DUMP, which the shell holds); the launcher ignores extras (docs/security.md).
APP_ACTIVITY = f"{APP_PACKAGE}/.StartActivity"
LOG_TAG = "MJFL"
REMOTE_APK = "/data/local/tmp/mjfl-app.apk"
DEFAULT_PORT = 5037
# The app's own lines, its stack trace when Java code throws, and the system's lines that say why a
# process ended: a native crash's fatal signal and tombstone (libc, DEBUG, crash_dump, tombstoned), the
# low-memory killer's kills (lowmemorykiller is lmkd's tag; lmkd some vendors'), and ActivityManager's
# kills, ANRs and deaths. These system tags are every app's: deaths.AppLines keeps only the app's lines.
LOGCAT = [
    "logcat", "-v", "threadtime", f"{LOG_TAG}:V", "AndroidRuntime:E", "libc:F", "DEBUG:F", "crash_dump64:I",
    "crash_dump32:I", "tombstoned:I", "lowmemorykiller:I", "lmkd:I", "ActivityManager:I", "*:S",
]  # fmt: skip

# PowerManager.THERMAL_STATUS_* (Android 10+), as `dumpsys thermalservice` prints them.
THERMAL_STATUS = ("none", "light", "moderate", "severe", "critical", "emergency", "shutdown")

# What adb's device states mean for a lab, and what to do about each.
STATE_ADVICE = {
    "unauthorized": "unlock it and accept the 'Allow USB debugging' prompt (tick 'Always allow')",
    "offline": "unplug and replug it; if it stays offline, restart adb (adb kill-server)",
    "no permissions": "the USB device is not accessible: add the udev rule in docs/phones.md, then replug it",
    "authorizing": "it is still authorizing: wait a moment",
    "connecting": "it is still connecting: wait a moment",
}


def adb_address(address: str | None = None) -> tuple[str, int]:
    """The adb server's (host, port): ``address`` ("HOST:PORT" or "PORT"), else adb's own variables."""
    if address:
        host, _, port = address.rpartition(":")
        try:
            return host or "127.0.0.1", int(port)
        except ValueError:
            raise PhoneError(f"adb server address {address}: expected HOST:PORT, e.g. 127.0.0.1:5037") from None
    port_text = os.environ.get("ANDROID_ADB_SERVER_PORT", str(DEFAULT_PORT))
    try:
        port = int(port_text)
    except ValueError:
        raise PhoneError(f"ANDROID_ADB_SERVER_PORT={port_text}: not a port number") from None
    return os.environ.get("ANDROID_ADB_SERVER_HOST", "127.0.0.1"), port


@dataclass(frozen=True)
class AttachedPhone:
    """A phone as the adb server lists it."""

    serial: str
    state: str  # "device" when usable; "unauthorized", "offline", ...

    @property
    def usable(self) -> bool:
        return self.state == "device"

    def problem(self) -> str:
        """Why it cannot be used, and what to do (empty when usable)."""
        if self.usable:
            return ""
        return f"phone {self.serial} is {self.state}: " + STATE_ADVICE.get(self.state, "see docs/phones.md, troubleshooting")


@dataclass(frozen=True)
class PhoneFacts:
    """What a phone is, read over adb (None where the phone does not say)."""

    serial: str
    manufacturer: str
    model: str
    android: str  # the release, e.g. "14"
    sdk: int | None
    abi: str
    ram_mb: int | None
    cores: int | None
    battery_pct: int | None
    charging: bool | None
    thermal_status: int | None  # 0-6, THERMAL_STATUS; None before Android 10
    app_installed: bool
    plugged: str | None = None  # "ac", "usb", "wireless", "dock" or "none" (the app's device_state words)
    charge_counter_uah: int | None = None  # the fuel gauge's remaining charge, µAh; None: it reports none

    def energy(self) -> tuple[bool, str]:
        """Whether the app can measure its tasks' energy on this phone now, and why (what to do when not).

        The app reads the battery's charge counter before and after a task; a
        phone drawing from a charger (USB included: the lab's cable) measures
        the charger, not the task, so it reports "not measured, charging".
        """
        if not self.charge_counter_uah:
            return False, "no: its battery reports no charge counter (its tasks' energy is 'unsupported')"
        if self.plugged not in (None, "none"):
            return False, (
                f"no: powered over {self.plugged.upper() if self.plugged in ('ac', 'usb') else self.plugged}, so it"
                " charges during tasks; run it on battery over wireless debugging (docs/phones.md, energy)"
            )
        return True, "yes: on battery, with a charge counter"

    @property
    def thermal(self) -> str:
        if self.thermal_status is None:
            return "unknown"
        return THERMAL_STATUS[self.thermal_status] if 0 <= self.thermal_status < len(THERMAL_STATUS) else str(self.thermal_status)


# -- what phones print, parsed (pure) ---------------------------------------------


_PROP = re.compile(r"^\[([^\]]+)\]: \[(.*)\]$")


def parse_getprop(text: str) -> dict[str, str]:
    """``getprop`` with no argument: lines of ``[name]: [value]``."""
    return {m[1]: m[2] for line in text.splitlines() if (m := _PROP.match(line.strip()))}


def parse_meminfo(text: str) -> int | None:
    """MiB of RAM from /proc/meminfo's ``MemTotal:  7756452 kB``."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m[1]) // 1024 if m else None


def parse_cpu_list(text: str) -> int | None:
    """How many CPUs a kernel CPU list names: ``0-7`` is 8, ``0-3,6`` is 5."""
    count = 0
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        if not first.strip().isdigit() or (last and not last.strip().isdigit()):
            return None
        count += int(last or first) - int(first) + 1
    return count or None


_POWERED = {"AC powered": "ac", "USB powered": "usb", "Wireless powered": "wireless", "Dock powered": "dock"}


def _battery_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def parse_power(text: str) -> tuple[str | None, int | None]:
    """(plugged, charge counter in µAh) from ``dumpsys battery``: which ``... powered`` line is true
    ("none" when none is; None when it prints none) and ``Charge counter`` (None when absent or not positive)."""
    fields = _battery_fields(text)
    powered = [word for key, word in _POWERED.items() if key in fields]
    plugged = next((word for key, word in _POWERED.items() if fields.get(key) == "true"), "none" if powered else None)
    counter = fields.get("Charge counter", "")
    return plugged, int(counter) if counter.isdigit() and int(counter) > 0 else None


def parse_battery(text: str) -> tuple[int | None, bool | None]:
    """(percent, charging) from ``dumpsys battery``: ``level``/``scale`` and the three ``powered`` lines."""
    fields = _battery_fields(text)
    pct = None
    with contextlib.suppress(KeyError, ValueError, ZeroDivisionError):
        pct = round(100 * int(fields["level"]) / int(fields.get("scale", "100")))
    powered = [fields[k] for k in ("AC powered", "USB powered", "Wireless powered") if k in fields]
    return pct, ("true" in powered) if powered else None


def parse_thermal(text: str) -> int | None:
    """``Thermal Status: N`` from ``dumpsys thermalservice`` (absent before Android 10)."""
    m = re.search(r"^Thermal Status: (\d+)", text, re.MULTILINE)
    return int(m[1]) if m else None


def facts_from(serial: str, props: dict[str, str], meminfo: str, cpus: str, battery: str, thermal: str, package: str) -> PhoneFacts:
    """A phone's facts from what its commands printed."""
    pct, charging = parse_battery(battery)
    plugged, counter = parse_power(battery)
    sdk = props.get("ro.build.version.sdk", "")
    return PhoneFacts(
        serial=serial,
        manufacturer=props.get("ro.product.manufacturer", ""),
        model=props.get("ro.product.model", ""),
        android=props.get("ro.build.version.release", ""),
        sdk=int(sdk) if sdk.isdigit() else None,
        abi=props.get("ro.product.cpu.abi", ""),
        ram_mb=parse_meminfo(meminfo),
        cores=parse_cpu_list(cpus),
        battery_pct=pct,
        charging=charging,
        thermal_status=parse_thermal(thermal),
        app_installed=package.strip().startswith("package:"),
        plugged=plugged,
        charge_counter_uah=counter,
    )


# -- the adb server ----------------------------------------------------------------


def _client_classes() -> tuple[type, type]:
    """adbutils' client and connection, minus their habit of starting an adb server of their own.

    adbutils runs ``adb start-server`` (its bundled binary, if none is on PATH)
    whenever a connection fails; mjfl says what is wrong instead, and starts
    only the user's own adb, only for the default address (as adb's CLI does).
    """
    import adbutils  # only commands that drive phones load it (and Pillow)

    class Connection(adbutils.AdbConnection):  # type: ignore[misc]
        def _safe_connect(self) -> socket.socket:
            return self._create_socket()  # type: ignore[no-any-return]

    class Client(adbutils.AdbClient):  # type: ignore[misc]
        def make_connection(self, timeout: float | None = None) -> Any:
            connection = Connection(self.host, self.port)
            if timeout:
                connection.conn.settimeout(timeout)
            return connection

    return Client, Connection


class Adb:
    """One adb server and the phones attached to it.

    ``timeout_s`` bounds every reply but the long ones (install, logcat,
    hot-plug tracking). Errors are ``PhoneError`` naming the phone.
    """

    def __init__(self, address: str | None = None, *, timeout_s: float = 20.0, install_timeout_s: float = 300.0) -> None:
        self.host, self.port = adb_address(address)
        self.default_address = address is None
        self.timeout_s = timeout_s
        self.install_timeout_s = install_timeout_s
        client, _ = _client_classes()
        self._client = client(self.host, self.port, socket_timeout=timeout_s)
        self._lock = threading.Lock()
        self._tracking: Any = None
        self._streams: dict[str, list[Any]] = {}  # open logcat connections by serial

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- the server ---------------------------------------------------------------

    def _reachable(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=2.0):
                return True
        except OSError:
            return False

    def check(self) -> None:
        """Make sure an adb server answers; start the user's own adb when it is the default one."""
        if self._reachable():
            return
        adb = shutil.which("adb")
        if self.default_address and adb is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    [adb, "-P", str(self.port), "start-server"],
                    stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
                )
            if self._reachable():
                return
        hint = "start it with `adb start-server`" if adb else "install adb (Debian/Ubuntu: apt install adb) and run `adb start-server`"
        raise PhoneError(f"no adb server at {self.address}: {hint}; then attach a phone with USB debugging on")

    def phones(self) -> list[AttachedPhone]:
        """Every phone the server knows, usable or not (``host:devices``)."""
        self.check()
        with self._errors("listing phones"):
            return [AttachedPhone(p.serial, p.state) for p in self._client.list()]

    def connect(self, address: str) -> None:
        """Connect a phone over wireless debugging (``adb connect HOST:PORT``; paired once by hand with
        ``adb pair``, docs/phones.md); it is then listed as ``HOST:PORT``. PhoneError when it does not answer."""
        self.check()
        with self._errors(f"adb connect {address}"):
            answer = str(self._client.connect(address, timeout=self.timeout_s)).strip()
        if not answer.startswith(("connected to", "already connected to")):
            raise PhoneError(
                f"adb connect {address}: {answer or 'no answer'} (is wireless debugging on, the phone paired"
                " with adb pair, and the port the one the phone shows now? docs/phones.md, energy)"
            )

    def track(self, on_change: Callable[[list[AttachedPhone]], None], stop: threading.Event) -> None:
        """Call ``on_change`` with the full list now and after every plug, unplug or state change, until ``stop``.

        ``host:track-devices`` (blocking: run it in a thread; setting ``stop``
        and calling ``interrupt`` ends it).
        """
        connection = self._client.make_connection(timeout=None)
        with self._lock:
            self._tracking = connection
        try:
            connection.send_command("host:track-devices")
            connection.check_okay()
            while not stop.is_set():
                block = connection.read_string_block()
                on_change([AttachedPhone(*line.split("\t", 1)) for line in block.splitlines() if "\t" in line])
        except Exception:  # noqa: BLE001 - a closed connection ends tracking; stop says whether we asked
            if not stop.is_set():
                raise PhoneError(f"adb server at {self.address} stopped reporting phones") from None
        finally:
            _close(connection)

    def interrupt(self) -> None:
        """End a ``track`` in another thread (its connection is closed under it)."""
        with self._lock:
            tracking = self._tracking
        if tracking is not None:
            _close(tracking)

    # -- one phone ----------------------------------------------------------------

    def shell(self, serial: str, args: list[str], *, timeout_s: float | None = None) -> str:
        """A command's output on the phone (``shell:``, arguments quoted for its sh)."""
        with self._errors(f"phone {serial}: {args[0]}"):
            output: str = self._client.device(serial).shell(
                " ".join(shlex.quote(a) for a in args), timeout=timeout_s or self.timeout_s, rstrip=False
            )
            return output

    def facts(self, serial: str) -> PhoneFacts:
        """Model, ABI, Android version, RAM, cores, battery, thermal status, and whether the app is installed."""
        return facts_from(
            serial,
            parse_getprop(self.shell(serial, ["getprop"])),
            self.shell(serial, ["cat", "/proc/meminfo"]),
            self.shell(serial, ["cat", "/sys/devices/system/cpu/possible"]),
            self.shell(serial, ["dumpsys", "battery"]),
            self.shell(serial, ["dumpsys", "thermalservice"]),
            self.shell(serial, ["pm", "path", APP_PACKAGE]),
        )

    def reverse(self, serial: str, port: int) -> None:
        """Make the phone's 127.0.0.1:``port`` this machine's (``adb reverse tcp:P tcp:P``).

        The server answers twice: OKAY for the service, then OKAY or FAIL for
        the forward itself (adbutils reads only the first).
        """
        self._reverse_command(serial, f"reverse:forward:tcp:{port};tcp:{port}", f"adb reverse tcp:{port}")

    def unreverse(self, serial: str, port: int) -> None:
        """Remove that forward (gone anyway when the phone is unplugged)."""
        self._reverse_command(serial, f"reverse:killforward:tcp:{port}", f"adb reverse --remove tcp:{port}")

    def _reverse_command(self, serial: str, command: str, what: str) -> None:
        with self._errors(f"phone {serial}: {what}"), self._client.device(serial).open_transport(timeout=self.timeout_s) as c:
            c.send_command(command)
            c.check_okay()
            c.check_okay()

    def install(self, serial: str, apk: Path) -> None:
        """Push ``apk`` and install it, replacing an installed copy and keeping its data (its artifact cache)."""
        if not apk.is_file():
            raise PhoneError(f"{apk}: no such APK (build it: docs/phones.md, section 1)")
        with self._errors(f"phone {serial}: pushing {apk.name}"), apk.open("rb") as source:
            self._client.device(serial).sync.push(source, REMOTE_APK, mode=0o644)
        try:
            output = self.shell(serial, ["pm", "install", "-r", "-t", REMOTE_APK], timeout_s=self.install_timeout_s)
        finally:
            with contextlib.suppress(PhoneError):
                self.shell(serial, ["rm", "-f", REMOTE_APK])
        if "Success" not in output:
            failure = re.search(r"Failure \[([^\]]*)\]", output)
            raise PhoneError(f"phone {serial}: installing {apk} failed: {failure[1] if failure else output.strip()}")

    def push(self, serial: str, source: Path, remote: str, *, mode: int = 0o644) -> None:
        """Copy a file onto the phone (the sync protocol's SEND), as ``mode``; adbd makes missing folders."""
        with self._errors(f"phone {serial}: pushing {source.name} to {remote}"), source.open("rb") as data:
            self._client.device(serial).sync.push(data, remote, mode=mode)

    def launch(
        self, serial: str, *, url: str, device_id: str, token: str = "", secret: str | None = None, pin: str | None = None
    ) -> None:
        """Start the app with its extras (docs/phones.md, section 5): it connects to ``url`` as ``device_id``.

        ``secret``: the device's enrolled secret; ``pin``: the sha256 of the
        coordinator's certificate, for ``wss://`` (docs/security.md). Both go
        over USB only, never the network.
        """
        extras = ["--es", "secret", secret] if secret else []
        extras += ["--es", "pin", pin] if pin else []
        output = self.shell(serial, [
            "am", "start", "-n", APP_ACTIVITY,
            "--es", "url", url, "--es", "device_id", device_id, "--es", "token", token, *extras,
        ])  # fmt: skip
        if "Error" in output or "Exception" in output:
            raise PhoneError(f"phone {serial}: starting the app failed: {output.strip().splitlines()[-1]}")

    def force_stop(self, serial: str) -> None:
        """End the app on the phone (``am force-stop``): its service, its wake lock and its notification go."""
        output = self.shell(serial, ["am", "force-stop", APP_PACKAGE])
        if "Error" in output or "Exception" in output:
            raise PhoneError(f"phone {serial}: stopping the app failed: {output.strip().splitlines()[-1]}")

    def app_running(self, serial: str) -> bool:
        return bool(self.shell(serial, ["pidof", APP_PACKAGE]).strip())

    def logcat(self, serial: str, copy: Callable[[bytes], object], stop: threading.Event) -> None:
        """Hand the app's log to ``copy``, chunk by chunk, until ``stop`` or the phone goes (blocking: run it in a thread)."""
        with self._errors(f"phone {serial}: logcat"):
            connection = self._client.device(serial).shell(" ".join(shlex.quote(a) for a in LOGCAT), stream=True)
        connection.conn.settimeout(None)  # an idle app logs nothing for long
        with self._lock:
            self._streams.setdefault(serial, []).append(connection)
        try:
            while not stop.is_set():
                chunk = connection.conn.recv(65536)
                if not chunk:
                    return
                copy(chunk)
        except OSError:
            return  # closed under us (stop) or the phone went
        finally:
            _close(connection)
            with self._lock, contextlib.suppress(ValueError):
                self._streams[serial].remove(connection)

    def close_streams(self, serial: str | None = None) -> None:
        """End the logcat copies of ``serial`` (of every phone when None) from another thread."""
        with self._lock:
            connections = [c for key, cs in self._streams.items() if serial is None or key == serial for c in cs]
        for connection in connections:
            _close(connection)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """adbutils' errors as one PhoneError saying what was being done to which phone."""
        from adbutils.errors import AdbError

        try:
            yield
        except AdbError as exc:
            detail = str(exc).strip() or type(exc).__name__
            if re.search(r"device '.*' not found", detail):
                detail = "it is not attached (any more)"
            raise PhoneError(f"{what}: {detail}") from None
        except (OSError, EOFError) as exc:
            raise PhoneError(f"{what}: the adb server at {self.address} went away ({exc})") from None


def _close(connection: Any) -> None:
    """Close an adbutils connection at once, waking a thread blocked reading it."""
    with contextlib.suppress(OSError, Exception):
        connection.conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError, Exception):
        connection.conn.close()


def installed_app(adb: Adb, serial: str) -> str | None:
    """The sha256 of the app's installed base.apk on the phone; None when it is not installed or cannot be read.

    The app's versionCode says nothing of its build (every build is 1), its bytes do.
    """
    paths = [
        line.removeprefix("package:").strip()
        for line in adb.shell(serial, ["pm", "path", APP_PACKAGE]).splitlines()
        if line.startswith("package:")
    ]
    if not paths:
        return None
    base = next((p for p in paths if p.endswith("/base.apk")), paths[0])
    m = re.match(r"\s*([0-9a-f]{64})\b", adb.shell(serial, ["sha256sum", base]))
    return None if m is None else m[1]

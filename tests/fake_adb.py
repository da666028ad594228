"""A stand-in adb server on loopback, for testing the adb bridge without phones.

Importable as ``fake_adb`` (pytest puts tests/ on the path for its conftest.py).

There is no phone (and no adb server with one) on a test machine, so this
plays both: it speaks the adb server's real host protocol over TCP (a
command is 4 hex digits of length then the text; the answer OKAY or FAIL
plus a 4-hex-digit length block; ``host:track-devices`` a block per change;
``host:tport:serial:`` switching the connection to a phone's services;
``shell:``, ``reverse:`` and the ``sync:`` file protocol), and each phone
answers its shell commands with the outputs in ``outputs/<name>/`` (in the
formats real phones print; see that folder's README); ``log`` plays the app
logging a line (kept in the phone's buffer, which every new ``logcat``
stream starts with, as adb's does); a stream gets the lines its filter
specs (``TAG:LEVEL ... *:S``) let through, as logcat's do. ``crash`` with
``lines`` plays the app's end as Android logs it (``NATIVE_CRASH``,
``LOW_MEMORY_KILL``: threadtime lines written after AOSP's libc, debuggerd,
lmkd and ActivityManager, among other apps' lines on the same tags). Phones
``reachable`` over wireless debugging join the list on ``host:connect``; the
phone's global settings (``settings get/put``, ``svc power stayon``) are kept. The app's self-test
(``am start`` of its SelfTestActivity) is played by a test's ``on_selftest``,
which writes the lines the app would log under MJFL-CHECK into
``check_log``; ``logcat -d`` dumps them.

Every command is kept in ``transcript`` as (serial or None, command), so a
test asserts what the bridge sent. Unplugging a phone does what a cable pull
does: it leaves the lists, its open streams end, its reverse forwards go; the
app on it keeps running unless the phone rebooted.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

PHONES = Path(__file__).parent / "device" / "phones" / "outputs"
# The JVM launcher of the phone client's core (`mjfl-device`), which plays a phone's app.
LAUNCHER = Path(__file__).resolve().parents[1] / "android" / "client-core" / "bin" / "mjfl-device"
APP = "org.mjfl.app"
# Files the recorded outputs come from, by the shell command that prints them.
RECORDED = {
    "getprop": "getprop.txt",
    "cat /proc/meminfo": "meminfo.txt",
    "cat /sys/devices/system/cpu/possible": "cpu_possible.txt",
    "dumpsys battery": "battery.txt",
    "dumpsys thermalservice": "thermalservice.txt",
}
# `svc power stayon` (AOSP's SvcPower): the value of stay_on_while_plugged_in each word sets.
STAY_ON = {"true": "7", "false": "0", "ac": "1", "usb": "2", "wireless": "4"}

# How Android logs the app's end, as logcat -v threadtime prints it (AOSP: bionic's debuggerd handler,
# crash_dump and tombstoned; lmkd; ActivityManager); {pid} is the app's process. Other apps' lines on
# the same tags are among them, as on a phone: the bridge must keep only the app's.
NATIVE_CRASH = [
    "11-28 03:12:44.420  9230  9230 F libc    : Fatal signal 6 (SIGABRT), code -1 (SI_QUEUE) in tid 9230 (RenderThread), pid 9230 (com.example.game)",
    "11-28 03:12:44.503  {pid}  5141 F libc    : Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0000000000000008 in tid 5141 (mjfl-trainer), pid {pid} (org.mjfl.app)",
    "11-28 03:12:44.690  7311  7311 I crash_dump64: obtaining output fd from tombstoned, type: kDebuggerdTombstoneProto",
    "11-28 03:12:44.692  1012  1012 I tombstoned: received crash request for pid 5141",
    "11-28 03:12:44.694  7311  7311 I crash_dump64: performing dump of process {pid} (target tid = 5141)",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : *** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : Build fingerprint: 'google/panther/panther:14/UQ1A.240105.004/11206848:user/release-keys'",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : ABI: 'arm64'",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : pid: {pid}, tid: 5141, name: mjfl-trainer  >>> org.mjfl.app <<<",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0000000000000008",
    "11-28 03:12:44.713  7311  7311 F DEBUG   : Cause: null pointer dereference",
    "11-28 03:12:44.745  7311  7311 F DEBUG   : backtrace:",
    "11-28 03:12:44.745  7311  7311 F DEBUG   :       #00 pc 00000000001a2b3c  /data/app/~~x/org.mjfl.app-1/lib/arm64/libexecutorch_jni.so",
    "11-28 03:12:45.021  1012  1012 E tombstoned: Tombstone written to: /data/tombstones/tombstone_07",
    "11-28 03:12:45.034  1450  1489 I ActivityManager: Process org.mjfl.app (pid {pid}) has died: fg  FGS ",
    "11-28 03:12:45.101  1450  1489 I ActivityManager: Start proc 9101:com.android.chrome/u0a143 for broadcast {{com.android.chrome/org.chromium.chrome.browser.BootReceiver}}",
]  # fmt: skip
LOW_MEMORY_KILL = [
    "11-28 04:02:09.981   512   512 I lowmemorykiller: Kill 'com.google.android.youtube' (8812), uid 10187, oom_score_adj 905 to free 212340kB rss, 30112kB swap; reason: low watermark is breached",
    "11-28 04:02:09.990  1450  1502 I ActivityManager: Process com.google.android.youtube (pid 8812) has died: cch+5 CEM ",
    "11-28 04:02:10.118   512   512 I lowmemorykiller: Kill 'org.mjfl.app' ({pid}), uid 10234, oom_score_adj 200 to free 1843200kB rss, 65536kB swap; reason: low watermark is breached and swap is low (4324kB < 314572kB)",
    "11-28 04:02:10.162  1450  1502 I ActivityManager: Process org.mjfl.app (pid {pid}) has died: prcp FGS ",
    "11-28 04:02:10.170  1450  1502 W ActivityManager: Scheduling restart of crashed service org.mjfl.app/.TrainingService in 1000ms for start-requested",
    "11-28 04:02:10.201  2311  2311 D CarrierSvcBindHelper: onPackageModified: org.mjfl.app",
]  # fmt: skip


@dataclass
class FakePhone:
    """One phone: its recorded outputs and the state mjfl changes on it."""

    serial: str
    outputs: dict[str, str]
    state: str = "device"
    installed: bool = False
    app_pid: int | None = None
    extras: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    pushed: list[tuple[str, bytes]] = field(default_factory=list)  # every file received, in order
    reverses: set[str] = field(default_factory=set)
    logcat: bytes = b""
    install_failure: str | None = None  # e.g. INSTALL_FAILED_INSUFFICIENT_STORAGE
    apk: bytes | None = None  # the installed app's base.apk, when mjfl installed it
    has_selftest: bool = True  # False: an app build from before the self-test
    check_log: list[str] = field(default_factory=list)  # the app's lines under MJFL-CHECK
    modes: dict[str, int] = field(default_factory=dict)  # chmod'ed folders and pushed files, by path
    settings: dict[str, str] = field(default_factory=dict)  # `settings` of the global namespace (unset: null)

    @classmethod
    def recorded(cls, name: str, serial: str, **kwargs: Any) -> FakePhone:
        folder = PHONES / name
        outputs = {cmd: (folder / file).read_text() for cmd, file in RECORDED.items() if (folder / file).exists()}
        log = folder / "logcat.txt"
        return cls(serial, outputs, logcat=log.read_bytes() if log.exists() else b"", **kwargs)


class JvmApps:
    """Each phone's app, played by the JVM launcher (`mjfl-device --id SERIAL`): give a FakeAdbServer
    ``on_launch=apps.started, on_stop=apps.stopped``; the app's process starts when the bridge's ``am
    start`` reaches the stand-in, and is killed when the app stops (a reboot, ``am force-stop``, a crash)."""

    def __init__(self, processes: Callable[[list[str]], Any], cache: Path, *, round_s: float) -> None:
        self.processes, self.cache, self.round_s = processes, cache, round_s  # processes: the tests' fixture
        self.running: dict[str, Any] = {}  # the app's process, by serial

    def started(self, phone: FakePhone) -> None:
        if phone.serial in self.running:
            self.running.pop(phone.serial).kill()
        self.running[phone.serial] = self.processes([
            str(LAUNCHER), "--url", phone.extras["url"], "--id", phone.extras["device_id"],
            "--cache", str(self.cache / phone.serial), "--round-s", str(self.round_s),
        ])

    def stopped(self, phone: FakePhone) -> None:
        self.running.pop(phone.serial).kill()


class FakeAdbServer:
    """The adb server's host protocol on 127.0.0.1 (a free port), with ``phones`` attached."""

    def __init__(
        self,
        phones: Sequence[FakePhone] = (),
        *,
        on_launch: Callable[[FakePhone], None] | None = None,
        on_stop: Callable[[FakePhone], None] | None = None,
        on_selftest: Callable[[FakePhone, dict[str, str]], None] | None = None,
    ) -> None:
        """``on_launch(phone)`` runs when ``am start`` starts the app or gives the running app new
        extras (the app then points its session anew; the same extras again change nothing),
        ``on_stop(phone)`` when a reboot, ``am force-stop`` or ``crash`` ends it: a test plays the app's process
        with them; ``on_selftest(phone, extras)`` when ``am start`` starts the app's self-test."""
        self.phones: dict[str, FakePhone] = {p.serial: p for p in phones}
        self.on_launch, self.on_stop, self.on_selftest = on_launch, on_stop, on_selftest
        self.transcript: list[tuple[str | None, str]] = []
        self._changed = threading.Condition()
        self._lists: list[str] = []  # the phone list after each change
        self._streams: dict[str, list[socket.socket]] = {}
        self._filters: dict[socket.socket, Callable[[str], bool]] = {}  # each logcat stream's filter specs
        self.reachable: dict[str, FakePhone] = {}  # phones over wireless debugging, by HOST:PORT
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, name="fake-adb", daemon=True)
        self._accept.start()

    # -- what a test does -------------------------------------------------------

    def plug(self, phone: FakePhone) -> None:
        with self._changed:
            self.phones[phone.serial] = phone
            self._bump()

    def unplug(self, serial: str, *, reboot: bool = False) -> FakePhone:
        """A cable pull: the phone leaves, its streams end, its reverse forwards go."""
        with self._changed:
            phone = self.phones.pop(serial)
            phone.reverses.clear()
            stopped = reboot and phone.app_pid is not None
            if reboot:
                phone.app_pid = None
            for s in self._streams.pop(serial, []):
                _shut(s)
            self._bump()
        if stopped and self.on_stop is not None:
            self.on_stop(phone)
        return phone

    def crash(self, serial: str, lines: Sequence[str] = (), *, logged_after: int = 0) -> None:
        """The app on ``serial`` dies (a crash, or Android kills it); the phone stays attached.

        ``lines`` (``NATIVE_CRASH``, ``LOW_MEMORY_KILL``) are logged as Android logs that end; the
        last ``logged_after`` of them after the app's process is gone (lmkd and ActivityManager log
        a kill once done), so they may reach the bridge after the app's connection ended.
        """
        pid = self.phones[serial].app_pid or 4242
        text = [line.format(pid=pid) for line in lines]
        before = text[: len(text) - logged_after]
        for line in before:
            self.log(serial, line)
        self._die(serial)
        for line in text[len(before):]:
            self.log(serial, line)

    def _die(self, serial: str) -> None:
        with self._changed:
            phone = self.phones[serial]
            stopped = phone.app_pid is not None
            phone.app_pid = None
            self._bump()
        if stopped and self.on_stop is not None:
            self.on_stop(phone)

    def log(self, serial: str, line: str) -> None:
        """The app on ``serial`` logs ``line``: into the phone's buffer and onto every open ``logcat`` stream."""
        data = (line + "\n").encode()
        with self._changed:
            phone = self.phones[serial]
            phone.logcat += data
            for s in self._streams.get(serial, []):
                if not self._filters.get(s, _everything)(line):
                    continue
                try:
                    s.sendall(data)
                except OSError:
                    pass  # a stream the bridge has just closed

    def set_state(self, serial: str, state: str) -> None:
        with self._changed:
            self.phones[serial].state = state
            self._bump()

    def commands(self, serial: str | None) -> list[str]:
        with self._changed:
            return [c for s, c in self.transcript if s == serial]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """Until ``predicate()`` holds (checked after every command and change)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; transcript: {self.transcript}")
                self._changed.wait(left)

    def close(self) -> None:
        self._closed = True
        _shut(self._sock)
        with self._changed:
            for streams in self._streams.values():
                for s in streams:
                    _shut(s)
            self._bump()
        for t in [self._accept, *self._threads]:
            t.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the protocol -------------------------------------------------------------

    def _bump(self) -> None:
        listing = self._listing()
        if not self._lists or self._lists[-1] != listing:
            self._lists.append(listing)  # every list in turn, as adb reports each change
        self._changed.notify_all()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._connection, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _record(self, serial: str | None, command: str) -> None:
        with self._changed:
            self.transcript.append((serial, command))
            self._bump()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._host(conn)
            except (OSError, EOFError):
                pass

    def _host(self, conn: socket.socket) -> None:
        command = _read_command(conn)
        self._record(None, command)
        if command == "host:version":
            conn.sendall(b"OKAY" + _block("0029"))
        elif command in ("host:devices", "host:devices-l"):
            conn.sendall(b"OKAY" + _block(self._listing()))
        elif command == "host:track-devices":
            self._track(conn)
        elif command.startswith("host:connect:"):
            conn.sendall(b"OKAY" + _block(self._connect(command.removeprefix("host:connect:"))))
        elif command.startswith(("host:tport:serial:", "host:transport:")):
            serial = command.removeprefix("host:tport:serial:").removeprefix("host:transport:")  # may hold a HOST:PORT
            phone = self.phones.get(serial)
            if phone is None or phone.state != "device":
                why = f"device '{serial}' not found" if phone is None else f"device {phone.state}"
                conn.sendall(b"FAIL" + _block(why))
                return
            conn.sendall(b"OKAY" + (struct.pack("<Q", 1) if command.startswith("host:tport") else b""))
            self._service(conn, phone, _read_command(conn))
        else:
            conn.sendall(b"FAIL" + _block(f"unknown host service '{command}'"))

    def _connect(self, address: str) -> str:
        """``adb connect``: a reachable phone joins the list as ``HOST:PORT``; adb's answers, as it words them."""
        with self._changed:
            phone = self.reachable.get(address)
            if phone is None:
                return f"failed to connect to '{address}': Connection refused"
            if address in self.phones:
                return f"already connected to {address}"
            phone.serial = address
            self.phones[address] = phone
            self._bump()
            return f"connected to {address}"

    def _listing(self) -> str:
        with self._changed:
            return "".join(f"{p.serial}\t{p.state}\n" for p in self.phones.values())

    def _track(self, conn: socket.socket) -> None:
        with self._changed:
            conn.sendall(b"OKAY" + _block(self._listing()))
            sent = len(self._lists)
        while not self._closed:
            with self._changed:
                while sent == len(self._lists) and not self._closed:
                    self._changed.wait()
                news, sent = self._lists[sent:], len(self._lists)
            for listing in news:  # a block per change
                conn.sendall(_block(listing))

    def _service(self, conn: socket.socket, phone: FakePhone, command: str) -> None:
        if command.startswith("shell:logcat") and " -d " not in command:
            self._logcat(conn, phone, command)
            return
        self._record(phone.serial, command)
        if command.startswith("shell:"):
            self._shell(conn, phone, command.removeprefix("shell:"))
        elif command.startswith("reverse:forward:"):
            spec = command.removeprefix("reverse:forward:")
            with self._changed:
                phone.reverses.add(spec.split(";")[0])
                self._bump()
            conn.sendall(b"OKAY" + b"OKAY")
        elif command.startswith("reverse:killforward:"):
            remote = command.removeprefix("reverse:killforward:")
            if remote in phone.reverses:
                phone.reverses.discard(remote)
                conn.sendall(b"OKAY" + b"OKAY")
            else:
                conn.sendall(b"OKAY" + b"FAIL" + _block(f"listener '{remote}' not found"))
        elif command == "sync:":
            conn.sendall(b"OKAY")
            self._sync(conn, phone)
        else:
            conn.sendall(b"FAIL" + _block(f"unknown service '{command}'"))

    def _shell(self, conn: socket.socket, phone: FakePhone, line: str) -> None:
        conn.sendall(b"OKAY" + self._run(phone, shlex.split(line)).encode())
        conn.shutdown(socket.SHUT_WR)

    def _logcat(self, conn: socket.socket, phone: FakePhone, command: str) -> None:
        """The phone's log lines, then an open stream until the bridge or an unplug ends it."""
        keep = _logcat_filter(shlex.split(command.removeprefix("shell:")))
        with self._changed:  # an unplug from now on ends it; a line logged from now on follows the buffer
            self._streams.setdefault(phone.serial, []).append(conn)
            self._filters[conn] = keep
            buffer = phone.logcat.decode().splitlines(keepends=True)
            conn.sendall(b"OKAY" + "".join(line for line in buffer if keep(line.rstrip("\n"))).encode())
        self._record(phone.serial, command)  # once seen, its lines are on their way
        try:
            while conn.recv(4096):
                pass
        finally:
            with self._changed:
                self._filters.pop(conn, None)

    def _run(self, phone: FakePhone, args: list[str]) -> str:
        """What the phone prints for a command (the state-changing ones act on the phone)."""
        line = " ".join(args)
        if args[:2] == ["pm", "path"]:
            return f"package:/data/app/~~x/{APP}-1/base.apk\n" if phone.installed and args[2] == APP else ""
        if args[:2] == ["pm", "install"]:
            if args[-1] not in phone.files:
                return f"Failure [INSTALL_FAILED_INVALID_URI: {args[-1]}]\n"
            if phone.install_failure:
                return f"Failure [{phone.install_failure}]\n"
            phone.installed = True
            phone.apk = phone.files[args[-1]]
            return "Performing Streamed Install\nSuccess\n"
        if args[:2] == ["rm", "-f"]:
            phone.files.pop(args[2], None)
            return ""
        if args[:2] == ["am", "start"] and args[3].endswith(".SelfTestActivity"):
            return self._selftest(phone, args)
        if args[:2] == ["am", "start"]:
            return self._start(phone, args)
        if args[:2] == ["am", "force-stop"]:
            with self._changed:  # prints nothing, whether the app ran or not (or is installed)
                stopped = args[2] == APP and phone.app_pid is not None
                if stopped:
                    phone.app_pid = None
                self._bump()
            if stopped and self.on_stop is not None:
                self.on_stop(phone)
            return ""
        if args[:2] == ["logcat", "-d"]:
            # What `logcat -d -v raw TAG:V *:S` prints: the buffer's header, then the tag's lines.
            return "--------- beginning of main\n" + "".join(f"{line}\n" for line in list(phone.check_log))
        if args[:1] == ["sha256sum"]:
            if not (phone.installed and args[1].endswith(f"{APP}-1/base.apk")):
                return f"sha256sum: {args[1]}: No such file or directory\n"
            return f"{hashlib.sha256(phone.apk or b'installed by hand').hexdigest()}  {args[1]}\n"
        if args[:1] == ["cat"] and args[1].startswith("/data/local/tmp/"):
            data = phone.files.get(args[1])
            return data.decode() if data is not None else f"cat: {args[1]}: No such file or directory\n"
        if args[:2] == ["rm", "-rf"]:
            for path in [p for p in phone.files if p == args[2] or p.startswith(args[2] + "/")]:
                del phone.files[path]
            return ""
        if args[:2] == ["mkdir", "-p"]:
            return ""
        if args[:1] == ["chmod"]:
            phone.modes.update({path: int(args[1], 8) for path in args[2:]})
            return ""
        if args[:3] == ["settings", "get", "global"]:
            return phone.settings.get(args[3], "null") + "\n"
        if args[:3] == ["settings", "put", "global"]:
            phone.settings[args[3]] = args[4]
            return ""
        if args[:3] == ["svc", "power", "stayon"]:
            phone.settings["stay_on_while_plugged_in"] = STAY_ON[args[3]]
            return ""
        if args[:1] == ["pidof"]:
            return f"{phone.app_pid}\n" if phone.app_pid and args[1] == APP else ""
        if line in phone.outputs:
            return phone.outputs[line]
        if args[:1] == ["dumpsys"]:
            return f"Can't find service: {args[1]}\n"
        return f"/system/bin/sh: {args[0]}: inaccessible or not found\n"

    def _start(self, phone: FakePhone, args: list[str]) -> str:
        """``am start -n org.mjfl.app/.StartActivity --es ...``: the app starts, or takes new extras."""
        if not phone.installed:
            return f"Error: Activity class {{{APP}/{APP}.StartActivity}} does not exist.\n"
        with self._changed:
            extras = _extras(args[4:])
            # Like the app: a new start, or new extras, (re)starts its session.
            started = phone.app_pid is None or extras != phone.extras
            phone.extras = extras
            phone.app_pid = phone.app_pid or 4242
            self._bump()
        if started and self.on_launch is not None:
            self.on_launch(phone)
        return f"Starting: Intent {{ cmp={APP}/.StartActivity (has extras) }}\n"

    def _selftest(self, phone: FakePhone, args: list[str]) -> str:
        """``am start -n org.mjfl.app/.SelfTestActivity --es run R --es dir D``: the app's process runs it."""
        if not phone.installed or not phone.has_selftest:
            return f"Error: Activity class {{{APP}/{APP}.SelfTestActivity}} does not exist.\n"
        with self._changed:
            phone.app_pid = phone.app_pid or 4242
            self._bump()
        if self.on_selftest is not None:
            self.on_selftest(phone, _extras(args[4:]))
        return f"Starting: Intent {{ cmp={APP}/.SelfTestActivity (has extras) }}\n"

    def _sync(self, conn: socket.socket, phone: FakePhone) -> None:
        """adb's file protocol: (id, little-endian length, data) requests."""
        while True:
            request, size = _read_exact(conn, 4).decode(), struct.unpack("<I", _read_exact(conn, 4))[0]
            if request == "QUIT":
                return
            path = _read_exact(conn, size).decode()
            self._record(phone.serial, f"sync:{request} {path}")
            if request == "STAT":
                data = phone.files.get(path)
                conn.sendall(b"STAT" + struct.pack("<III", 0o100644 if data is not None else 0, len(data or b""), 0))
            elif request == "SEND":
                name = path.rsplit(",", 1)[0]
                chunks = []
                while True:
                    kind, n = _read_exact(conn, 4), struct.unpack("<I", _read_exact(conn, 4))[0]
                    if kind == b"DONE":
                        break
                    assert kind == b"DATA" and n <= 64 * 1024, (kind, n)
                    chunks.append(_read_exact(conn, n))
                phone.files[name] = b"".join(chunks)
                phone.modes[name] = int(path.rsplit(",", 1)[1]) & 0o7777
                phone.pushed.append((name, phone.files[name]))
                conn.sendall(b"OKAY" + struct.pack("<I", 0))
                return  # adbutils closes after one SEND
            else:
                conn.sendall(b"FAIL" + struct.pack("<I", 7) + b"unknown")
                return


def _extras(args: list[str]) -> dict[str, str]:
    """``--es KEY VALUE`` pairs of an ``am start`` line."""
    out, i = {}, 0
    while i < len(args):
        if args[i] == "--es":
            out[args[i + 1]] = args[i + 2]
            i += 3
        else:
            i += 1
    return out


_LEVELS = "VDIWEFS"
_THREADTIME = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+\s+([VDIWEF])\s+(.*?)\s*: ")


def _everything(line: str) -> bool:
    return True


def _logcat_filter(args: list[str]) -> Callable[[str], bool]:
    """What logcat's ``TAG:LEVEL`` specs let through (``*`` is every other tag; S silences); other lines pass."""
    specs = dict(a.split(":", 1) for a in args if ":" in a and not a.startswith("-"))
    default = specs.pop("*", "V")

    def keep(line: str) -> bool:
        m = _THREADTIME.match(line)
        if m is None:
            return True
        level, tag = m.groups()
        least = specs.get(tag, default)
        return least != "S" and _LEVELS.index(level) >= _LEVELS.index(least)

    return keep


def _block(text: str) -> bytes:
    data = text.encode()
    return f"{len(data):04x}".encode() + data


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_command(conn: socket.socket) -> str:
    return _read_exact(conn, int(_read_exact(conn, 4), 16)).decode()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass

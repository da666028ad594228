"""`mjfl serve --phones` as a lab runs it: a real service process, phones over a stand-in adb server.

A mock stands in for the phones: none can be attached on a test machine, so
the adb server is ``fake_adb.py`` (adb's host protocol on loopback, the
phones answering with recorded outputs), and each phone's app is played by
the JVM launcher of the phone client's core (`mjfl-device --id SERIAL`),
started when the bridge's ``am start`` reaches the stand-in and killed when
the phone reboots or its app crashes. What the app logs is played by
``FakeAdbServer.log``, and how Android logs a native crash or a low-memory
kill by ``FakeAdbServer.crash``. Cost: about 20 s on two cores (four refused starts
of mjfl, then one lab with two JVM phones for two runs).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_adb import LOW_MEMORY_KILL, NATIVE_CRASH, FakeAdbServer, FakePhone, JvmApps
from lab_service import Lab
from processes import mjfl_args, query

from mjfl.logs import phone_log_name

PIXEL, GALAXY = "28041FDH2004TQ", "R58R41ABCDE"

LAB = """
[fleet]
size = 2
[server]
port = 0
wait_timeout_s = 120
[api]
port = 0
"""

# One job on both phones every round, for as long as the test lets it run.
RUN = """
seed = 1
[fleet]
size = 2
shards = "present"
[scheduler]
method = "random"
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 1.0
max_rounds = 10000
"""


def one_error_line(*args: str) -> str:
    """The one line `mjfl` says when it refuses, exiting 2."""
    result = subprocess.run(mjfl_args(*args), check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_serve_phones_with_no_adb_server_or_no_phone_is_one_line_before_anything_else(tmp_path: Path) -> None:
    lab_file, out = tmp_path / "lab.toml", tmp_path / "lab"
    lab_file.write_text(LAB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    serve = ("serve", str(lab_file), "--out", str(out), "--phones")
    assert one_error_line(*serve, "--adb", closed).startswith(f"error: no adb server at {closed}")
    with FakeAdbServer() as empty:
        line = one_error_line(*serve, "--adb", empty.address)
        assert line.startswith(f"error: no phone to use on the adb server at {empty.address}")
        assert empty.commands(None) == ["host:devices"]  # one listing, nothing else
    assert one_error_line("serve", str(lab_file), "--adb", closed) == "error: --adb, --apk and --connect go with --phones"
    both = one_error_line(*serve, "--emulate", "2")
    assert both.startswith("error: --phones and --emulate go one at a time"), both
    assert not out.exists()  # nothing was started or written


def app_line(text: str) -> str:
    """A line as the app logs it (``logcat -v threadtime``), stamped now."""
    now = time.time()
    return f"{time.strftime('%m-%d %H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}  5120  5141 I MJFL    : {text}"


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@dataclass
class PhonesLab:
    """A lab service on the stand-in's two phones, and what the test reads of it."""

    lab: Lab
    adb: FakeAdbServer

    def starts(self, serial: str) -> int:
        return sum(c.startswith("shell:am start -n org.mjfl.app/.StartActivity") for c in self.adb.commands(serial))

    def own(self, serial: str) -> Path:
        return self.lab.folder / "phones" / phone_log_name(serial)

    def cut(self, run: str, serial: str) -> Path:
        return self.lab.folder / "runs" / run / "phones" / phone_log_name(serial)

    def rounds(self, run: str) -> list[tuple[int, str, str]]:
        return query(self.lab.folder / "runs" / run / "mjfl.db", "SELECT round, device, status FROM device_rounds")

    def trained(self, run: str, serial: str, after: int = 0) -> bool:
        return any(r[1] == serial and r[2] == "ok" and r[0] > after for r in self.rounds(run))

    def logged(self, run: str) -> dict[str, str]:
        """A line from each phone's app while ``run`` trains on both, once in the run's folder."""
        self.lab.until(lambda: self.trained(run, PIXEL) and self.trained(run, GALAXY), 120)
        lines = {serial: app_line(f"{serial} during {run}") for serial in (PIXEL, GALAXY)}
        for serial, line in lines.items():
            self.adb.log(serial, line)
        self.lab.until(lambda: all(line in text(self.cut(run, s)) for s, line in lines.items()), 30)
        return lines

    def logged_by_the_lab(self, what: str) -> str:
        """A line from the pixel's app while no run runs, once in the lab's copy."""
        self.adb.log(PIXEL, line := app_line(what))
        self.lab.until(lambda: line in text(self.own(PIXEL)), 30)
        return line

    def trains_again(self, run: str, serial: str, away: Callable[[], object], back_line: str) -> None:
        """``away()`` takes the phone's app from ``run``; the service says ``back_line`` of it, and it trains again."""
        last = max(r[0] for r in self.rounds(run))
        away()
        assert back_line in self.lab.process.line_with(f"phone {serial}")
        self.lab.until(lambda: self.trained(run, serial, after=last), 120)

    def left(self, run: str, serial: str) -> list[str]:
        """Why ``serial`` left ``run``, as the run's events say (a cancel's bye aside)."""
        events = query(self.lab.folder / "runs" / run / "mjfl.db", "SELECT device, detail FROM fleet_events WHERE kind = 'left'")
        return [detail for device, detail in events if device == serial and "connection lost" in detail]

    def cancelled(self, run: str) -> None:
        assert self.lab.call("POST", f"/api/lab/runs/{run}/cancel")[0] == 200
        assert self.lab.ended(run, 60)["state"] == "cancelled"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")
def test_the_lab_keeps_its_phones_for_its_life_and_each_run_their_lines(tmp_path: Path, processes) -> None:
    """About 10 s: two JVM phones, one rebooted and one's app crashing mid-run, two runs cancelled once they trained, a drain."""
    apps = JvmApps(processes, tmp_path / "cache", round_s=0.2)
    pixel, galaxy = FakePhone.recorded("pixel7", PIXEL, installed=True), FakePhone.recorded("galaxy-a52", GALAXY, installed=True)
    (tmp_path / "lab.toml").write_text(LAB)
    with FakeAdbServer([pixel, galaxy], on_launch=apps.started, on_stop=apps.stopped) as adb:
        lab = Lab.start(processes, tmp_path, devices=2, lab_file=tmp_path / "lab.toml", options=("--phones", "--adb", adb.address))
        phones = PhonesLab(lab, adb)
        assert phones.starts(PIXEL) == phones.starts(GALAXY) == 1  # launched once, at the start
        before = phones.logged_by_the_lab("before any run")

        first = lab.submit(RUN, lab.admin)["id"]
        during_first = phones.logged(first)
        # The pixel reboots mid-run: its app and forward are gone; back, it is pointed again,
        # its app relaunched, and it trains again for the run.
        adb.unplug(PIXEL, reboot=True)
        assert "left" in lab.process.line_with(f"phone {PIXEL}")
        phones.trains_again(first, PIXEL, lambda: adb.plug(pixel), "is back")
        # The galaxy's app crashes in native code, the phone staying attached: the app is started again,
        # and the run's event of its leaving says how it ended.
        phones.trains_again(first, GALAXY, lambda: adb.crash(GALAXY, NATIVE_CRASH), "started again")
        phones.cancelled(first)

        between = phones.logged_by_the_lab("between the runs")
        second = lab.submit(RUN, lab.admin)["id"]
        during_second = phones.logged(second)
        # The low-memory killer kills the pixel's app; its lines come after the app's connection is gone.
        phones.trains_again(second, PIXEL, lambda: adb.crash(PIXEL, LOW_MEMORY_KILL, logged_after=4), "started again")
        phones.cancelled(second)

        assert lab.call("POST", "/api/lab/drain")[0] == 200
        assert lab.process.wait(60) == 0, "".join(lab.process.output)
        # A quiet terminal: the lab, its phones and its runs, one line each; nothing else (no warning, no trace).
        said = ("a new lab", "lab ", "lab's dashboard", "phone ", "researchers' API", "run ", "app stopped on", "drained")
        others = [line for line in "".join(lab.process.output).splitlines() if not line.startswith(said)]
        assert not others, others
        # The service's end leaves the phones as found: the app stopped, no forward left.
        assert pixel.app_pid is None and galaxy.app_pid is None and not apps.running
        assert pixel.reverses == galaxy.reverses == set()
        assert pixel.settings["stay_on_while_plugged_in"] == galaxy.settings["stay_on_while_plugged_in"] == "0"
        # Started again only after the pixel's reboot and kill and the galaxy's crash, not for a run.
        assert (phones.starts(PIXEL), phones.starts(GALAXY)) == (3, 2)

    # Each end reached the lab's copy of the phone's log, and its run's event of the phone's leaving names it.
    assert "F libc    : Fatal signal 11 (SIGSEGV)" in text(phones.own(GALAXY))
    assert "I lowmemorykiller: Kill 'org.mjfl.app'" in text(phones.own(PIXEL))
    assert "com.google.android.youtube" not in text(phones.own(PIXEL))  # another app's kill: not kept
    assert phones.left(first, GALAXY) == ["connection lost (close code 1006); the app ended: native crash (SIGSEGV in thread mjfl-trainer)"]
    [killed] = phones.left(second, PIXEL)
    assert killed.startswith("connection lost (close code 1006); the app ended: killed for memory (low-memory killer: ")

    # Each run's folder has each phone's lines of that run, and no other: not the ones
    # before, between or during the other run, nor the pixel's buffer that adb replayed
    # after its reboot. The lab keeps every line.
    for run, lines in ((first, during_first), (second, during_second)):
        for serial, line in lines.items():
            assert [k for k in text(phones.cut(run, serial)).splitlines() if " MJFL    : " in k] == [line], (run, serial)
    # and how an app ended during it: the galaxy's crash in the first, the pixel's kill in the second.
    assert "Fatal signal 11" in text(phones.cut(first, GALAXY)) and "Fatal signal" not in text(phones.cut(second, GALAXY))
    assert "Kill 'org.mjfl.app'" in text(phones.cut(second, PIXEL)) and "Kill '" not in text(phones.cut(first, PIXEL))
    for line in (before, during_first[PIXEL], between, during_second[PIXEL]):
        assert line in text(phones.own(PIXEL))
    # Each run kept what it ran on: the submitted text, and each phone with the app build adb read on it.
    for run in (first, second):
        database = lab.folder / "runs" / run / "mjfl.db"
        assert query(database, "SELECT config_text, config_file FROM provenance") == [(RUN, None)]
        apps = {d: json.loads(app) for d, app in query(database, "SELECT device, app_json FROM provenance_devices")}
        assert apps == {s: {"sha256": hashlib.sha256(b"installed by hand").hexdigest(), "source": "adb"} for s in (PIXEL, GALAXY)}

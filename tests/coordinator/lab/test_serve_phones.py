"""`mjfl serve --phones` as a lab runs it: a real service process, phones over a stand-in adb server.

A mock stands in for the phones: none can be attached on a test machine, so
the adb server is ``fake_adb.py`` (adb's host protocol on loopback, the
phones answering with recorded outputs), and each phone's app is played by
the JVM launcher of the phone client's core (`mjfl-device --id SERIAL`),
started when the bridge's ``am start`` reaches the stand-in and killed when
the phone reboots. What the app logs is played by ``FakeAdbServer.log``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from fake_adb import FakeAdbServer, FakePhone, JvmApps
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
    assert one_error_line("serve", str(lab_file), "--adb", closed) == "error: --adb and --apk go with --phones"
    both = one_error_line(*serve, "--emulate", "2")
    assert both.startswith("error: --phones and --emulate go one at a time"), both
    assert not out.exists()  # nothing was started or written


def app_line(text: str) -> str:
    """A line as the app logs it (``logcat -v threadtime``), stamped now."""
    now = time.time()
    return f"{time.strftime('%m-%d %H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}  5120  5141 I MJFL    : {text}"


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")
def test_the_lab_keeps_its_phones_for_its_life_and_each_run_their_lines(tmp_path: Path, processes) -> None:
    """About 15 s: two JVM phones, one rebooted and one's app crashing mid-run, two runs cancelled once they trained, a drain."""
    apps = JvmApps(processes, tmp_path / "cache", round_s=0.2)
    pixel, galaxy = FakePhone.recorded("pixel7", PIXEL, installed=True), FakePhone.recorded("galaxy-a52", GALAXY, installed=True)
    (tmp_path / "lab.toml").write_text(LAB)
    with FakeAdbServer([pixel, galaxy], on_launch=apps.started, on_stop=apps.stopped) as adb:
        lab = Lab.start(processes, tmp_path, devices=2, lab_file=tmp_path / "lab.toml", options=("--phones", "--adb", adb.address))
        own = {serial: lab.folder / "phones" / phone_log_name(serial) for serial in (PIXEL, GALAXY)}

        def starts(serial: str) -> int:
            return sum(c.startswith("shell:am start -n org.mjfl.app/.StartActivity") for c in adb.commands(serial))

        def cut(run: str, serial: str) -> Path:
            return lab.folder / "runs" / run / "phones" / phone_log_name(serial)

        def trained(run: str, serial: str, after: int = 0) -> bool:
            rows = query(lab.folder / "runs" / run / "mjfl.db", "SELECT round, device, status FROM device_rounds")
            return any(r[1] == serial and r[2] == "ok" and r[0] > after for r in rows)

        def logged(run: str) -> dict[str, str]:
            """A line from each phone's app while ``run`` trains on both, once in the run's folder."""
            lab.until(lambda: trained(run, PIXEL) and trained(run, GALAXY), 120)
            lines = {serial: app_line(f"{serial} during {run}") for serial in (PIXEL, GALAXY)}
            for serial, line in lines.items():
                adb.log(serial, line)
            lab.until(lambda: all(line in text(cut(run, s)) for s, line in lines.items()), 30)
            return lines

        def cancelled(run: str) -> None:
            assert lab.call("POST", f"/api/lab/runs/{run}/cancel")[0] == 200
            assert lab.ended(run, 60)["state"] == "cancelled"

        assert starts(PIXEL) == starts(GALAXY) == 1  # launched once, at the start
        adb.log(PIXEL, before := app_line("before any run"))
        lab.until(lambda: before in text(own[PIXEL]), 30)

        first = lab.submit(RUN, lab.admin)["id"]
        during_first = logged(first)
        # The pixel reboots mid-run: its app and forward are gone; back, it is pointed
        # again, its app relaunched, and it trains again for the run.
        away = max(r[0] for r in query(lab.folder / "runs" / first / "mjfl.db", "SELECT round FROM device_rounds"))
        adb.unplug(PIXEL, reboot=True)
        assert "left" in lab.process.line_with(f"phone {PIXEL}")
        adb.plug(pixel)
        assert "is back" in lab.process.line_with(f"phone {PIXEL}")
        lab.until(lambda: trained(first, PIXEL, after=away), 120)
        # The galaxy's app crashes, the phone staying attached: the app is started again.
        away = max(r[0] for r in query(lab.folder / "runs" / first / "mjfl.db", "SELECT round FROM device_rounds"))
        adb.crash(GALAXY)
        assert "started again" in lab.process.line_with(f"phone {GALAXY}")
        lab.until(lambda: trained(first, GALAXY, after=away), 120)
        cancelled(first)

        adb.log(PIXEL, between := app_line("between the runs"))
        lab.until(lambda: between in text(own[PIXEL]), 30)
        second = lab.submit(RUN, lab.admin)["id"]
        during_second = logged(second)
        cancelled(second)

        assert lab.call("POST", "/api/lab/drain")[0] == 200
        assert lab.process.wait(60) == 0, "".join(lab.process.output)
        # A quiet terminal: the lab, its phones and its runs, one line each; nothing else (no warning, no trace).
        said = ("a new lab", "lab ", "phone ", "researchers' API", "run ", "app stopped on", "drained")
        assert all(line.startswith(said) for line in "".join(lab.process.output).splitlines()), lab.process.output
        # The service's end leaves the phones as found: the app stopped, no forward left.
        assert pixel.app_pid is None and galaxy.app_pid is None and not apps.running
        assert pixel.reverses == galaxy.reverses == set()
        assert (starts(PIXEL), starts(GALAXY)) == (2, 2)  # again after the pixel's reboot and the galaxy's crash only

    # Each run's folder has each phone's lines of that run, and no other: not the ones
    # before, between or during the other run, nor the pixel's buffer that adb replayed
    # after its reboot. The lab keeps every line.
    for run, lines in ((first, during_first), (second, during_second)):
        for serial, line in lines.items():
            assert text(cut(run, serial)) == line + "\n", (run, serial)
    for line in (before, during_first[PIXEL], between, during_second[PIXEL]):
        assert line in text(own[PIXEL])

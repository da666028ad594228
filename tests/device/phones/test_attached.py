"""`mjfl devices` and `testbed run --phones` as lab staff run them, against the stand-in adb server.

The commands run as real processes; the adb server is ``fake_adb.py`` (no phone can
be attached here). In the end-to-end run, each phone's app is played by the JVM
launcher of the phone client's core (`mjfl-device --id SERIAL`), started when the
bridge's ``am start`` reaches the stand-in and killed when the phone reboots.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from fake_adb import PHONES, FakeAdbServer, FakePhone, JvmApps
from processes import mjfl_args, query, wait_for

from mjfl.coordinator.storage.layout import database_path

PIXEL, GALAXY, MOTO = "28041FDH2004TQ", "R58R41ABCDE", "ZY2243KLMN"


def mjfl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command's run; mjfl speaks on stderr."""
    return subprocess.run(
        mjfl_args(*args), check=False, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_no_adb_server_or_no_phone_is_one_line_and_exit_2_before_anything_else(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    assert one_error_line(mjfl("devices", "list", "--adb", address)).startswith(f"error: no adb server at {address}")

    config = tmp_path / "run.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[fleet]\nsize = 4\n[[jobs]]\nname = "a"\nmodel = "lenet5"\nimage_size = 12\n')
    with FakeAdbServer() as empty:
        listed = one_error_line(mjfl("devices", "list", "--adb", empty.address))
        assert listed.startswith(f"error: no phone attached to the adb server at {empty.address}: connect one")
        run = one_error_line(mjfl("testbed", "run", str(config), "--phones", "--adb", empty.address, "--no-live"))
        assert run.startswith(f"error: no phone to use on the adb server at {empty.address}")
        assert empty.commands(None) == ["host:devices", "host:devices"]  # one listing each, nothing else
        # A coordinator the phones' forwards cannot reach is refused first.
        lan = one_error_line(mjfl("testbed", "run", str(config), "--phones", "--host", "10.1.2.3", "--adb", empty.address))
        assert lan.startswith("error: config field 'testbed.host' (or --host): '10.1.2.3' is not reachable through adb reverse")
    # Nothing was started or written: no output folder, no run database.
    assert not (tmp_path / "out").exists()

    with FakeAdbServer([FakePhone.recorded("moto-g7", MOTO, state="unauthorized")]) as locked:
        line = one_error_line(mjfl("testbed", "run", str(config), "--phones", "--adb", locked.address, "--no-live"))
        assert f"phone {MOTO} is unauthorized" in line


def test_devices_list_shows_each_phone_and_prepare_installs_the_app(tmp_path: Path) -> None:
    pixel = FakePhone.recorded("pixel7", PIXEL, installed=True)
    galaxy = FakePhone.recorded("galaxy-a52", GALAXY, installed=False)
    moto = FakePhone.recorded("moto-g7", MOTO, state="unauthorized")
    wifi = "192.168.1.57:37099"  # a phone on battery over wireless debugging (paired by hand, once)
    with FakeAdbServer([pixel, galaxy, moto]) as server:
        server.reachable[wifi] = FakePhone.recorded("galaxy-a52", wifi, installed=True)
        listed = mjfl("devices", "list", "--adb", server.address, "--connect", wifi)
        assert listed.returncode == 0, listed
        rows = {line.split()[1]: line for line in listed.stderr.splitlines() if line.startswith("│")}
        assert set(rows) == {PIXEL, GALAXY, MOTO, wifi}, listed.stderr
        assert "Pixel 7" in rows[PIXEL] and "arm64-v8a" in rows[PIXEL] and "installed" in rows[PIXEL]
        assert "SM-A525F" in rows[GALAXY] and "missing" in rows[GALAXY]
        assert "unauthorized" in rows[MOTO]
        # Energy: the pixel charges over its USB cable; the wireless phone is on battery.
        assert "not: usb power" in rows[PIXEL] and "measured" in rows[wifi], listed.stderr
        server.unplug(wifi)

        apk = tmp_path / "app-debug.apk"
        apk.write_bytes(b"PK\x03\x04 stand-in apk " + bytes(range(256)) * 300)
        prepared = mjfl("devices", "prepare", "--apk", str(apk), "--adb", server.address)
        assert prepared.returncode == 0, prepared
        assert galaxy.installed and pixel.installed
        for phone in (PIXEL, GALAXY):
            sent = server.commands(phone)
            assert "shell:pm install -r -t /data/local/tmp/mjfl-app.apk" in sent, sent
            assert "shell:dumpsys deviceidle whitelist +org.mjfl.app" in sent
        assert server.commands(MOTO) == []  # an unauthorized phone takes no command
        assert f"phone {MOTO} is unauthorized" in prepared.stderr

        missing = mjfl("devices", "prepare", "--apk", str(tmp_path / "nope.apk"), "--adb", server.address)
        assert missing.returncode == 2 and "nope.apk" in missing.stdout + missing.stderr


CONFIG = """
seed = 5
out_dir = "{out}"
[fleet]
size = 4  # the two usable phones and two emulated devices: no shard waits for a device
workers = 2
[scheduler]
method = "meta-greedy"
[scheduler.options.rlds]
pretrain_rounds = 5
[testbed]
port = 0
min_devices = 4
wait_timeout_s = 180
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
batch_size = 8
fraction = 1.0
max_rounds = 1000
"""

DEVICE_ROUNDS = "SELECT round, device, status FROM device_rounds ORDER BY round"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")
def test_a_testbed_run_on_phones_survives_a_reboot_and_cleans_up(tmp_path: Path, processes) -> None:
    apps = JvmApps(processes, tmp_path / "cache", round_s=0.5)
    pixel = FakePhone.recorded("pixel7", PIXEL, installed=True)
    galaxy = FakePhone.recorded("galaxy-a52", GALAXY, installed=True)
    moto = FakePhone.recorded("moto-g7", MOTO, state="unauthorized")
    out = tmp_path / "run"
    config = tmp_path / "phones.toml"
    config.write_text(CONFIG.format(out=out))
    db = database_path(out)
    with FakeAdbServer([pixel, galaxy, moto], on_launch=apps.started, on_stop=apps.stopped) as server:
        coordinator = processes(
            mjfl_args("testbed", "run", str(config), "--phones", "--adb", server.address, "--emulate", "2", "--no-live"),
            read=True,
        )
        assert "unauthorized" in coordinator.line_with(MOTO)
        coordinator.line_with("4 devices connected")

        def trained(serial: str, after: int = 0) -> bool:
            return any(r[1] == serial and r[2] == "ok" and r[0] > after for r in query(db, DEVICE_ROUNDS))

        wait_for(lambda: trained(PIXEL) and trained(GALAXY), 300, coordinator)
        # The pixel reboots: its app and forward are gone. Plugged back, the bridge
        # forwards the port again and starts the app, which trains again.
        server.unplug(PIXEL, reboot=True)
        assert "left" in coordinator.line_with(f"phone {PIXEL}")
        away = max(r[0] for r in query(db, DEVICE_ROUNDS))
        server.plug(pixel)
        assert "is back" in coordinator.line_with(f"phone {PIXEL}")
        wait_for(lambda: trained(PIXEL, after=away), 300, coordinator)
        assert pixel.reverses and pixel.extras["device_id"] == PIXEL

        # Ctrl-C ends the run: finished rounds are kept, and the phones are left as found:
        # the app stopped (no phone stays awake for a run that is over), no forward left.
        os.kill(coordinator.pid, signal.SIGINT)
        assert coordinator.wait(120) == 130, "".join(coordinator.output)
        assert "interrupted" in "".join(coordinator.output)
        assert pixel.reverses == set() and galaxy.reverses == set()
        assert pixel.app_pid is None and galaxy.app_pid is None and not apps.running
        said = " ".join("".join(coordinator.output).split())  # as one line: the console wraps long ones
        assert f"app stopped on {PIXEL}, {GALAXY} (am force-stop org.mjfl.app)" in said
        started = [c for c in server.commands(PIXEL) if c.startswith("shell:am start")]
        assert len(started) == 2  # at the start, and after the reboot
        # Each phone's log is kept, the pixel's across its reboot (the galaxy logged nothing).
        recorded = (PHONES / "pixel7" / "logcat.txt").read_bytes()
        assert (out / "phones" / f"{PIXEL}.logcat").read_bytes().count(recorded) == 2
        assert (out / "phones" / f"{GALAXY}.logcat").exists()
    statuses = {r[2] for r in query(db, DEVICE_ROUNDS) if r[1] == PIXEL}
    assert "ok" in statuses

"""The adb bridge against a stand-in adb server (``fake_adb.py``): no phone can be attached here.

The stand-in speaks the adb server's real host protocol over TCP and replays
what phones print (``phones/``); every test asserts the commands the bridge
sent, as the server received them.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import socket
import threading
from pathlib import Path

import pytest
from fake_adb import LOW_MEMORY_KILL, NATIVE_CRASH, PHONES, FakeAdbServer, FakePhone
from hypothesis import given
from hypothesis import strategies as st
from waiting import PATIENCE_S, eventually_async

from mjfl.device.phones.adb import (
    APP_ACTIVITY,
    Adb,
    AttachedPhone,
    facts_from,
    parse_battery,
    parse_cpu_list,
    parse_getprop,
    parse_meminfo,
    parse_power,
    parse_thermal,
)
from mjfl.device.phones.attached import PhoneOptions, Phones
from mjfl.errors import PhoneError
from mjfl.logs import phone_log_name

PIXEL, GALAXY, MOTO = "28041FDH2004TQ", "R58R41ABCDE", "ZY2243KLMN"
# The log the bridge asks of a phone: the app's tags and the system's that say how a process ended.
LOGCAT = (
    "shell:logcat -v threadtime MJFL:V AndroidRuntime:E libc:F DEBUG:F crash_dump64:I crash_dump32:I tombstoned:I"
    " lowmemorykiller:I lmkd:I ActivityManager:I '*:S'"
)
FACTS_COMMANDS = [
    "shell:getprop",
    "shell:cat /proc/meminfo",
    "shell:cat /sys/devices/system/cpu/possible",
    "shell:dumpsys battery",
    "shell:dumpsys thermalservice",
    "shell:pm path org.mjfl.app",
]

pytestmark = pytest.mark.timeout(60)


def phones(**installed: bool) -> list[FakePhone]:
    return [
        FakePhone.recorded("pixel7", PIXEL, installed=installed.get("pixel", True)),
        FakePhone.recorded("galaxy-a52", GALAXY, installed=installed.get("galaxy", True)),
        FakePhone.recorded("moto-g7", MOTO, installed=installed.get("moto", True)),
    ]


@pytest.fixture
def server():
    with FakeAdbServer(phones()) as s:
        yield s


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- what phones print ----------------------------------------------------------


def test_the_recorded_phones_parse_to_their_facts() -> None:
    def facts(name: str):
        folder = PHONES / name
        read = lambda f: (folder / f).read_text() if (folder / f).exists() else "Can't find service: thermalservice\n"
        return facts_from(name, parse_getprop(read("getprop.txt")), read("meminfo.txt"), read("cpu_possible.txt"),
                          read("battery.txt"), read("thermalservice.txt"), "")

    pixel, galaxy, moto = facts("pixel7"), facts("galaxy-a52"), facts("moto-g7")
    assert (pixel.model, pixel.android, pixel.sdk, pixel.abi) == ("Pixel 7", "14", 34, "arm64-v8a")
    assert (pixel.ram_mb, pixel.cores, pixel.battery_pct, pixel.charging, pixel.thermal) == (7628, 8, 87, True, "none")
    assert (galaxy.manufacturer, galaxy.battery_pct, galaxy.charging, galaxy.thermal) == ("samsung", 46, False, "light")
    # Android 9 has no thermal service; its CPU list comes in two ranges.
    assert (moto.thermal_status, moto.thermal, moto.cores, moto.charging) == (None, "unknown", 8, True)
    assert not pixel.app_installed
    # Energy: only the galaxy, on battery, can measure it; the pixel charges over USB, the moto on AC.
    assert (pixel.plugged, pixel.charge_counter_uah, galaxy.plugged, moto.plugged) == ("usb", 3456000, "none", "ac")
    assert galaxy.energy() == (True, "yes: on battery, with a charge counter")
    assert pixel.energy() == (False, ("no: powered over USB, so it charges during tasks; run it on battery over"
                                     " wireless debugging (docs/phones.md, energy)"))
    assert moto.energy()[1].startswith("no: powered over AC")
    no_counter = (folder := PHONES / "galaxy-a52" / "battery.txt").read_text().replace("Charge counter: 2211000", "")
    assert parse_power(no_counter) == ("none", None)
    assert parse_power(folder.read_text().replace("2211000", "0")) == ("none", None)  # vendors that print 0


def test_parsers_say_none_rather_than_guess() -> None:
    assert parse_getprop("[a.b]: [x y]\nnot a prop\n[c]: []\n") == {"a.b": "x y", "c": ""}
    assert parse_meminfo("MemFree: 12 kB\n") is None
    assert parse_cpu_list("") is None and parse_cpu_list("0-x") is None and parse_cpu_list("0") == 1
    assert parse_battery("level: 5\nscale: 10\nUSB powered: false\n") == (50, False)
    assert parse_battery("nothing\n") == (None, None)
    assert parse_thermal("Can't find service: thermalservice\n") is None


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 64)), min_size=1, max_size=6))
def test_a_cpu_list_counts_every_cpu_it_names(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{a}-{a + n}" if n else str(a) for a, n in ranges)
    assert parse_cpu_list(text + "\n") == sum(n + 1 for _, n in ranges)


# -- the adb server ---------------------------------------------------------------


def test_no_adb_server_is_one_clear_error() -> None:
    port = closed_port()
    with pytest.raises(PhoneError, match=f"no adb server at 127.0.0.1:{port}: .*adb start-server"):
        Adb(f"127.0.0.1:{port}").phones()
    with pytest.raises(PhoneError, match="adb server address nowhere: expected HOST:PORT"):
        Adb("nowhere")


def test_phones_are_listed_with_their_states_and_what_to_do(server: FakeAdbServer) -> None:
    server.set_state(MOTO, "unauthorized")
    listed = Adb(server.address).phones()
    assert listed == [AttachedPhone(PIXEL, "device"), AttachedPhone(GALAXY, "device"), AttachedPhone(MOTO, "unauthorized")]
    assert "accept the 'Allow USB debugging' prompt" in listed[2].problem() and listed[0].problem() == ""
    assert server.commands(None) == ["host:devices"]


def test_facts_come_from_six_commands_on_that_phone(server: FakeAdbServer) -> None:
    facts = Adb(server.address).facts(GALAXY)
    assert (facts.model, facts.cores, facts.ram_mb, facts.thermal, facts.app_installed) == ("SM-A525F", 8, 5574, "light", True)
    assert server.commands(GALAXY) == FACTS_COMMANDS
    assert server.commands(PIXEL) == [] and server.commands(MOTO) == []
    # Each phone command travels on a connection switched to that phone.
    assert set(server.commands(None)) == {"host:version", f"host:tport:serial:{GALAXY}"}


def test_a_phone_not_attached_is_named(server: FakeAdbServer) -> None:
    with pytest.raises(PhoneError, match="phone NOPE: getprop: it is not attached"):
        Adb(server.address).facts("NOPE")


def test_reverse_forwards_the_port_and_reads_both_answers(server: FakeAdbServer) -> None:
    adb = Adb(server.address)
    adb.reverse(PIXEL, 8765)
    assert server.phones[PIXEL].reverses == {"tcp:8765"}
    adb.unreverse(PIXEL, 8765)
    assert server.phones[PIXEL].reverses == set()
    # The second answer is the forward's own: a FAIL there is an error, not a success.
    with pytest.raises(PhoneError, match=f"phone {PIXEL}: adb reverse --remove tcp:8765: listener 'tcp:8765' not found"):
        adb.unreverse(PIXEL, 8765)
    assert server.commands(PIXEL) == [
        "reverse:forward:tcp:8765;tcp:8765", "reverse:killforward:tcp:8765", "reverse:killforward:tcp:8765",
    ]  # fmt: skip


def test_install_pushes_the_apk_intact_installs_it_and_cleans_up(server: FakeAdbServer, tmp_path: Path) -> None:
    apk = tmp_path / "app-debug.apk"
    apk.write_bytes(bytes(range(256)) * 700)  # 175 KiB: several DATA chunks
    server.phones[PIXEL].installed = False
    Adb(server.address).install(PIXEL, apk)
    phone = server.phones[PIXEL]
    assert phone.pushed == [("/data/local/tmp/mjfl-app.apk", apk.read_bytes())]
    assert phone.installed and phone.files == {}
    assert server.commands(PIXEL) == [
        "sync:", "sync:STAT /data/local/tmp/mjfl-app.apk",
        "sync:", "sync:SEND /data/local/tmp/mjfl-app.apk,33188",
        "shell:pm install -r -t /data/local/tmp/mjfl-app.apk",
        "shell:rm -f /data/local/tmp/mjfl-app.apk",
    ]  # fmt: skip


def test_a_failed_install_names_the_phone_and_the_reason_and_still_cleans_up(server: FakeAdbServer, tmp_path: Path) -> None:
    apk = tmp_path / "app.apk"
    apk.write_bytes(b"PK\x03\x04")
    server.phones[GALAXY].install_failure = "INSTALL_FAILED_INSUFFICIENT_STORAGE"
    with pytest.raises(PhoneError, match=f"phone {GALAXY}: installing .*app.apk failed: INSTALL_FAILED_INSUFFICIENT_STORAGE"):
        Adb(server.address).install(GALAXY, apk)
    assert server.commands(GALAXY)[-1] == "shell:rm -f /data/local/tmp/mjfl-app.apk"
    with pytest.raises(PhoneError, match="missing.apk: no such APK"):
        Adb(server.address).install(GALAXY, tmp_path / "missing.apk")


def test_launch_passes_the_extras_through_the_phones_shell(server: FakeAdbServer) -> None:
    adb = Adb(server.address)
    token = "s3cret with spaces; 'quotes' $HOME"
    adb.launch(PIXEL, url="ws://127.0.0.1:8765", device_id=PIXEL, token=token)
    assert server.phones[PIXEL].extras == {"url": "ws://127.0.0.1:8765", "device_id": PIXEL, "token": token}
    assert server.commands(PIXEL)[0].startswith(f"shell:am start -n {APP_ACTIVITY} --es url ws://127.0.0.1:8765")
    assert adb.app_running(PIXEL) and not adb.app_running(GALAXY)
    adb.force_stop(PIXEL)
    assert not adb.app_running(PIXEL)
    assert server.commands(PIXEL)[-2:] == ["shell:am force-stop org.mjfl.app", "shell:pidof org.mjfl.app"]
    server.phones[GALAXY].installed = False
    with pytest.raises(PhoneError, match=f"phone {GALAXY}: starting the app failed: Error: Activity class"):
        adb.launch(GALAXY, url="ws://127.0.0.1:8765", device_id=GALAXY)


def test_logcat_is_copied_until_the_phone_is_unplugged(server: FakeAdbServer) -> None:
    adb, sink, stop = Adb(server.address), io.BytesIO(), threading.Event()
    copier = threading.Thread(target=adb.logcat, args=(PIXEL, sink.write, stop))
    copier.start()
    server.wait_for(lambda: any(c.startswith("shell:logcat") for c in server.commands(PIXEL)))
    server.unplug(PIXEL)
    copier.join(10)
    assert not copier.is_alive()
    assert sink.getvalue() == server_phone_log("pixel7")
    assert server.commands(PIXEL) == [LOGCAT]


def server_phone_log(name: str) -> bytes:
    return (PHONES / name / "logcat.txt").read_bytes()


def test_tracking_reports_every_plug_and_unplug(server: FakeAdbServer) -> None:
    adb, stop = Adb(server.address), threading.Event()
    seen: list[list[str]] = []
    changed = threading.Condition()

    def report(listed: list[AttachedPhone]) -> None:
        with changed:
            seen.append([f"{p.serial}:{p.state}" for p in listed])
            changed.notify_all()

    def until(n: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(seen) >= n, PATIENCE_S), seen

    tracker = threading.Thread(target=adb.track, args=(report, stop))
    tracker.start()
    until(1)
    pixel = server.unplug(PIXEL)
    until(2)
    server.plug(pixel)
    until(3)
    stop.set()
    adb.interrupt()
    tracker.join(10)
    assert not tracker.is_alive()
    everyone = [f"{PIXEL}:device", f"{GALAXY}:device", f"{MOTO}:device"]
    assert seen == [everyone, everyone[1:], everyone[1:] + everyone[:1]]
    assert server.commands(None) == ["host:track-devices"]


# -- a run's phones ---------------------------------------------------------------


class Said(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def test_no_usable_phone_is_one_line_naming_why(tmp_path: Path) -> None:
    with FakeAdbServer() as empty, pytest.raises(
        PhoneError, match=f"no phone to use on the adb server at {empty.address}: none is attached"
    ):
        Phones(PhoneOptions(adb=empty.address), log_dir=tmp_path, say=Said()).attached()
    locked_phone = FakePhone.recorded("pixel7", PIXEL, state="unauthorized")
    with FakeAdbServer([locked_phone]) as locked, pytest.raises(PhoneError, match=f"phone {PIXEL} is unauthorized: unlock it"):
        Phones(PhoneOptions(adb=locked.address), log_dir=tmp_path, say=Said()).attached()


async def test_a_runs_phones_are_pointed_at_the_coordinator_and_followed_through_hot_plug(tmp_path: Path) -> None:
    server = FakeAdbServer(phones(moto=False))
    server.set_state(GALAXY, "unauthorized")
    said = Said()
    run = Phones(PhoneOptions(adb=server.address, token="t"), log_dir=tmp_path / "phones", say=said)
    try:
        assert run.attached() == [PIXEL, MOTO]
        async with run.serving(8765) as ready:
            # The moto has no app (and no --apk): reported and left out; the pixel is pointed.
            assert ready == [PIXEL]
            assert any(f"phone {MOTO}: the mjfl app is not installed; give --apk PATH" in line for line in said)
            pixel = server.phones[PIXEL]
            assert pixel.reverses == {"tcp:8765"}
            assert pixel.extras == {"url": "ws://127.0.0.1:8765", "device_id": PIXEL, "token": "t"}
            # Its log is copied to <out>/phones/.
            log = tmp_path / "phones" / phone_log_name(PIXEL)
            await eventually_async(lambda: log.exists() and log.read_bytes() == server_phone_log("pixel7"))
            assert server.commands(PIXEL)[:6] == FACTS_COMMANDS
            assert server.commands(PIXEL)[6:] == [
                "shell:pm grant org.mjfl.app android.permission.POST_NOTIFICATIONS",
                "shell:dumpsys deviceidle whitelist +org.mjfl.app",
                "shell:settings get global stay_on_while_plugged_in",  # kept to be put back
                "shell:svc power stayon true",
                "shell:pm path org.mjfl.app",  # which build of the app it has (a run's provenance)
                "shell:sha256sum '/data/app/~~x/org.mjfl.app-1/base.apk'",
                "reverse:forward:tcp:8765;tcp:8765",
                (
                    "shell:am start -n org.mjfl.app/.StartActivity --es url ws://127.0.0.1:8765"
                    f" --es device_id {PIXEL} --es token t"
                ),
                LOGCAT,
            ]
            assert run.apps == {PIXEL: hashlib.sha256(b"installed by hand").hexdigest()}  # the moto was left out

            # A cable pull: the forward goes with the connection; back, it is restored,
            # and the app, still running, is not started again.
            before = len(server.commands(PIXEL))
            server.plug(server.unplug(PIXEL))
            await eventually_async(lambda: any("is back" in line for line in said) and len(server.commands(PIXEL)) == before + 3)
            assert server.commands(PIXEL)[before:] == [
                "reverse:forward:tcp:8765;tcp:8765", "shell:pidof org.mjfl.app",
                LOGCAT,
            ]  # fmt: skip
            assert pixel.reverses == {"tcp:8765"}
            # A reboot: the app is gone too, so it is started again.
            before = len(server.commands(PIXEL))
            server.plug(server.unplug(PIXEL, reboot=True))
            await eventually_async(lambda: sum("is back" in line for line in said) == 2 and len(server.commands(PIXEL)) == before + 4)
            assert [c.split(" --es")[0] for c in server.commands(PIXEL)[before:]] == [
                "reverse:forward:tcp:8765;tcp:8765", "shell:pidof org.mjfl.app",
                "shell:am start -n org.mjfl.app/.StartActivity",
                LOGCAT,
            ]  # fmt: skip
            # The galaxy is authorized during the run: it is prepared and pointed like the first.
            server.set_state(GALAXY, "device")
            await eventually_async(lambda: any(f"phone {GALAXY}: samsung SM-A525F, Android 12" in line for line in said))
            assert server.phones[GALAXY].reverses == {"tcp:8765"} and server.phones[GALAXY].app_pid is not None
            # Each problem was said once, not at every change of the list.
            assert sum(f"phone {MOTO}: the mjfl app is not installed" in line for line in said) == 1
            assert sum(f"phone {GALAXY} is unauthorized" in line for line in said) == 1
        # Leaving stops the app where it was started and takes the forwards back; nothing more is read.
        assert server.phones[PIXEL].reverses == set() and server.phones[GALAXY].reverses == set()
        for serial in (PIXEL, GALAXY):  # the log follower's logcat runs on its own thread: not among the stop's
            assert [c for c in server.commands(serial) if not c.startswith("shell:logcat")][-3:] == [
                "shell:am force-stop org.mjfl.app", "shell:settings put global stay_on_while_plugged_in 0",
                "reverse:killforward:tcp:8765",
            ]  # fmt: skip
            assert server.phones[serial].app_pid is None
        assert not any("force-stop" in c for c in server.commands(MOTO)), "never started there"
        assert f"app stopped on {PIXEL}, {GALAXY} (am force-stop org.mjfl.app)" in said
    finally:
        server.close()


async def test_an_app_lost_while_its_phone_stays_is_started_again_but_not_in_a_loop(tmp_path: Path) -> None:
    server = FakeAdbServer([FakePhone.recorded("pixel7", PIXEL, installed=True)])
    said = Said()
    run = Phones(PhoneOptions(adb=server.address), log_dir=tmp_path, say=said)

    def count(command: str) -> int:
        return sum(c.startswith(command) for c in server.commands(PIXEL))

    try:
        run.attached()
        async with run.serving(8765):
            run.lost(PIXEL)  # a lost connection, the app still running: it reconnects by itself
            await eventually_async(lambda: count("shell:pidof") == 1)
            assert count("shell:am start") == 1
            server.crash(PIXEL)  # the app dies, the phone stays: started again
            run.lost(PIXEL)
            await eventually_async(lambda: any("started again" in line for line in said))
            assert count("shell:am start") == 2 and server.phones[PIXEL].app_pid is not None
            server.crash(PIXEL)  # again, within CRASH_BACKOFF_S: left stopped until a replug, and said so
            run.lost(PIXEL)
            await eventually_async(lambda: any("stopped again" in line for line in said))
            assert count("shell:am start") == 2 and server.phones[PIXEL].app_pid is None
            server.plug(server.unplug(PIXEL))  # replugged: started again
            await eventually_async(lambda: count("shell:am start") == 3)
        pidofs = count("shell:pidof")
        run.lost(PIXEL)  # the run is over: nothing is queued, nothing asked
        assert count("shell:pidof") == pidofs
    finally:
        server.close()


@pytest.mark.parametrize("ending", ["error", "ctrl-c"])
async def test_however_a_run_ends_the_app_is_stopped_on_every_phone_it_was_started_on(tmp_path: Path, ending: str) -> None:
    server = FakeAdbServer(phones())
    said = Said()
    run = Phones(PhoneOptions(adb=server.address), log_dir=tmp_path / "phones", say=said)
    stopped: asyncio.Event = asyncio.Event()

    async def body() -> None:
        async with run.serving(8765) as ready:
            assert ready == [PIXEL, GALAXY, MOTO]
            server.unplug(MOTO)  # gone before the end: its app cannot be stopped, and that is said
            await eventually_async(lambda: any(f"phone {MOTO} left" in line for line in said))
            if ending == "error":
                raise RuntimeError("the run failed")
            stopped.set()
            await asyncio.Event().wait()  # until Ctrl-C (asyncio.run cancels the main task)

    try:
        run.attached()
        if ending == "error":
            with pytest.raises(RuntimeError, match="the run failed"):
                await body()
        else:
            task = asyncio.ensure_future(body())
            await stopped.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        for serial in (PIXEL, GALAXY):  # Ctrl-C (and SIGTERM, which mjfl takes as one) ends as an error does
            assert "shell:am force-stop org.mjfl.app" in server.commands(serial)
            assert server.phones[serial].app_pid is None and server.phones[serial].reverses == set()
            assert server.phones[serial].settings["stay_on_while_plugged_in"] == "0"  # put back as it was (never set)
        assert f"app stopped on {PIXEL}, {GALAXY} (am force-stop org.mjfl.app)" in said
        assert any(line.startswith(f"phone {MOTO} is not attached: its app was not stopped") for line in said), said
    finally:
        server.close()


async def test_phones_prepared_before_a_failure_are_stopped_too(tmp_path: Path) -> None:
    server = FakeAdbServer(phones())
    run = Phones(PhoneOptions(adb=server.address), log_dir=tmp_path / "phones", say=Said())
    real_point = run._point

    def point(serial: str, port: int, url: str, apk: Path | None):  # one phone hits a bug of ours
        if serial == MOTO:
            raise ValueError("a bug while preparing")
        return real_point(serial, port, url, apk)

    run._point = point  # type: ignore[method-assign]
    try:
        run.attached()
        with pytest.raises(ValueError, match="a bug while preparing"):
            async with run.serving(8765):
                pytest.fail("the body must not run")
        for serial in (PIXEL, GALAXY):
            # The phone's log follower starts its logcat on a thread of its own: on a loaded machine its command
            # can come among the stop's, which are what this test is about.
            commands = [c for c in server.commands(serial) if not c.startswith("shell:logcat")]
            assert commands[-3:-1] == [
                "shell:am force-stop org.mjfl.app", "shell:settings put global stay_on_while_plugged_in 0"
            ]  # fmt: skip
    finally:
        server.close()


async def test_a_native_crash_and_a_low_memory_kill_reach_the_phones_log_and_name_the_lost_connections_cause(
    tmp_path: Path,
) -> None:
    """The stand-in logs a crash as Android does, other apps' lines on the same tags among them; the
    low-memory killer's lines come after the app is gone, as lmkd logs a kill once done."""
    server = FakeAdbServer([FakePhone.recorded("pixel7", PIXEL, installed=True)])
    said = Said()
    run = Phones(PhoneOptions(adb=server.address), log_dir=tmp_path / "phones", say=said)
    log = tmp_path / "phones" / phone_log_name(PIXEL)
    lost = "connection lost (close code 1006)"
    try:
        run.attached()
        async with run.serving(8765):
            await eventually_async(lambda: log.exists() and log.read_bytes() == server_phone_log("pixel7"))
            server.crash(PIXEL, NATIVE_CRASH)
            assert await run.explain(PIXEL, lost) == f"{lost}; the app ended: native crash (SIGSEGV in thread mjfl-trainer)"
            run.lost(PIXEL)
            await eventually_async(lambda: any("started again" in line for line in said))
            assert f"phone {PIXEL}: the app stopped (its log says: native crash (SIGSEGV in thread mjfl-trainer)); started again" in said

            server.crash(PIXEL, LOW_MEMORY_KILL, logged_after=4)  # its connection's end may come first
            reason = await run.explain(PIXEL, lost)
            assert reason.startswith(f"{lost}; the app ended: killed for memory (low-memory killer: low watermark is breached")
            # No crash or kill in the log: nothing is made up (after a shorter wait, for the test).
            run.cause_wait_s = 0.5
            assert await run.explain(PIXEL, lost) == lost
            # A network drop: the app still runs, so no end is waited for.
            run.cause_wait_s = 60
            server.phones[PIXEL].app_pid = 4343  # started by hand since (the bridge waits for a replug)
            assert await asyncio.wait_for(run.explain(PIXEL, lost), 10) == lost
            assert await run.explain("emulated-1", lost) == lost  # not a phone of the bridge: not waited for
        text = log.read_text()
        pid = server.phones[PIXEL].app_pid or 4242
        for line in [*NATIVE_CRASH, *LOW_MEMORY_KILL]:
            line = line.format(pid=pid)
            about_the_app = "org.mjfl.app" in line or " 7311 " in line or "Tombstone written" in line
            about_the_app = about_the_app and "CarrierSvcBindHelper" not in line  # a tag adb silences
            assert (line in text) == about_the_app, line
    finally:
        server.close()


async def test_a_served_phone_is_kept_awake_while_plugged_and_its_setting_put_back(tmp_path: Path) -> None:
    pixel, galaxy = FakePhone.recorded("pixel7", PIXEL, installed=True), FakePhone.recorded("galaxy-a52", GALAXY, installed=True)
    pixel.settings["stay_on_while_plugged_in"] = "2"  # the lab set USB itself; the galaxy never was
    server = FakeAdbServer([pixel, galaxy])
    said = Said()
    run = Phones(PhoneOptions(adb=server.address), log_dir=tmp_path / "phones", say=said)
    try:
        run.attached()
        async with run.serving(8765):
            assert pixel.settings["stay_on_while_plugged_in"] == galaxy.settings["stay_on_while_plugged_in"] == "7"
            server.unplug(PIXEL, reboot=True)  # a setting survives a reboot: not asked again
            await eventually_async(lambda: any(f"phone {PIXEL} left" in line for line in said))
            server.plug(pixel)
            await eventually_async(lambda: any(f"phone {PIXEL} is back" in line for line in said))
            server.unplug(GALAXY)  # gone when the service ends: how to put it back is said
            await eventually_async(lambda: any(f"phone {GALAXY} left" in line for line in said))
        assert pixel.settings["stay_on_while_plugged_in"] == "2"
        assert server.commands(PIXEL).count("shell:settings get global stay_on_while_plugged_in") == 1
        assert (
            f"phone {GALAXY}: its screen's stay-on setting was not put back"
            f" (adb -s {GALAXY} shell settings put global stay_on_while_plugged_in 0)"
        ) in said
    finally:
        server.close()


async def test_a_phone_over_wireless_debugging_is_connected_and_asked_for_again_when_it_drops(tmp_path: Path) -> None:
    address = "192.168.1.57:37099"
    server = FakeAdbServer()
    server.reachable[address] = FakePhone.recorded("galaxy-a52", address, installed=True)
    said = Said()
    run = Phones(PhoneOptions(adb=server.address, connect=(address, "192.168.1.58:41234")), log_dir=tmp_path, say=said)
    run.reconnect_s = 0.1
    try:
        assert run.attached() == [address]
        assert "adb connect 192.168.1.58:41234: failed to connect to '192.168.1.58:41234': Connection refused" in said[0]
        async with run.serving(8765) as ready:
            assert ready == [address] and server.phones[address].reverses == {"tcp:8765"}
            phone = server.reachable.pop(address)  # Wi-Fi dropped: adb forgets it, and it does not answer
            server.unplug(address)
            await eventually_async(lambda: any(f"phone {address} left" in line for line in said))
            server.reachable[address] = phone  # it answers again: asked for again, it comes back and is re-pointed
            await eventually_async(lambda: any(f"phone {address} is back" in line for line in said))
            assert server.phones[address].reverses == {"tcp:8765"}
        assert server.commands(None).count(f"host:connect:{address}") >= 2
    finally:
        server.close()

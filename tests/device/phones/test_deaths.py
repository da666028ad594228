"""How the app ended, read from a phone's logcat (``deaths.AppLines``), and which system lines are kept.

No phone is attached on a test machine: the lines are logcat -v threadtime's, as
AOSP's libc, debuggerd, lmkd and ActivityManager log them (``fake_adb.NATIVE_CRASH``,
``LOW_MEMORY_KILL``), and as the app logs its own. Pure: fast.
"""

from __future__ import annotations

import pytest
from fake_adb import LOW_MEMORY_KILL, NATIVE_CRASH

from mjfl.device.phones.deaths import AppLines, Death

APP_LINE = "11-28 03:12:40.001  5120  5141 I MJFL    : 28041FDH2004TQ: task lenet round 3"


def read(lines: list[str]) -> tuple[AppLines, list[str]]:
    """The app's own line, then ``lines``: the reader, and the lines it kept."""
    app = AppLines("org.mjfl.app", "MJFL")
    kept = [k.decode() for line in [APP_LINE, *lines] for k in app.keep(line.encode())]
    return app, kept


def test_a_native_crash_keeps_its_signal_line_and_tombstone_and_no_other_apps_lines() -> None:
    app, kept = read([line.format(pid=5120) for line in NATIVE_CRASH])
    assert app.death == Death("native crash", "SIGSEGV in thread mjfl-trainer")
    assert str(app.death) == "native crash (SIGSEGV in thread mjfl-trainer)"
    # Every line of its tombstone, the ones before the line naming the app too, and where it was written.
    assert [line for line in kept if " DEBUG   : " in line] == [
        line.format(pid=5120) for line in NATIVE_CRASH if " DEBUG   : " in line
    ]
    assert any("crash_dump64: obtaining output fd" in line for line in kept)
    assert any("Tombstone written to" in line for line in kept)
    # Not the game's crash, nor chrome's start, nor tombstoned's line naming only a thread.
    assert not any("com.example.game" in line or "com.android.chrome" in line for line in kept)
    assert not any("received crash request" in line for line in kept)


def test_a_low_memory_kill_is_told_by_lmkd_and_not_made_vaguer_by_activity_managers_death_line() -> None:
    app, kept = read([line.format(pid=5120) for line in LOW_MEMORY_KILL])
    assert app.death is not None and app.death.cause == "killed for memory"
    assert "low watermark is breached and swap is low" in app.death.detail
    assert [line for line in kept if "youtube" in line] == []  # another app's kill: not the app's file's
    assert len([line for line in kept if "ActivityManager: " in line or "lowmemorykiller: " in line]) == 3
    # A tag no app shares is kept as read: silencing it is adb's filter's part (the stand-in's tests).
    assert any("CarrierSvcBindHelper" in line for line in kept)
    assert "2311" not in app.pids  # and its process is not taken for the app's


@pytest.mark.parametrize(
    ("lines", "death"),
    [
        (
            [
                "11-28 05:01:02.100  5120  5141 E AndroidRuntime: FATAL EXCEPTION: mjfl-trainer",
                "11-28 05:01:02.100  5120  5141 E AndroidRuntime: Process: org.mjfl.app, PID: 5120",
                ("11-28 05:01:02.100  5120  5141 E AndroidRuntime: java.lang.OutOfMemoryError: Failed to allocate a"
                " 268435472 byte allocation with 25165824 free bytes and 126MB until OOM"),
                "11-28 05:01:02.100  5120  5141 E AndroidRuntime: \tat org.mjfl.app.training.Trainer.run(Trainer.java:88)",
            ],
            Death("Java exception", "java.lang.OutOfMemoryError: Failed to allocate a 268435472 byte allocation"
                  " with 25165824 free bytes and 126MB until OOM"),
        ),
        (
            ["11-28 05:01:02.100  1450  1477 E ActivityManager: ANR in org.mjfl.app (org.mjfl.app/.StartActivity)"],
            Death("not responding (ANR)"),
        ),
        (
            [("11-28 05:01:02.100  1450  1477 I ActivityManager: Killing 5120:org.mjfl.app/u0a234 (adj 200):"
             " excessive cpu 30000 during 300070 dur=1200000 limit=2")],
            Death("stopped by the system", "excessive cpu 30000 during 300070 dur=1200000 limit=2"),
        ),
        (
            ["11-28 05:01:02.100  1450  1477 I ActivityManager: Process org.mjfl.app (pid 5120) has died: prcp FGS "],
            Death("died", "prcp FGS"),
        ),
    ],
)
def test_each_end_the_system_logs_is_named(lines: list[str], death: Death) -> None:
    app, kept = read(lines)
    assert app.death == death
    assert kept[1:] == lines  # all of them about the app, so all kept


def test_an_app_whose_name_another_begins_is_not_the_app_and_a_replay_tells_of_no_new_end() -> None:
    other = "11-28 05:01:02.100  9999  9999 F libc    : Fatal signal 6 (SIGABRT), code -1 in tid 9999 (main), pid 9999 (org.mjfl.app.tests)"
    app, kept = read([other])
    assert app.death is None and kept == [APP_LINE]
    crash = NATIVE_CRASH[1].format(pid=5120).encode()
    app.keep(crash, new=False)  # adb's replay of the buffer after a reconnect: an end already told
    assert app.death is None
    app.keep(crash)
    assert app.death is not None and app.fresh
    app.forget()  # the app is started again: what was read is of its earlier end
    assert not app.fresh

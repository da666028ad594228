"""The first-day check (`mjfl devices check`) against the stand-in adb server, with the app's self-test on the JVM.

No phone can be attached here. Each phone's app is played by the app's own
Java self-test (``android/app/bin/mjfl-selftest``: ``SelfTest`` with
``ExecuTorchProgram``, the code a phone runs) on the files the check pushed,
over the JVM double of ExecuTorch whose runtime is ExecuTorch's in Python
(``android/app/src/jvmTest``); its stdout becomes the phone's logcat lines,
exactly as the app logs them. The golden cases are the zoo's own, for three
models: LeNet-5, CNN-B (dropout noise) and ResNet-13 (batch norm); the
programs come from the repository's ``.mjfl-cache/programs`` (exported on a
cold cache only).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fake_adb import FakeAdbServer, FakePhone
from repository import ROOT
from rich.console import Console

from mjfl.commands.device_check import check_phones
from mjfl.device.emulated.golden import golden_set
from mjfl.device.phones.attached import PhoneOptions
from mjfl.device.phones.selftest import (
    REMOTE_ROOT,
    CaseCheck,
    SelfTestLines,
    Waits,
    installed_is,
    parse_lines,
)
from mjfl.device.protocol import messages as wire
from mjfl.device.protocol.codec import decode, encode
from mjfl.errors import PhoneError

SELFTEST = ROOT / "android" / "app" / "bin" / "mjfl-selftest"
PROGRAMS = ROOT / ".mjfl-cache" / "programs"
CASES = ("lenet5", "cnn-b", "resnet13")
PIXEL, GALAXY = "28041FDH2004TQ", "R58R41ABCDE"
FAST = Waits(start_s=60, quiet_s=60, poll_s=0.05)
STATE = {"battery_pct": 87, "charging": True, "thermal_status": 1}

pytestmark = pytest.mark.timeout(300)
needs_jdk = pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")


@pytest.fixture(scope="module")
def zoo_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden set of CASES, trained by the Python runtime into a temporary cache."""
    return golden_set(CASES, cache=tmp_path_factory.mktemp("golden"), programs=PROGRAMS)


def corrupted(golden: Path, to: Path, case: str, *, by: float = 1e-2) -> tuple[Path, str]:
    """A copy of the set whose ``case`` expects its first tensor moved by ``by`` of its size
    (weights the Python runtime did not train); returns it and the tensor's name."""
    shutil.copytree(golden, to)
    path = to / case / "expected.mjfl"
    result = decode(path.read_bytes())
    assert isinstance(result, wire.Result)
    weights = {k: np.array(v, np.float32) for k, v in result.weights.items()}
    name = next(iter(weights))
    weights[name].flat[0] += by * float(np.abs(weights[name]).max())
    path.write_bytes(encode(replace(result, weights=weights)))  # type: ignore[arg-type]
    return to, name


def jvm_app(work: Path, *, state: dict[str, object] = STATE) -> Callable[[FakePhone, dict[str, str]], None]:
    """``on_selftest``: the app's self-test on the JVM, over the files pushed to the phone; its lines as the phone's logcat."""

    def start(phone: FakePhone, extras: dict[str, str]) -> None:
        root = work / phone.serial / "set"
        shutil.rmtree(root, ignore_errors=True)
        prefix = extras["dir"] + "/"
        for path, data in list(phone.files.items()):
            if path.startswith(prefix):
                target = root / path.removeprefix(prefix)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        args = [str(SELFTEST), "--run", extras["run"], "--dir", str(root), "--work", str(work / phone.serial / "work")]
        proc = subprocess.Popen(
            [*args, "--state", json.dumps(state)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "MJFL_PYTHON": sys.executable},  # the double's runtime: this interpreter
        )  # fmt: skip

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                phone.check_log.append(line.rstrip("\n"))
            proc.wait()

        threading.Thread(target=pump, daemon=True).start()

    return start


@pytest.fixture(scope="module")
def jvm_built() -> None:
    """Builds the app, the double and the tests once (the launcher would, inside the first check's wait)."""
    subprocess.run([str(ROOT / "android" / "build-jvm.sh"), "--app"], check=True, capture_output=True)


def console() -> Console:
    return Console(record=True, width=200, force_terminal=False)


# -- what the lines say (pure) -------------------------------------------------------


def test_only_the_runs_own_json_lines_count_and_dropped_lines_are_kept() -> None:
    lines_of_the_buffer = [
        "--------- beginning of main",
        '{"event":"start","run":"old","cases":["x"]}',
        '{"event":"start","run":"r","cases":["a","b"],"tolerance":1e-4,"device_state":{"battery_pct":50}}',
        '{"event":"case","run":"r","case":"a","pass":true,"max_rel_diff":1e-7,"loss_rel_diff":0.0,"steps":6}',
        '{"event":"case","run":"r","case":"b","pass":',  # cut off by the buffer's end
    ]
    dump = "\n".join(lines_of_the_buffer)
    assert [o["event"] for o in parse_lines(dump, "r")] == ["start", "case"]
    lines = SelfTestLines("r")
    assert lines.feed(dump)
    assert (lines.cases, lines.tolerance, lines.next_case) == (["a", "b"], 1e-4, "b")
    assert lines.started is not None and lines.started.battery == "50%"
    # The buffer rotated: the start and the first case are gone, the second arrived.
    assert lines.feed('{"event":"case","run":"r","case":"b","pass":false,"max_rel_diff":null,"error":"boom"}\n')
    assert not lines.feed('{"event":"case","run":"r","case":"b","pass":false}\n')
    assert list(lines.results) == ["a", "b"] and lines.next_case is None


def test_a_failed_case_says_why_in_words() -> None:
    base = {"event": "case", "run": "r", "case": "vgg6", "pass": False, "max_rel_diff": 3e-2, "worst": "fc1.weight",
            "loss_rel_diff": 1e-3, "steps": 6}  # fmt: skip
    assert CaseCheck.from_line(base).problem() == "fc1.weight differs by 3.0e-02"
    assert CaseCheck.from_line(base | {"max_rel_diff": 0.0}).problem() == "the mean loss differs by 1.0e-03"
    assert CaseCheck.from_line(base | {"max_rel_diff": None}).problem() == "the trained weights or loss are not finite"
    assert CaseCheck.from_line(base | {"error": "UnsatisfiedLinkError: x"}).problem() == "UnsatisfiedLinkError: x"
    assert CaseCheck.from_line(base | {"pass": True}).problem() == ""


def test_the_installed_app_is_the_apk_when_their_bytes_hash_the_same(tmp_path: Path) -> None:
    apk = tmp_path / "app.apk"
    apk.write_bytes(b"build 2")
    base = "/data/app/~~q/org.mjfl.app-7/base.apk"

    class Phone:
        def __init__(self, path: str, sha256sum: str) -> None:
            self.answers = {"pm path org.mjfl.app": path, f"sha256sum {base}": sha256sum}

        def shell(self, serial: str, args: list[str]) -> str:
            return self.answers[" ".join(args)]

    same = hashlib.sha256(b"build 2").hexdigest()
    other = hashlib.sha256(b"build 1").hexdigest()
    assert installed_is(Phone(f"package:{base}\n", f"{same}  {base}\n"), "s", apk) is True  # type: ignore[arg-type]
    assert installed_is(Phone(f"package:{base}\n", f"{other}  {base}\n"), "s", apk) is False  # type: ignore[arg-type]
    assert installed_is(Phone("", ""), "s", apk) is False  # type: ignore[arg-type]
    # A phone without sha256sum (an old toybox) cannot tell: the check installs, which keeps the app's data.
    not_found = "/system/bin/sh: sha256sum: inaccessible or not found\n"
    assert installed_is(Phone(f"package:{base}\n", not_found), "s", apk) is None  # type: ignore[arg-type]


# -- the check against the stand-in adb server, the JVM playing the app ----------------


@needs_jdk
def test_a_phone_whose_app_trains_like_python_passes_and_a_second_check_neither_installs_nor_pushes(
    tmp_path: Path, jvm_built: None, zoo_set: Path
) -> None:
    apk = tmp_path / "app-debug.apk"
    apk.write_bytes(b"the app")
    out = console()
    with FakeAdbServer([FakePhone.recorded("pixel7", PIXEL)], on_selftest=jvm_app(tmp_path / "jvm")) as server:
        checks = check_phones(PhoneOptions(adb=server.address, apk=apk), waits=FAST, console=out, golden=zoo_set)
        commands = server.commands(PIXEL)
        remote = f"{REMOTE_ROOT}/{zoo_set.name}"
        assert "shell:pm install -r -t /data/local/tmp/mjfl-app.apk" in commands
        pushed = {c.removeprefix("sync:SEND ").split(",")[0] for c in commands if c.startswith(f"sync:SEND {remote}")}
        files = ("program.pte", "provision.mjfl", "task.mjfl", "expected.mjfl")
        assert pushed == {f"{remote}/{case}/{f}" for case in CASES for f in files} | {f"{remote}/manifest.json"}
        phone = server.phones[PIXEL]
        # The app reads the set as "others" of the shell's files: folders 755, files 644.
        assert phone.modes[REMOTE_ROOT] == phone.modes[remote] == phone.modes[f"{remote}/cnn-b"] == 0o755
        assert phone.modes[f"{remote}/cnn-b/task.mjfl"] == 0o644
        start = next(c for c in commands if "SelfTestActivity" in c)
        run = start.split("--es run ")[1].split()[0]
        assert start == f"shell:am start -n org.mjfl.app/.SelfTestActivity --es run {run} --es dir {remote}"
        assert any(c.startswith("shell:logcat -d -v raw MJFL-CHECK:V") for c in commands)

        check = checks[PIXEL]
        assert check.passed and check.installed and check.error is None
        assert [c.case for c in check.cases] == list(CASES)
        for c in check.cases:
            # The app's code over ExecuTorch's own kernels, as the Python runtime's: to the bit.
            assert c.passed and c.max_rel_diff == 0.0 and c.loss_rel_diff == 0.0, c
            assert c.steps == 6 and c.planned_mb is not None and c.planned_mb > 0 and c.step_ms is not None
            assert c.state.battery == "87%, charging" and c.state.thermal == "light"
        text = out.export_text()
        assert "resnet13" in text and "pass" in text and "FAIL" not in text
        assert f"phone {PIXEL} (Google Pixel 7, Android 14, arm64-v8a): passed 3 of 3" in text
        assert "app installed first" in text and "1 phones passed the first-day check" in text

        # The same app and set again: nothing to install or push, a new run.
        before = len(server.commands(PIXEL))
        again = check_phones(PhoneOptions(adb=server.address, apk=apk), waits=FAST, console=console(), golden=zoo_set)
        later = server.commands(PIXEL)[before:]
        assert not any(c.startswith(("sync:SEND", "shell:pm install", "shell:rm -rf")) for c in later), later
        assert again[PIXEL].passed and not again[PIXEL].installed


@needs_jdk
def test_bad_weights_fail_the_phone_naming_model_and_tensor_and_the_other_phone_still_passes(
    tmp_path: Path, jvm_built: None, zoo_set: Path
) -> None:
    bad, tensor = corrupted(zoo_set, tmp_path / "bad", "cnn-b")
    phones = [FakePhone.recorded("pixel7", PIXEL, installed=True), FakePhone.recorded("galaxy-a52", GALAXY, installed=True)]
    out = console()
    app = jvm_app(tmp_path / "jvm")

    def selftest(phone: FakePhone, extras: dict[str, str]) -> None:
        if phone.serial == GALAXY:  # this phone's copy of cnn-b expects weights the Python runtime did not train
            phone.files[f"{extras['dir']}/cnn-b/expected.mjfl"] = (bad / "cnn-b" / "expected.mjfl").read_bytes()
        app(phone, extras)

    with FakeAdbServer(phones, on_selftest=selftest) as server, pytest.raises(PhoneError) as failed:
        check_phones(PhoneOptions(adb=server.address), waits=FAST, console=out, golden=zoo_set)
    assert str(failed.value).startswith("1 of 2 phones failed the first-day check")
    text = out.export_text()
    assert f"phone {GALAXY} (samsung SM-A525F, Android 12, arm64-v8a): FAILED cnn-b: {tensor} differs by 1.0e-02" in text
    assert f"phone {PIXEL} (Google Pixel 7, Android 14, arm64-v8a): passed 3 of 3" in text
    # Whether each can measure energy: the galaxy runs on battery; the pixel charges over its USB cable.
    assert f"phone {GALAXY}: can it measure energy? yes: on battery, with a charge counter" in text
    assert (
        f"phone {PIXEL}: can it measure energy? no: powered over USB, so it charges during tasks;"
        " run it on battery over wireless debugging (docs/phones.md, energy)"
    ) in text


@needs_jdk
def test_the_command_line_exits_non_zero_when_a_phone_fails(
    tmp_path: Path, jvm_built: None, zoo_set: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mjfl import cli
    from mjfl.commands import device_check

    bad, _ = corrupted(zoo_set, tmp_path / "bad", "lenet5")
    monkeypatch.setattr(device_check, "_golden", lambda models, console, extra=(): bad)  # the zoo's whole set takes minutes
    with FakeAdbServer([FakePhone.recorded("pixel7", PIXEL, installed=True)], on_selftest=jvm_app(tmp_path)) as server:
        monkeypatch.setattr("sys.argv", ["mjfl", "devices", "check", "--adb", server.address, "--models", ",".join(CASES)])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
    assert exit_.value.code == 2
    assert "1 of 1 phones failed the first-day check" in capsys.readouterr().err


# -- phones that never answer --------------------------------------------------------


def silent(lines: list[str]) -> Callable[[FakePhone, dict[str, str]], None]:
    """An app whose self-test writes ``lines`` (RUN and DIR filled in) and then nothing."""

    def start(phone: FakePhone, extras: dict[str, str]) -> None:
        phone.check_log += [line.replace("RUN", extras["run"]) for line in lines]

    return start


SHORT = Waits(start_s=0.3, quiet_s=0.3, poll_s=0.02)


def run_check(
    golden: Path, phone: FakePhone, on_selftest: Callable[[FakePhone, dict[str, str]], None] | None
) -> tuple[str, str]:
    """The check of one phone that fails; (its error, what it printed)."""
    out = console()
    with FakeAdbServer([phone], on_selftest=on_selftest) as server, pytest.raises(PhoneError) as failed:
        check_phones(PhoneOptions(adb=server.address), waits=SHORT, console=out, golden=golden)
    return str(failed.value), out.export_text()


def test_a_self_test_that_never_starts_is_a_timeout_naming_the_phone(zoo_set: Path) -> None:
    error, text = run_check(zoo_set, FakePhone.recorded("pixel7", PIXEL, installed=True), None)
    assert error.startswith("1 of 1 phones failed")
    assert f"phone {PIXEL}: the self-test did not start within 0 s (no line under MJFL-CHECK)" in text


def test_a_self_test_that_goes_quiet_says_where_it_stopped(zoo_set: Path) -> None:
    start = '{"event":"start","run":"RUN","cases":["lenet5","cnn-b","resnet13"],"tolerance":1e-4}'
    case = '{"event":"case","run":"RUN","case":"lenet5","pass":true,"max_rel_diff":0,"loss_rel_diff":0,"steps":6}'
    _, text = run_check(zoo_set, FakePhone.recorded("pixel7", PIXEL, installed=True), silent([start, case]))
    assert f"phone {PIXEL}: the self-test said nothing for 0 s while training cnn-b (1 of 3 cases done)" in text
    assert "--timeout-s" in text


def test_an_app_that_dies_in_the_self_test_is_told_apart(zoo_set: Path) -> None:
    start = '{"event":"start","run":"RUN","cases":["lenet5","cnn-b","resnet13"],"tolerance":1e-4}'

    def crash(phone: FakePhone, extras: dict[str, str]) -> None:
        silent([start])(phone, extras)
        phone.app_pid = None  # killed: out of memory, a native crash

    _, text = run_check(zoo_set, FakePhone.recorded("pixel7", PIXEL, installed=True), crash)
    assert f"phone {PIXEL}: the app stopped during the self-test while training lenet5 (0 of 3 cases done)" in text
    assert "logcat -d -s AndroidRuntime" in text


def test_an_app_without_the_self_test_or_a_busy_one_says_what_to_do(zoo_set: Path) -> None:
    old = FakePhone.recorded("pixel7", PIXEL, installed=True, has_selftest=False)
    _, text = run_check(zoo_set, old, None)
    assert f"phone {PIXEL}: the installed app has no self-test; install this build with --apk PATH" in text

    busy = silent(['{"event":"busy","run":"RUN","running":"0a1b2c3d"}'])
    _, text = run_check(zoo_set, FakePhone.recorded("pixel7", PIXEL, installed=True), busy)
    assert f"phone {PIXEL}: another self-test (run 0a1b2c3d) is still running on it" in text
    assert f"adb -s {PIXEL} shell am force-stop org.mjfl.app" in text


def test_a_phone_without_the_app_and_no_apk_cannot_be_checked(zoo_set: Path) -> None:
    _, text = run_check(zoo_set, FakePhone.recorded("pixel7", PIXEL), None)
    assert f"phone {PIXEL}: the mjfl app is not installed; give --apk PATH" in text

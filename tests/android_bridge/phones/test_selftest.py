"""The first-day check (`mjfl devices check`) against the stand-in adb server, with the app's self-test on the JVM.

No phone can be attached here, and the JVM has no ExecuTorch: each phone's app
is played by the app's own Java self-test (``android/app/bin/mjfl-selftest``,
``org.mjfl.app.selftest.SelfTestMain``) run on the files the check pushed, its
stdout becoming the phone's logcat lines, exactly as the app logs them. Its
runtime is ``FakeProgramLoader`` (softmax regression with PyTorch's SGD), so
the golden set here is of such cases, their expected weights computed below in
numpy; ``--runtime`` is the seam where a JVM double of ExecuTorch runs the
zoo's real set instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fake_adb import FakeAdbServer, FakePhone
from repository import ROOT
from rich.console import Console

from mjfl.android_bridge.devices.golden import write_case, write_manifest
from mjfl.android_bridge.phones.attached import PhoneOptions
from mjfl.android_bridge.phones.selftest import (
    REMOTE_ROOT,
    CaseCheck,
    SelfTestLines,
    Waits,
    installed_is,
    parse_lines,
)
from mjfl.android_bridge.protocol import messages as wire
from mjfl.commands.device_check import check_phones
from mjfl.errors import PhoneError
from mjfl.jobs.base import LocalTraining, TrainResult
from mjfl.jobs.randomness import TaskRandom

SELFTEST = ROOT / "android" / "app" / "bin" / "mjfl-selftest"
PIXEL, GALAXY = "28041FDH2004TQ", "R58R41ABCDE"
FAST = Waits(start_s=30, quiet_s=30, poll_s=0.05)
STATE = {"battery_pct": 87, "charging": True, "thermal_status": 1}

pytestmark = pytest.mark.timeout(180)
needs_jdk = pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")


# -- a golden set the JVM's runtime trains ---------------------------------------------


def softmax_sgd(
    weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, training: LocalTraining, seed: int
) -> TrainResult:
    """What FakeProgram trains (android/app/src/test/.../FakeProgram.java), in numpy: softmax regression,
    batches and order from the task generator, torch.optim.SGD (dampening 0, no Nesterov)."""
    w, b = weights["fc.weight"].copy(), weights["fc.bias"].copy()
    n, k = len(x), len(b)
    flat = x.reshape(n, -1).astype(np.float64)
    buffers: dict[str, np.ndarray] = {}
    loss_sum = 0.0
    random = TaskRandom(seed)
    steps = 0
    for epoch in range(training.epochs):
        order = random.permutation(epoch, n)
        for start in range(0, n, training.batch_size):
            idx = order[start : start + training.batch_size]
            xb, yb, m = flat[idx], y[idx], len(idx)
            z = xb @ w.T.astype(np.float64) + b
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
            loss_sum += float(np.float32(-np.log(p[np.arange(m), yb]).mean())) * m
            g = (p - np.eye(k)[yb]) / m
            for key, param, grad in (("w", w, (g.T @ xb).astype(np.float32)), ("b", b, g.sum(0).astype(np.float32))):
                d = grad + np.float32(training.weight_decay) * param
                buffers[key] = d if key not in buffers else np.float32(training.momentum) * buffers[key] + d
                param -= np.float32(training.lr) * (buffers[key] if training.momentum else d)
            steps += 1
    return TrainResult({"fc.weight": w, "fc.bias": b}, n, training.epochs, steps, loss_sum / (n * training.epochs), 0.0)


def fake_program(sample: tuple[int, ...], classes: int, max_batch: int) -> bytes:
    """A program file FakeProgramLoader runs (a softmax regression)."""
    spec = {"sample_shape": list(sample), "classes": classes, "max_batch": max_batch, "planned_bytes": 3 << 20}
    return json.dumps({"fake_program": spec}).encode()


def golden(folder: Path, names: tuple[str, ...] = ("soft-a", "soft-b"), *, off: dict[str, float] | None = None) -> Path:
    """A set of softmax cases; ``off`` moves a case's expected fc.bias[0] by that much (bad weights)."""
    training = LocalTraining(epochs=2, batch_size=4, lr=0.5, momentum=0.9, weight_decay=1e-3)
    sample, classes = (2, 1, 2), 3
    for i, name in enumerate(names):
        rng = np.random.default_rng(10 + i)
        x = rng.random((10, *sample), dtype=np.float32)
        y = rng.integers(0, classes, 10)
        weights = {
            "fc.weight": (rng.random((classes, 4), dtype=np.float32) - 0.5).astype(np.float32),
            "fc.bias": np.zeros(classes, np.float32),
        }
        expected = softmax_sgd(weights, x, y, training, seed=7 + i)
        if off and name in off:
            expected.weights["fc.bias"][0] += off[name]
        write_case(
            folder / name, name=name, model=wire.ModelSpec("softmax", sample, classes),
            program=fake_program(sample, classes, 4), weights=weights, x=x, y=y, training=training,
            seed=7 + i, expected=expected,
        )  # fmt: skip
    write_manifest(folder, key=f"test-{folder.name}", cases=[{"name": n} for n in names], made_by={})
    return folder


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
        proc = subprocess.Popen([*args, "--state", json.dumps(state)], stdout=subprocess.PIPE, text=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                phone.check_log.append(line.rstrip("\n"))
            proc.wait()

        threading.Thread(target=pump, daemon=True).start()

    return start


@pytest.fixture(scope="module")
def jvm_built() -> None:
    """Builds the app and its tests once (the launcher would, inside the first check's wait)."""
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
def test_a_phone_that_trains_like_python_passes_and_a_second_check_neither_installs_nor_pushes(
    tmp_path: Path, jvm_built: None
) -> None:
    apk = tmp_path / "app-debug.apk"
    apk.write_bytes(b"the app")
    set_dir = golden(tmp_path / "set")
    out = console()
    with FakeAdbServer([FakePhone.recorded("pixel7", PIXEL)], on_selftest=jvm_app(tmp_path / "jvm")) as server:
        checks = check_phones(PhoneOptions(adb=server.address, apk=apk), waits=FAST, console=out, golden=set_dir)
        commands = server.commands(PIXEL)
        remote = f"{REMOTE_ROOT}/test-set"
        assert "shell:pm install -r -t /data/local/tmp/mjfl-app.apk" in commands
        pushed = {c.removeprefix("sync:SEND ").split(",")[0] for c in commands if c.startswith("sync:SEND ")}
        assert pushed >= {f"{remote}/soft-a/{f}" for f in ("program.pte", "provision.mjfl", "task.mjfl", "expected.mjfl")}
        assert f"{remote}/manifest.json" in pushed
        phone = server.phones[PIXEL]
        # The app reads the set as "others" of the shell's files: folders 755, files 644.
        assert phone.modes[remote] == phone.modes[f"{remote}/soft-a"] == phone.modes[REMOTE_ROOT] == 0o755
        assert phone.modes[f"{remote}/soft-a/task.mjfl"] == 0o644
        start = next(c for c in commands if "SelfTestActivity" in c)
        run = start.split("--es run ")[1].split()[0]
        assert start == f"shell:am start -n org.mjfl.app/.SelfTestActivity --es run {run} --es dir {remote}"
        assert any(c.startswith("shell:logcat -d -v raw MJFL-CHECK:V") for c in commands)

        check = checks[PIXEL]
        assert check.passed and check.installed and check.error is None
        assert [c.case for c in check.cases] == ["soft-a", "soft-b"]
        for c in check.cases:
            assert c.passed and c.max_rel_diff is not None and c.max_rel_diff < 1e-6, c  # numpy against Java
            assert c.steps == 6 and c.planned_mb == 3.0 and c.step_ms is not None
            assert c.state.battery == "87%, charging" and c.state.thermal == "light"
        text = out.export_text()
        assert "soft-a" in text and "pass" in text and "FAIL" not in text
        assert f"phone {PIXEL} (Google Pixel 7, Android 14" in text and "passed 2 of 2" in text
        assert "app installed first" in text and "1 phones passed the first-day check" in text

        # The same app and set again: nothing to install or push, a new run.
        before = len(server.commands(PIXEL))
        again = check_phones(PhoneOptions(adb=server.address, apk=apk), waits=FAST, console=console(), golden=set_dir)
        later = server.commands(PIXEL)[before:]
        assert not any(c.startswith(("sync:SEND", "shell:pm install", "shell:rm -rf")) for c in later), later
        assert again[PIXEL].passed and not again[PIXEL].installed


@needs_jdk
def test_bad_weights_fail_the_phone_naming_model_and_tensor_and_the_other_phone_still_passes(
    tmp_path: Path, jvm_built: None
) -> None:
    good, bad = golden(tmp_path / "good"), golden(tmp_path / "bad", off={"soft-b": 1e-2})
    phones = [FakePhone.recorded("pixel7", PIXEL, installed=True), FakePhone.recorded("galaxy-a52", GALAXY, installed=True)]
    out = console()
    app = jvm_app(tmp_path / "jvm")

    def selftest(phone: FakePhone, extras: dict[str, str]) -> None:
        if phone.serial == GALAXY:  # this phone's copy of soft-b expects weights the Python runtime did not train
            phone.files[f"{extras['dir']}/soft-b/expected.mjfl"] = (bad / "soft-b" / "expected.mjfl").read_bytes()
        app(phone, extras)

    with FakeAdbServer(phones, on_selftest=selftest) as server, pytest.raises(PhoneError) as failed:
        check_phones(PhoneOptions(adb=server.address), waits=FAST, console=out, golden=good)
    assert str(failed.value).startswith("1 of 2 phones failed the first-day check")
    text = out.export_text()
    assert f"phone {GALAXY} (samsung SM-A525F" in text and "FAILED soft-b: fc.bias differs by" in text
    assert f"phone {PIXEL} (Google Pixel 7" in text and "passed 2 of 2" in text


@needs_jdk
def test_the_command_line_exits_non_zero_when_a_phone_fails(
    tmp_path: Path, jvm_built: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mjfl import cli
    from mjfl.commands import device_check

    bad = golden(tmp_path / "bad", off={"soft-a": 1e-2})
    monkeypatch.setattr(device_check, "golden_set", lambda models, workers: bad)  # the zoo's takes minutes
    with FakeAdbServer([FakePhone.recorded("pixel7", PIXEL, installed=True)], on_selftest=jvm_app(tmp_path)) as server:
        monkeypatch.setattr("sys.argv", ["mjfl", "devices", "check", "--adb", server.address, "--models", "lenet5", "vgg6"])
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
    tmp_path: Path, phone: FakePhone, on_selftest: Callable[[FakePhone, dict[str, str]], None] | None
) -> tuple[str, str]:
    """The check of one phone that fails; (its error, what it printed)."""
    out = console()
    with FakeAdbServer([phone], on_selftest=on_selftest) as server, pytest.raises(PhoneError) as failed:
        check_phones(PhoneOptions(adb=server.address), waits=SHORT, console=out, golden=golden(tmp_path / "set"))
    return str(failed.value), out.export_text()


def test_a_self_test_that_never_starts_is_a_timeout_naming_the_phone(tmp_path: Path) -> None:
    error, text = run_check(tmp_path, FakePhone.recorded("pixel7", PIXEL, installed=True), None)
    assert error.startswith("1 of 1 phones failed")
    assert f"phone {PIXEL}: the self-test did not start within 0 s (no line under MJFL-CHECK)" in text


def test_a_self_test_that_goes_quiet_says_where_it_stopped(tmp_path: Path) -> None:
    start = '{"event":"start","run":"RUN","cases":["soft-a","soft-b"],"tolerance":1e-4}'
    case = '{"event":"case","run":"RUN","case":"soft-a","pass":true,"max_rel_diff":0,"loss_rel_diff":0,"steps":6}'
    _, text = run_check(tmp_path, FakePhone.recorded("pixel7", PIXEL, installed=True), silent([start, case]))
    assert f"phone {PIXEL}: the self-test said nothing for 0 s while training soft-b (1 of 2 cases done)" in text
    assert "--timeout" in text


def test_an_app_that_dies_in_the_self_test_is_told_apart(tmp_path: Path) -> None:
    start = '{"event":"start","run":"RUN","cases":["soft-a","soft-b"],"tolerance":1e-4}'

    def crash(phone: FakePhone, extras: dict[str, str]) -> None:
        silent([start])(phone, extras)
        phone.app_pid = None  # killed: out of memory, a native crash

    _, text = run_check(tmp_path, FakePhone.recorded("pixel7", PIXEL, installed=True), crash)
    assert f"phone {PIXEL}: the app stopped during the self-test while training soft-a (0 of 2 cases done)" in text
    assert "logcat -d -s AndroidRuntime" in text


def test_an_app_without_the_self_test_or_a_busy_one_says_what_to_do(tmp_path: Path) -> None:
    old = FakePhone.recorded("pixel7", PIXEL, installed=True, has_selftest=False)
    _, text = run_check(tmp_path / "old", old, None)
    assert f"phone {PIXEL}: the installed app has no self-test; install this build with --apk PATH" in text

    busy = silent(['{"event":"busy","run":"RUN","running":"0a1b2c3d"}'])
    _, text = run_check(tmp_path / "busy", FakePhone.recorded("pixel7", PIXEL, installed=True), busy)
    assert f"phone {PIXEL}: another self-test (run 0a1b2c3d) is still running on it" in text
    assert f"adb -s {PIXEL} shell am force-stop org.mjfl.app" in text


def test_a_phone_without_the_app_and_no_apk_cannot_be_checked(tmp_path: Path) -> None:
    _, text = run_check(tmp_path, FakePhone.recorded("pixel7", PIXEL), None)
    assert f"phone {PIXEL}: the mjfl app is not installed; give --apk PATH" in text

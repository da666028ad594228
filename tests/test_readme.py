"""README.md's commands, read from the README itself, run here as written, so docs and code cannot drift.

Every line of the README's ``sh`` blocks is a case, in the README's order,
run by bash in one scratch folder that looks like a clone: ``examples/``,
``android/`` and ``.venv/`` (the interpreter running these tests) are there,
so ``.venv/bin/mjfl ...`` and ``runs/...`` resolve as they do for a new user.
Each command must exit 0 and write what the README says it writes
(``written``). What this test decides, and why (``way``):

- The example configurations are copies whose jobs stop after 2 rounds
  (``max_rounds``), and the study files keep their first variant and one
  seed: as written, the README's runs and studies take most of an hour on
  2 cores (the suite alone about 11 minutes, the digits study 30-40). The
  real files are checked instead: every configuration parses, and every
  variant of every study resolves to a configuration that parses
  (``test_the_example_files_the_readme_names_are_valid``).
- ``--phones``: a phone cannot exist here. The testbed run takes four
  emulated devices (``--emulate 4``) in their place, the lab's fewest; the
  profiling session is checked to parse (a session takes minutes, and the
  README's own ``mjfl profile ... --emulate 5`` runs one, with 3 rounds, the
  fewest a fit takes, instead of its 10).
- The JVM devices (``android/client-core/bin/mjfl-device``, as written)
  join the coordinator of the lab run before them, on the README's port
  8765; without a JDK that case is skipped.
- The benchmarks run with their README flags and smaller sizes
  (``SMALLER``): as written each takes one to several minutes.
  ``bench faults`` SIGKILLs coordinators for minutes, ``bench serve`` runs
  labs and testbed runs for about 25 minutes (tests/bench runs it smallest),
  ``bench soak`` a lab for an hour (tests/bench runs a 5-minute slice),
  and ``bench gpu`` needs a GPU: they are checked to parse (the README's
  flags and ``--help``), as
  are ``mjfl devices list/prepare/check``, which need phones over adb.
  tests/bench and tests/coordinator/remote/test_faults.py run each bench.
- The lab service (``mjfl serve``) runs until drained, and the researchers'
  commands (``submit``, ``runs``, ``log``, ``cancel``, ``pull``, ``lab``)
  need it running: checked to parse. tests/coordinator/lab run them against
  a real ``mjfl serve``.
- ``make demo`` and ``make test`` are not mjfl commands (``make test`` runs
  this test; ``make demo`` is the README's testbed run with ``--out``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from repository import EXAMPLES, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

README = ROOT / "README.md"
MJFL = ".venv/bin/mjfl"
JVM = "android/client-core/bin/mjfl-device"

# Benchmarks as written take minutes: the same command with these sizes (a README value replaced, else appended).
SMALLER: dict[str, dict[str, str]] = {
    "schedulers": {"--rounds": "2"},
    "trainers": {"--models": "lenet5", "--steps": "2", "--batch": "4", "--devices-per-step": "2"},
    "coordinator": {"--devices": "4", "--rounds": "1", "--round-s": "0.5", "--broadcast-mb": "1",
                    "--broadcast-devices": "2", "--connections": "20", "--heartbeat-s": "0.5", "--hold-s": "2",
                    "--workers": "1"},
    "dashboard": {"--devices": "60", "--jobs": "2", "--rounds": "5", "--per-round": "12", "--loads": "1"},
    "fuzz": {"--inputs": "2000"},
    "scale": {"--fleet-sizes": "3", "--rounds": "1", "--backends": "local"},
    "programs": {"--models": "lenet5"},
}
# What cannot run here, by its words after `mjfl`: checked to parse.
PARSES: dict[str, str] = {
    "devices list": "needs phones attached over adb",
    "devices prepare": "needs phones attached over adb",
    "devices check": "needs phones attached over adb",
    "bench gpu": "needs a GPU (without one it refuses, unless --cpu: hours at full size)",
    "bench faults": "SIGKILLs coordinators for minutes; tests/coordinator/remote/test_faults.py runs its scenarios",
    "bench serve": "labs and testbed runs for about 25 minutes; tests/bench/test_bench_serve.py runs it at its smallest",
    "bench soak": "a lab for an hour; tests/bench/test_bench_soak.py runs a 5-minute slice",
    # The lab service runs until drained; the researchers' commands need it running. tests/coordinator/lab run both
    # against a real `mjfl serve` (docs/lab.md's commands included).
    "serve": "runs until drained or stopped",
    "submit": "needs a running lab",
    "runs": "needs a running lab",
    "log": "needs a running lab",
    "cancel": "needs a running lab",
    "pull": "needs a running lab",
    "lab": "needs a running lab",
}


@dataclass(frozen=True)
class Way:
    """How one README line runs here: ``line`` by bash (``parse``: only its mjfl words, with --help)."""

    line: str
    parse: str = ""  # why only parsed
    note: str = ""  # what changed from the README's line, and why


def readme_lines() -> list[str]:
    """Every command line of the README's ``sh`` blocks, in order, without its trailing comment."""
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            command = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
            if command:
                lines.append(command)
    return lines


def words(line: str) -> list[str]:
    """The words after ``.venv/bin/mjfl`` (of the loop's body, for a ``for`` line)."""
    body = re.sub(r"^for \w+ in [^;]+; do (.*); done$", r"\1", line)
    argv = shlex.split(body)
    return argv[1:] if argv and argv[0] == MJFL else []


def way(line: str) -> Way:
    """How ``line`` runs here (the module docstring says why)."""
    argv = words(line)
    command = " ".join(argv[:2])
    if argv[:1] == ["bench"] and command not in PARSES:
        assert argv[1] in SMALLER, f"a README benchmark this test does not size (SMALLER): {line}"
        return Way(smaller(line, SMALLER[argv[1]]), note="smaller sizes (SMALLER)")
    for words_of in (command, " ".join(argv[:1])):  # two words (devices list) or one (serve)
        if words_of in PARSES:
            return Way(line, parse=PARSES[words_of])
    if "--phones" in argv and argv[0] == "profile":
        return Way(line, parse="phones; the README's profile with --emulate runs a session")
    if argv[:1] == ["profile"] and argv[1:2] != ["show"]:
        # The fewest rounds a fit takes: the README's 10 take two minutes of the suite.
        return Way(smaller(line, {"--rounds": "3"}), note="3 rounds instead (the fewest a fit takes)")
    if "--phones" in argv:
        return Way(line.replace("--phones", "--emulate 4"), note="--phones: four emulated devices instead")
    return Way(line)


def smaller(line: str, sizes: dict[str, str]) -> str:
    """``line`` with each flag of ``sizes`` given its value: the README's replaced, or added."""
    argv = shlex.split(line)
    for flag, value in sizes.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return shlex.join(argv)


def written(line: str, scratch: Path) -> list[Path]:
    """The files the README says the line's command writes."""
    loop = re.match(r"^for (\w+) in ([^;]+); do (.*); done$", line)
    if loop:
        name, values, body = loop.groups()
        return [p for v in values.split() for p in written(body.replace(f"${name}", v), scratch)]
    argv = words(line)
    options = {a: b for a, b in itertools.pairwise(argv) if a.startswith("--")}
    files = []
    if "--json" in options:
        files.append(Path(options["--json"]))
        if argv[:2] == ["bench", "trainers"]:  # "and its log beside the JSON (runs/bench/trainers.log)"
            files.append(Path(options["--json"]).with_suffix(".log"))
    if argv[0] in ("simulate", "testbed"):
        config = argv[1] if argv[0] == "simulate" else argv[2]
        out = Path(options.get("--out") or out_dir(scratch / config))
        files += [out / "summary.json", out / "rounds.csv", out / "mjfl.db"]
    if argv[0] == "profile" and argv[1] == "show":
        files.append(Path(argv[2]).parent / "plots")
    elif argv[0] == "profile":
        files.append(Path(options.get("--out") or Path(out_dir(scratch / argv[1])) / "profile") / "profiles.json")
    if argv[0] == "study":
        files.append(Path(options["--out"]) / "study.json")
    if argv[0] == "export":
        files.append(Path(options["--out"]))
    if "--plots" in options:
        files.append(Path(options["--plots"]))
    return files


def out_dir(config: Path) -> str:
    """A configuration's ``out_dir``."""
    import tomllib

    return str(tomllib.loads(config.read_text(encoding="utf-8"))["out_dir"])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder like a clone: .venv, android and the program cache linked; examples made small (module docstring)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / ".venv").symlink_to(Path(sys.prefix))
    (folder / "android").symlink_to(ROOT / "android")
    (ROOT / ".mjfl-cache").mkdir(exist_ok=True)
    (folder / ".mjfl-cache").symlink_to(ROOT / ".mjfl-cache")  # the suite's program cache: exported once
    for source in EXAMPLES.rglob("*.py"):  # a config's own model (examples/custom)
        copy = folder / "examples" / source.relative_to(EXAMPLES)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, copy)
    for source in EXAMPLES.rglob("*.toml"):
        copy = folder / "examples" / source.relative_to(EXAMPLES)
        copy.parent.mkdir(parents=True, exist_ok=True)
        text = re.sub(r"^max_rounds = \d+", "max_rounds = 2", source.read_text(encoding="utf-8"), flags=re.MULTILINE)
        if "[[variants]]" in text:
            head, first, *_ = text.split("[[variants]]")
            text = re.sub(r"^seeds = \d+", "seeds = 1", head, flags=re.MULTILINE) + "[[variants]]" + first
        copy.write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def jvm() -> dict[str, object]:
    """What happened to the README's JVM devices (run with the lab run before them)."""
    return {}


def run(line: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``line`` by bash in ``cwd``; -e: a loop stops at its first failing command."""
    return subprocess.run(
        ["bash", "-ec", line], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        check=False,
    )


LINES = readme_lines()


@pytest.mark.parametrize("line", LINES, ids=[" ".join(shlex.split(line)[:4])[:60] for line in LINES])
def test_a_readme_command_runs_here_and_writes_what_the_readme_says(
    line: str, scratch: Path, jvm: dict[str, object]
) -> None:
    if line.startswith("make "):
        pytest.skip("a make target, not an mjfl command (make test runs this test)")
    if line.startswith(JVM):
        if "result" not in jvm:
            pytest.skip(str(jvm.get("skipped", "the JVM devices join the lab run above; it did not run")))
        done = jvm["result"]
        assert isinstance(done, subprocess.CompletedProcess) and done.returncode == 0, done
        return
    assert line.startswith((MJFL, "for ")), f"a README command this test does not know: {line}"
    how = way(line)
    if how.parse:
        help_of(words(how.line))
        return
    jvm_line = next((other for other in LINES if other.startswith(JVM)), None)
    with the_default_ports():
        if "--phones" in line and words(line)[:2] == ["testbed", "run"] and jvm_line is not None:
            done = with_jvm_devices(how.line, jvm_line, scratch, jvm)
        else:
            done = run(how.line, scratch)
    assert done.returncode == 0, f"{how.line} ({how.note or 'as written'}):\n{done.stderr[-4000:]}"
    missing = [str(p) for p in written(line, scratch) if not (scratch / p).exists()]
    assert not missing, f"{how.line} wrote none of {missing}:\n{done.stderr[-2000:]}"
    for path in written(line, scratch):
        if path.suffix == ".json":
            json.loads((scratch / path).read_text(encoding="utf-8"))


@contextlib.contextmanager
def the_default_ports() -> Iterator[None]:
    """The README's commands listen on mjfl's default ports (8765, 8780), as written: one suite at a time.

    Two ``make test`` runs side by side on one machine (two clones) would each start the README's
    testbed run on port 8765, and the second would find it in use. Every suite on the machine
    takes this lock file's lock around a README command, so they take turns; the lock goes with
    its process if that dies.
    """
    with open(Path(tempfile.gettempdir()) / "mjfl-readme-default-ports.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def help_of(argv: list[str]) -> None:
    """The README's words of a command that cannot run here are its command line's (with --help: nothing runs)."""
    from typer.testing import CliRunner

    from mjfl.cli import app

    result = CliRunner().invoke(app, [*argv, "--help"])
    assert result.exit_code == 0, (argv, result.output, result.exception)


def with_jvm_devices(line: str, jvm_line: str, scratch: Path, jvm: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """Run ``line`` (a testbed run) with the README's JVM devices joining it, as docs/phones.md runs them."""
    if shutil.which("javac") is None:
        jvm["skipped"] = "needs a JDK: make setup installs one"
        return run(line, scratch)
    built = run("android/build-jvm.sh --no-test", scratch)  # what the launcher does first, done before the run
    assert built.returncode == 0, built.stderr
    devices = subprocess.Popen(
        ["bash", "-ec", jvm_line], cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        # The devices try to connect with backoff until the coordinator listens, so they start first.
        done = run(line, scratch)
        out, _ = devices.communicate(timeout=120)  # the coordinator's bye ends them
        jvm["result"] = subprocess.CompletedProcess(devices.args, devices.returncode, out, "")
        return done
    finally:
        if devices.poll() is None:
            os.killpg(devices.pid, 9)
            devices.wait()


def configs() -> Iterator[Path]:
    """The run configurations among the examples (studies have variants; a lab's service has [api])."""
    for path in sorted(EXAMPLES.rglob("*.toml")):
        text = path.read_text(encoding="utf-8")
        if "[[variants]]" not in text and not lab_service(text):
            yield path


def lab_service(text: str) -> bool:
    return "\n[api]" in text and "[[jobs]]" not in text


def test_the_example_files_the_readme_names_are_valid() -> None:
    """The full-size examples the README's commands read (run small above): every config and study variant parses."""
    from mjfl.coordinator.config import load_config, parse_config, read_toml
    from mjfl.coordinator.lab.config import load_lab_config
    from mjfl.coordinator.run.study import apply, load_study

    named = {Path(word) for line in LINES for word in words(line) if word.startswith("examples/")}
    assert named and all((ROOT / path).is_file() for path in named), named
    for path in configs():
        load_config(path)
    services = [p for p in EXAMPLES.rglob("*.toml") if lab_service(p.read_text(encoding="utf-8"))]
    assert services, "the lab service's example is missing"
    for path in services:
        load_lab_config(path)
    studies = [p for p in EXAMPLES.rglob("*.toml") if "[[variants]]" in p.read_text(encoding="utf-8")]
    for path in studies:
        study = load_study(path)
        for variant in study.variants:
            parse_config(apply(read_toml(variant.config), variant.overrides), base=variant.config.parent,
                         source=variant.config)

"""The set-up path as a new user walks it: a real `mjfl` process, one clear line per mistake."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from repository import EXAMPLES

CONFIG = """
seed = 0
out_dir = "{out}"
[fleet]
size = 2
[testbed]
port = 0
wait_timeout_s = 5
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
max_rounds = 1
"""


def mjfl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mjfl.cli", *args], check=False, capture_output=True, text=True, cwd=cwd, timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(out=tmp_path / "out"))
    return path


def assert_one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


def test_a_port_in_use_is_named_with_what_to_do(config: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = mjfl("testbed", "run", str(config), "--port", str(port), "--no-live", cwd=tmp_path)
    # The setting the server was given, and the flag this command sets it with.
    assert_one_error_line(result, f"127.0.0.1:{port}", "in use", "config field 'testbed.port' (or --port)")
    # Nothing was recorded for a run that never started.
    assert "no run" not in result.stderr


def test_a_labs_port_in_use_names_its_setting_and_no_flag_serve_lacks(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        lab = tmp_path / "LAB.toml"
        lab.write_text(f'out_dir = "{tmp_path / "lab"}"\n[fleet]\nsize = 1\n[server]\nport = {port}\n[api]\nport = 0\n')
        result = mjfl("serve", str(lab), cwd=tmp_path)
    line = assert_one_error_line(result, f"127.0.0.1:{port}", "in use", "config field 'server.port':")
    assert "--port" not in line  # mjfl serve has none: LAB.toml's [server] port is the one way


def test_out_naming_a_file_is_a_clear_error_not_a_traceback(config: Path, tmp_path: Path) -> None:
    in_the_way = tmp_path / "results"
    in_the_way.write_text("not a folder")
    for command in (["simulate", str(config), "--methods", "random"], ["testbed", "run", str(config)]):
        result = mjfl(*command, "--out", str(in_the_way), "--no-live", cwd=tmp_path)
        assert_one_error_line(result, "out_dir", "(or --out)", str(in_the_way), "file")
    assert in_the_way.read_text() == "not a folder"


def test_no_device_in_time_ends_the_run_with_one_line(config: Path, tmp_path: Path) -> None:
    result = mjfl("testbed", "run", str(config), "--no-live", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "only 0 of 2 devices connected within 5 s" in line and "--emulate N" in line


def test_a_waiting_coordinator_says_where_devices_connect_and_how_many_it_waits_for(config: Path, tmp_path: Path) -> None:
    result = mjfl("testbed", "run", str(config), "--host", "0.0.0.0", "--no-live", "--no-dashboard", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("waiting")]
    port = line.split("ws://127.0.0.1:")[1].split(",")[0]
    # Listening on every address, it names this machine's address for devices elsewhere too.
    assert line.startswith("waiting up to 5 s for 2 devices: devices on this machine connect to ws://127.0.0.1:")
    assert f":{port} (this machine's address on its network" in line and line.count("ws://") == 2, line


def test_enrolment_says_that_runs_now_admit_only_enrolled_devices_and_the_run_says_so(
    config: Path, tmp_path: Path
) -> None:
    enrolled = mjfl("devices", "enroll", "pixel-7", cwd=tmp_path)  # the user's key store (conftest: a fresh one)
    assert enrolled.returncode == 0, enrolled.stderr
    assert (
        "from now on, every mjfl testbed run and mjfl profile of this user uses this key store and admits only"
        " the devices enrolled in it (1 now)" in " ".join(enrolled.stderr.split())
    ), enrolled.stderr
    result = mjfl("testbed", "run", str(config), "--no-live", "--no-dashboard", cwd=tmp_path)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("admitting only")]
    store = Path(os.environ["XDG_CONFIG_HOME"]) / "mjfl" / "devices.db"
    assert line.startswith(f"admitting only the devices enrolled in {store} (1; mjfl devices keys)"), line
    # A store of its own (--keys) decides only for the runs that name it.
    other = mjfl("devices", "enroll", "pixel-8", "--keys", str(tmp_path / "lab.db"), cwd=tmp_path)
    assert f"a run whose testbed.keys (or --keys) is {tmp_path / 'lab.db'} uses this key store" in other.stderr


# -- the command line's syntax: one meaning and one spelling per flag ------------------------


def parse_error(*args: str) -> str:
    """The one-line error of a command line that mjfl refuses before running anything."""
    from typer.testing import CliRunner

    from mjfl.cli import app
    from mjfl.errors import UserError

    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, UserError), (args, result.output)
    return str(result.exception)


@pytest.mark.parametrize(("args", "new"), [
    (["bench", "schedulers", "--devices", "100", "1000"], "--fleet-sizes 100,1000"),
    (["bench", "scale", "--devices=20"], "--fleet-sizes 20,100,500"),
    (["bench", "trainers", "--devices", "1,8"], "--devices-per-step"),
    (["bench", "gpu", "--devices", "8"], "--devices-per-step"),
    (["profile", "--devices", "a", "b", "run.toml"], "--device-ids"),
    (["profile", "run.toml", "--devices", "a"], "--device-ids"),
    (["certs", "create", "out", "--host", "lab.example"], "--dns-names"),
    (["certs", "create", "out", "--ip", "10.0.0.5", "--ip", "10.0.0.6"], "--ip-addresses"),
    (["profile-show", "runs/profile/profiles.json"], "mjfl profile show"),
    (["devices", "check", "--timeout", "600"], "--timeout-s"),
])
def test_an_old_spelling_is_refused_with_the_new_one(args: list[str], new: str) -> None:
    assert f" now {new}" in parse_error(*args)


@pytest.mark.parametrize("args", [
    ["devices", "check", "--models", "lenet5", "vgg6"],
    ["devices", "golden", "out", "--models", "lenet5", "vgg6"],
    ["bench", "schedulers", "--fleet-sizes", "100", "1000"],
    ["simulate", "run.toml", "--methods", "random", "fedcs"],
])
def test_a_list_given_with_spaces_names_the_option_and_its_comma_list(args: list[str]) -> None:
    flag = args[args.index("--models" if "--models" in args else "--fleet-sizes" if "--fleet-sizes" in args else "--methods")]
    error = parse_error(*args)
    assert error.startswith(f"{flag} takes one comma-separated list, e.g. {flag} ") and "left over" in error


def test_a_list_given_twice_or_not_a_list_of_numbers_is_an_error_naming_it() -> None:
    twice = parse_error("devices", "check", "--models", "lenet5", "--models", "vgg6")
    assert twice.startswith("--models is given 2 times: give one comma-separated list")
    assert parse_error("bench", "schedulers", "--fleet-sizes", "100;1000").startswith("--fleet-sizes '100;1000'")
    assert parse_error("export", "lenet5", "--out", "x.pte", "--input-shape", "1,x,8").startswith("--input-shape")
    # A count is still a count where --devices remains (one value, never a list).
    assert parse_error("bench", "coordinator", "--devices", "10", "20") == "unexpected argument(s): 20"


@pytest.mark.parametrize(("args", "error"), [
    (["certs", "create", "{tmp}/certs", "--days", "0"], "--days: must be >= 1, got 0"),
    (["certs", "create", "{tmp}/certs", "--ip-addresses", "10.0.0.5,lab"], "--ip-addresses: 'lab' does not appear to be"),
    (["devices", "emulate", "--url", "ws://127.0.0.1:9", "--count", "0"], "--count: must be >= 1, got 0"),
    (["devices", "emulate", "--url", "ws://127.0.0.1:9", "--runtime", "jax"], "--runtime: must be executorch, torch or"),
    (["study", str(EXAMPLES / "study-digits.toml"), "--out", "{tmp}/study", "--first-seed", "-1"], "--first-seed: must be >= 0"),
    (["study", str(EXAMPLES / "study-digits.toml"), "--out", "{tmp}/study", "--methods", "fedcs"], "--methods: choose among"),
])
def test_an_error_below_the_command_layer_names_its_setting_and_the_command_its_flag(
    args: list[str], error: str, tmp_path: Path
) -> None:
    assert parse_error(*(arg.format(tmp=tmp_path) for arg in args)).startswith(error)


def test_comma_lists_parse_alike_in_every_command() -> None:
    from mjfl.cli.syntax import comma_list

    assert comma_list("--fleet-sizes", "100, 1000", int) == [100, 1000]
    assert comma_list("--models", "lenet5,vgg6,") == ["lenet5", "vgg6"]
    assert comma_list("--devices-per-step", "", int) == []


def test_profile_runs_a_session_by_default_and_shows_a_file_as_its_sub_command(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from mjfl.cli import app
    from mjfl.commands import profile

    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(profile, "profile_run", lambda run_config, output, **kw: calls.append(("run", kw)))
    monkeypatch.setattr(profile, "show", lambda path, **kw: calls.append(("show", path)) or [])
    lines = {
        ("profile", str(config), "--emulate", "2", "--no-dashboard"): ("run", {"emulate": 2, "devices": []}),
        ("profile", "--emulate", "2", str(config), "--no-dashboard"): ("run", {"emulate": 2, "devices": []}),
        ("profile", "--device-ids", "a,b", str(config), "--no-dashboard"): ("run", {"emulate": 0, "devices": ["a", "b"]}),
        ("profile", "run", str(config), "--no-dashboard"): ("run", {"emulate": 0, "devices": []}),
        ("profile", "show", "p.json"): ("show", Path("p.json")),
    }
    for args, (command, seen) in lines.items():
        calls.clear()
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, (args, result.output, result.exception)
        ((called, given),) = calls
        assert called == command, args
        if command == "run":
            given = {k: given[k] for k in seen}  # type: ignore[index]
        assert given == seen, args
    text = " ".join(CliRunner().invoke(app, ["profile", "--help"]).output.split())
    assert "`mjfl profile [CONFIG] [OPTIONS]` is short for `mjfl profile run [CONFIG] [OPTIONS]`" in text


BLAS_THREADS = """
import sys
from mjfl.cli import main
sys.argv = ["mjfl", "--help"]
try:
    main()
except SystemExit:
    pass
import numpy, threadpoolctl  # as a command imports it: after the entry point
import torch
print(sorted({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}), torch.get_num_threads())
"""


@pytest.mark.parametrize(("given", "threads"), [(None, "[1]"), ("2", "[2]")])
def test_mjfl_runs_numpys_blas_on_one_thread_unless_the_user_says(given: str | None, threads: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run(
        [sys.executable, "-c", BLAS_THREADS], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=True,
    )
    blas, torch_threads = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert blas == threads
    alone = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )
    assert torch_threads == alone.stdout.strip()  # torch keeps its own default

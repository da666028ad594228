"""The set-up path as a new user walks it: a real `mjfl` process, one clear line per mistake."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert_one_error_line(result, f"127.0.0.1:{port}", "in use", "--port")
    # Nothing was recorded for a run that never started.
    assert "no run" not in result.stderr


def test_out_naming_a_file_is_a_clear_error_not_a_traceback(config: Path, tmp_path: Path) -> None:
    in_the_way = tmp_path / "results"
    in_the_way.write_text("not a folder")
    for command in (["simulate", str(config), "--methods", "random"], ["testbed", "run", str(config)]):
        result = mjfl(*command, "--out", str(in_the_way), "--no-live", cwd=tmp_path)
        assert_one_error_line(result, f"--out {in_the_way}", "file")
    assert in_the_way.read_text() == "not a folder"


def test_no_device_in_time_ends_the_run_with_one_line(config: Path, tmp_path: Path) -> None:
    result = mjfl("testbed", "run", str(config), "--no-live", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "only 0 of 2 devices connected within 5 s" in line and "--emulate N" in line

"""`mjfl dashboard RUN_DIR...`: prints the address to open, serves the runs, ends cleanly on Ctrl-C."""

import json
import re
import signal
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from processes import Process, mjfl_args
from run_records import record_run


def test_the_dashboard_serves_its_folders_until_ctrl_c(tmp_path: Path, processes: Callable[..., Process]) -> None:
    record_run(tmp_path / "seed0", "random", 0, [2.0, 4.0], [0.5, 0.85])
    dashboard = processes(mjfl_args("dashboard", str(tmp_path / "seed0"), "--port", "0"), read=True)
    line = dashboard.line_with("mjfl dashboard: open", timeout=60)
    url = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert url is not None, line
    with urllib.request.urlopen(url.group(0) + "api/runs", timeout=10) as response:
        assert [run["run_id"] for run in json.load(response)] == ["random-0-2"]
    dashboard.proc.send_signal(signal.SIGINT)
    assert dashboard.wait(timeout=20) == 0
    assert "dashboard stopped" in "".join(dashboard.output)
    assert "Traceback" not in "".join(dashboard.output)


def test_a_cancelled_runs_pulled_folder_is_served_labelled_interrupted(
    tmp_path: Path, processes: Callable[..., Process],
) -> None:
    record_run(tmp_path / "pulled", "meta-greedy", 0, [2.0, 4.0], [0.5, 0.6], finished=False)  # as a lab's cancel leaves it
    dashboard = processes(mjfl_args("dashboard", str(tmp_path / "pulled"), "--port", "0"), read=True)
    url = re.search(r"http://127\.0\.0\.1:\d+/", dashboard.line_with("mjfl dashboard: open", timeout=60))
    assert url is not None
    with urllib.request.urlopen(url.group(0) + "api/runs", timeout=10) as response:
        (run,) = json.load(response)
    assert (run["run_id"], run["status"]) == ("meta-greedy-0-2", "interrupted")
    with urllib.request.urlopen(url.group(0) + "api/runs/0%3Ameta-greedy-0-2", timeout=10) as response:
        assert [job["rounds"] for job in json.load(response)["jobs"]] == [2]
    dashboard.proc.send_signal(signal.SIGINT)
    assert dashboard.wait(timeout=20) == 0


def test_a_folder_without_a_run_database_is_named(tmp_path: Path) -> None:
    result = subprocess.run(mjfl_args("dashboard", str(tmp_path)), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"{tmp_path}: no run database" in result.stderr


def test_another_host_gets_a_token_in_the_printed_address(tmp_path: Path, processes: Callable[..., Process]) -> None:
    record_run(tmp_path / "seed0", "random", 0, [2.0], [0.9])
    dashboard = processes(mjfl_args("dashboard", str(tmp_path / "seed0"), "--host", "0.0.0.0", "--port", "0"), read=True)
    line = dashboard.line_with("mjfl dashboard: open", timeout=60)
    url = re.search(r"http://0\.0\.0\.0:(\d+)/\?token=(\S+)", line)
    assert url is not None, line
    base = f"http://127.0.0.1:{url.group(1)}/api/runs"
    try:
        urllib.request.urlopen(base, timeout=10)
        raise AssertionError("served without the token")
    except urllib.error.HTTPError as error:
        assert error.code == 401
    with urllib.request.urlopen(f"{base}?token={url.group(2)}", timeout=10) as response:
        assert response.status == 200
    dashboard.proc.send_signal(signal.SIGINT)
    assert dashboard.wait(timeout=20) == 0


def test_a_runs_live_dashboard_on_another_host_gets_a_token_made_for_it(tmp_path: Path) -> None:
    from mjfl import cli
    from mjfl.errors import UserError

    loopback = cli._output(tmp_path, dashboard_port=0)
    assert (loopback.dashboard_host, loopback.dashboard_token) == ("127.0.0.1", None)
    with cli.console.capture() as printed:
        lan = cli._output(tmp_path, dashboard_port=0, dashboard_host="0.0.0.0")
    assert lan.dashboard_host == "0.0.0.0" and lan.dashboard_token is not None and len(lan.dashboard_token) >= 40
    assert "--dashboard-host 0.0.0.0 is reachable from other machines" in printed.get()
    assert cli._output(tmp_path, dashboard_port=0, dashboard_host="0.0.0.0").dashboard_token != lan.dashboard_token
    assert cli._output(tmp_path, dashboard_port=None, dashboard_host="0.0.0.0").dashboard_token is None  # no dashboard
    with pytest.raises(UserError, match="--dashboard-port 70000"):
        cli._output(tmp_path, dashboard_port=70000)

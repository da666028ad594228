"""The page's script (static/app.js) in node, on a minimal DOM, drawing the server's real JSON.

No browser here: this checks that the script runs on the shapes the endpoints
send and draws what it should (rows, the chart's lines, sorting, the filter,
the comparison), not how it looks. Skipped where node is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dashboard_runs import aggregated, new_live, records, write_provenance

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.device_logs import device_log
from mjfl.coordinator.engine.events import DeviceLeft, RunStarted, TaskSent
from mjfl.ids import DeviceId, JobId

STATIC = Path(__file__).parents[3] / "mjfl" / "coordinator" / "dashboard" / "static"
NODE = shutil.which("node")


def draw(tmp_path: Path, api: dict[str, object]) -> dict[str, Any]:
    """What the page drew from ``api`` (path -> JSON; "live pushes": what the event stream sends)."""
    api_path = tmp_path / "api.json"
    api_path.write_text(json.dumps(api, allow_nan=False))
    assert NODE is not None
    result = subprocess.run(
        [NODE, str(Path(__file__).with_name("page_harness.js")), str(STATIC / "app.js"), str(STATIC / "index.html"), str(api_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_page_draws_runs_devices_choices_and_a_comparison(
    tmp_path: Path, folder: Path, run_writer: Callable[..., None]
) -> None:
    other = tmp_path / "big"
    run_writer(other, devices=1000)
    write_provenance(other)
    catalog = Catalog([other, folder])
    api: dict[str, object] = {"api/runs": catalog.runs()}
    for run in catalog.runs():
        api[f"api/runs/{run['id']}"] = catalog.run(run["id"])
        api[f"api/runs/{run['id']}/timeline?since=0"] = json.loads(catalog.timeline(run["id"]))
    (other / "mjfl.log").write_text("INFO device d1 connected\nWARNING closed device d1: heartbeat_timeout\n")
    api["api/runs/0:mg-0/devices/d1/log"] = device_log(other, "d1")
    api["api/runs/0:mg-0/rounds/cnn/2"] = catalog.round_devices("0:mg-0", "cnn", 2)
    page = draw(tmp_path, api)
    assert page["fetched"][0] == "api/runs" and page["runs"] == 3  # big's, and folder's finished and interrupted
    assert "api/live" not in page["fetched"]  # the page says there is no live run: nothing asks for one
    assert page["state_column_hidden"] is True  # no device of an ended run has a state to show
    assert page["title"].startswith("meta-greedy · mg-0")
    assert page["devices"] == 1000 and page["first_device"] == "d0"
    # What the run ran on, in its panel: the versions, both programs, the one device admitted with its app.
    assert page["provenance_hidden"] is False and page["provenance_rows"] == [2, 1]
    assert all(text in page["provenance_text"] for text in ("mjfl 0.1.0", "c" * 64, "Pixel 7", "f" * 64 + " (adb)"))
    # One accuracy line per job; cnn's NaN in round 3 draws nothing, so it has 2 points.
    assert len(page["paths"]) == 2
    assert page["paths"][0].count("L") == 1 and page["paths"][1].count("L") == 2
    assert page["target_lines"] == 2  # cnn's accuracy target, lenet's loss target
    # Each job's loss too: cnn's NaN loss in round 3 draws nothing either.
    assert len(page["loss_paths"]) == 2
    assert page["loss_paths"][0].count("L") == 1 and page["loss_paths"][1].count("L") == 2
    assert page["most_failed"] == "d1"  # sorted by failures, most first
    assert page["filtered"] == "111 of 1000"  # d1, d10-d19, d100-d199
    assert page["choices"] == 6
    # Every failure of d1 (6 rounds) and d2's refused update (round 2 of each job), oldest first; filtered by kind.
    assert page["events"] == 8 and page["rejected_events"] == ["d2", "d2"]
    # A click on a round (cnn's second): who was planned and what each answered.
    assert page["round_fetched"] == "api/runs/0%3Amg-0/rounds/cnn/2"
    assert page["round_title"] == "Round 2 of cnn (plan kept: genetic): 1000 planned"
    assert page["round_answers"] == ["used", "no answer", "update refused"]
    # A click on a device row (d1: the most failed, first after the sort) shows its log lines.
    assert page["log_fetched"] == "api/runs/0%3Amg-0/devices/d1/log" and page["log_title"] == "Log of d1"
    assert page["log_source"] == "the newest 2 lines of mjfl.log naming it"
    assert page["log_lines"] == "INFO device d1 connected\nWARNING closed device d1: heartbeat_timeout"
    assert page["compared_paths"] == 6  # three runs x two jobs
    assert "1000 devices drawn" in page["status"]
    # The opened run's timeline, fetched once apart from its view: every device round of it (two jobs x 3 rounds x 1000).
    assert page["timelines"][0] == {"how": "update", "bars": 6000, "jobs": ["cnn", "lenet"], "total": 6000}


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_live_run_is_listed_first_and_redrawn_from_each_push(tmp_path: Path, folder: Path) -> None:
    live = new_live()
    live(RunStarted("live-0", (JobId("cnn"), JobId("lenet")), tuple(DeviceId(f"d{k}") for k in range(4)), 0.0))
    live(TaskSent(JobId("cnn"), 1, DeviceId("d0"), 0.1))
    catalog = Catalog([folder])
    api: dict[str, object] = {"api/runs": catalog.runs(), "api/live": live.snapshot()}
    for run in catalog.runs():
        api[f"api/runs/{run['id']}"] = catalog.run(run["id"])
    pushes = []
    for record in records():
        live(aggregated(record))
    pushes.append(live.snapshot())
    live(DeviceLeft(DeviceId("d3"), "closed", 40.0))
    pushes.append(live.snapshot())
    api["live pushes"] = pushes
    api["api/live/timeline?since=0"] = live.timeline()
    page = draw(tmp_path, api)
    assert page["runs"] == 2 and page["live_row"] == "live"
    assert page["live_state_column_hidden"] is False
    assert page["live_source"] == "api/live/events?token=t0k"  # EventSource sends no header: the token rides in the query
    assert page["live_title"].startswith("live: meta-greedy · live-0")
    assert page["live_states"] == {"d0": "training cnn", "d1": "idle", "d2": "idle", "d3": "idle"}
    assert page["pushed_states"] == {"d0": "idle", "d1": "idle", "d2": "idle", "d3": "offline"}
    assert len(page["pushed_paths"]) == 2  # both jobs' accuracy lines, drawn from the pushed series
    assert "4 devices, 1 offline" in page["live_row_text"]
    # The live run's timeline: fetched when opened (its bars so far); a push with no new bar fetches nothing more.
    assert page["timelines"][-1] == {"how": "update", "bars": 24, "jobs": ["cnn", "lenet"], "total": 24}
    assert sum(path.startswith("api/live/timeline") for path in page["fetched"]) == 2  # opened at start, opened again

"""The dashboard's page in a real browser (Debian's headless Chromium, driven by Playwright).

A real `mjfl testbed run` (two jobs, two emulated devices, a third that
joins late from `mjfl devices emulate`) is followed live, its device
timeline growing, then `mjfl dashboard` serves the finished run and its
timeline from its output folder. Every check waits with Playwright
(``expect``, ``wait_for_function``) up to a generous bound, for two loaded
cores; screenshots of each moment go to ``$MJFL_SCREENSHOTS`` or a folder
of the test's own, which the test prints.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from processes import SMALL_TESTBED, Process, mjfl_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROUNDS = 10
WAIT_MS = 180_000  # every check's bound (the browser's own waits: conftest.BROWSER_WAIT_MS), for two loaded cores
OTHER_ROUNDS = 4  # the second job's: a few rounds more for the timeline to show two jobs' bars (a few seconds)
OFFLINE_MS = 15_000  # a killed device is shown offline within this
# The accuracy line's points: the M and L commands of its path (0 while there is none).
POINTS = """() => {
  const line = document.querySelector("#jobs svg.chart.accuracy path.line");
  return line === null ? 0 : (line.getAttribute("d").match(/[ML]/g) || []).length;
}"""
# The timeline's test hooks (timeline.js): how many bars it draws, and how many of each job.
BARS = "() => Number(document.getElementById('timeline').dataset.bars || 0)"
JOB_BARS = "() => JSON.parse(document.getElementById('timeline').dataset.jobs || '{}')"


@pytest.fixture
def screenshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Where the screenshots go: ``$MJFL_SCREENSHOTS``, else a folder of the test's; said on the terminal."""
    folder = Path(os.environ["MJFL_SCREENSHOTS"]) if os.environ.get("MJFL_SCREENSHOTS") else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\ndashboard screenshots: {folder}")
    return folder


def write_config(tmp_path: Path) -> Path:
    """SMALL_TESTBED, waiting for three devices (the run starts only once the late one is there), with a second job."""
    config = tmp_path / "browser.toml"
    text = SMALL_TESTBED.format(out=tmp_path / "run", rounds=ROUNDS)
    assert "min_devices = 2" in text and text.count("[[jobs]]") == 1
    job = text[text.index("[[jobs]]"):]
    other = job.replace('name = "lenet"', 'name = "lenet-b"').replace(f"max_rounds = {ROUNDS}", f"max_rounds = {OTHER_ROUNDS}")
    config.write_text(text.replace("min_devices = 2", "min_devices = 3") + other)
    return config


def bars_beyond(page: Any, count: int) -> int:
    """Wait until the timeline draws more than ``count`` bars; how many it draws then."""
    return int(page.wait_for_function(f"() => ({BARS})() > {count} && ({BARS})()").json_value())


def the_finished_timeline(page: Any, screenshots: Path) -> None:
    """The opened finished run's timeline: a bar per device round of both jobs; hovering the first shows its round."""
    from playwright.sync_api import expect

    bars_beyond(page, 0)
    jobs = page.evaluate(JOB_BARS)
    assert sorted(jobs) == ["lenet", "lenet-b"] and jobs["lenet"] >= ROUNDS and jobs["lenet-b"] >= OTHER_ROUNDS, jobs
    page.locator("#timeline").screenshot(path=screenshots / "timeline.png")
    page.locator("#timeline canvas").scroll_into_view_if_needed()
    where = page.evaluate("() => document.getElementById('timeline').mjflTimeline.centre(0)")  # the component's hook
    page.mouse.move(where["x"], where["y"])
    tip = page.locator("#timeline .timeline-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(re.compile(r"job lenet(-b)?, round 1"))
    expect(tip).to_contain_text(re.compile(r"(used|no answer|update refused)"))
    expect(tip).to_contain_text(" samples")  # its round's details, asked for when it was hovered


def points_beyond(page: Any, count: int) -> int:
    """Wait until the accuracy line has more than ``count`` points; how many it has then."""
    return int(page.wait_for_function(f"() => ({POINTS})() > {count} && ({POINTS})()").json_value())


def device_ids(page: Any) -> list[str]:
    return sorted(page.locator("#devices tbody tr td:first-child").all_inner_texts())


def test_the_page_follows_a_live_run_and_opens_it_when_finished(tmp_path, processes, browser, screenshots):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    coordinator: Process = processes(mjfl_args(
        "testbed", "run", str(write_config(tmp_path)), "--emulate", "2", "--no-live", "--dashboard-port", "0",
    ), read=True)
    live_url = coordinator.line_with("dashboard: ", 300).split("dashboard: ")[-1].strip()  # printed first
    url = coordinator.url()
    late = processes(mjfl_args(
        "devices", "emulate", "--url", url, "--count", "1", "--id-prefix", "late", "--workers", "1", "--seed", "5",
    ))
    page = browser.new_page()
    page.goto(live_url)

    # Live: the run's row, its three devices, and an accuracy line that grows.
    expect(page.locator('#runs tbody tr[data-id="live"]')).to_be_visible()
    expect(page.locator("#devices tbody tr")).to_have_count(3)
    ids = device_ids(page)
    assert [i.startswith("late-") for i in ids] == [False, False, True], ids
    points_beyond(page, points_beyond(page, 1))
    page.screenshot(path=screenshots / "live.png", full_page=True)
    # Its timeline grows in place as rounds end, with bars of both jobs.
    bars_beyond(page, bars_beyond(page, 0))
    page.wait_for_function(f"() => Object.keys(({JOB_BARS})()).sort().join() === 'lenet,lenet-b'")

    # The late device is killed: its row says offline within seconds, the others' do not.
    state = page.locator("#devices tbody tr").filter(has_text=ids[2]).locator("td").last
    expect(state).not_to_have_text("offline")
    late.kill()
    expect(state).to_have_text("offline", timeout=OFFLINE_MS)
    expect(state).to_have_class(re.compile(r"\boffline\b"))
    expect(page.locator("#devices tbody td.offline")).to_have_count(1)
    # The events list says it left; a click on its row shows its log lines (the run log's, naming it).
    expect(page.locator("#events tbody tr.left").filter(has_text=ids[2])).to_have_count(1)
    page.locator("#devices tbody tr").filter(has_text=ids[2]).click()
    expect(page.locator("#device-log-title")).to_have_text(f"Log of {ids[2]}")
    expect(page.locator("#device-log-lines")).to_contain_text(f"device {ids[2]} connected")
    page.screenshot(path=screenshots / "offline.png", full_page=True)
    assert coordinator.wait(300) == 0, "".join(coordinator.output)

    # Finished: `mjfl dashboard` serves it from the output folder; a click opens it.
    served = processes(mjfl_args("dashboard", str(tmp_path / "run"), "--port", "0"), read=True)
    finished_url = served.line_with("mjfl dashboard: open ").split(" open ")[-1].split()[0]
    page.goto(finished_url)
    row = page.locator('#runs tbody tr[data-id^="0:"]')
    expect(row).to_have_count(1)
    row.click()
    expect(row).to_have_class(re.compile(r"\bopen\b"))
    expect(page.locator("#devices tbody tr")).to_have_count(3)
    assert device_ids(page) == ids
    assert points_beyond(page, 0) == ROUNDS
    the_finished_timeline(page, screenshots)
    page.screenshot(path=screenshots / "finished.png", full_page=True)

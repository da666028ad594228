"""The lab's page of `mjfl serve` in a real browser (Debian's headless Chromium, driven by Playwright).

A real service with four emulated devices runs one run at a time
(``limits.max_running = 1``): Alice's run trains while Bob's waits in the
queue, saying why; cancelled, Alice's lets Bob's in, and the lab's timeline
(static/timeline.js, read through its test hooks) gets both runs' device rounds;
Bob's completes, and `mjfl dashboard` on its folder serves the same bars. About
40 s. Every check reads the
page's DOM and waits for it with Playwright (``expect``,
``wait_for_function``) up to a generous bound, for two loaded cores. With
``$MJFL_SCREENSHOTS`` naming a folder, the lab's page is saved there as
``lab.png`` (docs/dashboard.md's screenshot).
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from dashboard_runs import bars_of
from lab_service import Lab, run_config
from processes import mjfl_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DEVICES = 4
VIEW = "() => document.getElementById('lab-timeline').mjflTimeline.view()"  # the times the lab's timeline shows
WAIT_MS = 180_000  # every check's bound (the browser's own waits: conftest.BROWSER_WAIT_MS), for two loaded cores
BARS = "(more) => Number(document.getElementById('lab-timeline').dataset.bars || 0) > more"
HAS_RUN = "(run) => (document.getElementById('lab-timeline').dataset.jobs || '').includes(`\"${run}/`)"
# A round of Alice's run has ended: its row's progress names a round past 0 (rounds are counted when they end).
A_ROUND = """(run) => {
  const cell = document.querySelector(`#running tbody tr[data-run="${run}"] td.jobs`);
  return cell !== null && /round [1-9]/.test(cell.textContent);
}"""


def timeline_jobs(page: Any) -> dict[str, int]:
    """The lab timeline's bars per ``<run>/<job>``, as the component counts them (its data-jobs hook)."""
    return dict(json.loads(page.locator("#lab-timeline").get_attribute("data-jobs")))


def rows_of(page: Any, table: str) -> Any:
    return page.locator(f"#{table} tbody tr")


def test_the_lab_page_shows_devices_queue_and_running_runs_and_opens_a_run(tmp_path: Path, processes, browser) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    lab = Lab.start(processes, tmp_path, devices=DEVICES, max_running=1)
    alice, bob = lab.researcher("alice"), lab.researcher("bob")
    page = browser.new_page()
    page.goto(lab.url + "/")  # sent on to the lab's page
    expect(page).to_have_url(re.compile(r"/lab/$"))
    expect(rows_of(page, "lab-devices")).to_have_count(DEVICES)
    expect(page.locator("#lab-devices td.lobby")).to_have_count(DEVICES)

    # Unreachable targets: Alice's run trains until it is cancelled; Bob's waits for the one place.
    a = lab.submit(run_config(size=DEVICES, target=0.999, rounds=200), alice)["id"]
    b = lab.submit(run_config(size=DEVICES, seed=2), bob)["id"]  # reaches its target once it runs
    waiting = rows_of(page, "queue").filter(has_text=b)
    expect(waiting).to_contain_text("limits.max_running")
    expect(waiting.locator("td").first).to_have_text("1")  # its position
    expect(rows_of(page, "running").filter(has_text=a)).to_contain_text("alice")
    page.wait_for_function(A_ROUND, arg=a)
    page.wait_for_function(BARS, arg=0)
    assert {key.split("/")[0] for key in timeline_jobs(page)} == {a}
    bars = int(page.locator("#lab-timeline").get_attribute("data-bars"))
    expect(page.locator("#lab-devices td.busy").first).to_be_visible()
    expect(rows_of(page, "shares").filter(has_text="alice")).to_have_count(1)
    if os.environ.get("MJFL_SCREENSHOTS"):
        page.screenshot(path=Path(os.environ["MJFL_SCREENSHOTS"]) / "lab.png", full_page=True)

    # A click opens the run's page, as the run dashboard draws it: its jobs and its devices.
    rows_of(page, "running").filter(has_text=a).locator("td").nth(1).click()
    expect(page).to_have_url(re.compile(rf"/runs/#{a}$"))
    expect(page.locator("#run-title")).to_contain_text(a)
    expect(page.locator("#jobs h3")).to_have_count(2)
    expect(page.locator("#devices tbody tr")).to_have_count(DEVICES)
    # Still running, the run's page reads it again: its scheduler's choices gain the rounds that end.
    page.wait_for_function(f"() => document.querySelectorAll('#choices tbody tr').length > {page.locator('#choices tbody tr').count()}")

    # Alice's run cancelled: Bob's is let in and trains, and the lab's timeline has both runs' device rounds.
    page.go_back()
    assert lab.call("POST", f"/api/lab/runs/{a}/cancel", token=alice)[0] == 200
    expect(rows_of(page, "finished").filter(has_text=a)).to_contain_text("cancelled")
    expect(rows_of(page, "queue")).to_have_count(0)
    page.wait_for_function(HAS_RUN, arg=b)
    assert {key.split("/")[0] for key in timeline_jobs(page)} == {a, b}  # both runs' bars, each run's jobs apart
    assert int(page.locator("#lab-timeline").get_attribute("data-bars")) > bars  # grown in place
    swatches = page.evaluate("() => [...document.querySelectorAll('#lab-timeline .timeline-legend i')].map((i) => i.style.background)")
    assert len(swatches) == 4 and len(set(swatches)) == 4  # each run a hue, each of its jobs a shade
    timeline = lab.call("GET", "/lab/timeline")[1]
    assert set(timeline["runs"]) == {a, b} and {key.split("/")[0] for key in timeline["jobs"]} == {a, b}
    assert {f"{run}/{job}" for run in (a, b) for job in ("lenet", "cnn")} == set(timeline["jobs"])
    # It follows the run going; a double-click shows the lab's whole history, from its first bar on.
    follows = page.evaluate(VIEW)
    page.locator("#lab-timeline canvas").dblclick()
    whole = page.evaluate(VIEW)
    assert whole[0] == min(timeline["bars"]["start_s"]) and whole != follows

    # Bob's run completes; its folder is a run's folder: `mjfl dashboard` serves its timeline, the lab's bars of it.
    assert lab.ended(b)["state"] == "completed"
    expect(rows_of(page, "finished").filter(has_text=b)).to_contain_text("completed")
    served = processes(mjfl_args("dashboard", str(lab.folder / "runs" / b), "--port", "0"), read=True)
    url = served.line_with("mjfl dashboard: open ").split(" open ")[-1].split()[0].rstrip("/")
    (entry,) = fetched(url + "/api/runs")
    alone = bars_of(fetched(f"{url}/api/runs/{urllib.parse.quote(entry['id'], safe='')}/timeline"))
    ours = [{**bar, "job": bar["job"].split("/", 1)[1]} for bar in bars_of(lab.call("GET", "/lab/timeline")[1])
            if bar["job"].startswith(b + "/")]
    # The same bars, the lab's on the wall clock: one shift for all (the run never stopped).
    shifts = [mine["start_s"] - own["start_s"] for mine, own in zip(ours, alone, strict=True)]
    assert ours and max(shifts) - min(shifts) <= 0.0011  # each side is rounded to the ms
    assert [(x["device"], x["job"], x["round"], x["status"]) for x in ours] == [
        (x["device"], x["job"], x["round"], x["status"]) for x in alone]


def fetched(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return json.loads(answer.read())

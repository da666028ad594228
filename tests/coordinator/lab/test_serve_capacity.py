"""A lab at capacity: the shipped lab service and more runs than its fleet holds, submitted at once.

`mjfl serve examples/lab-service.toml --emulate 8` (its ports picked free, its
folder the test's) and five runs of examples/lab.toml (three jobs, at least
3 devices a round each, `scheduler.min_plan`), submitted together: 8 devices
hold two such runs at a time. Every run must complete with its targets; no
more than two may run at once, the others queued saying why; and no device
may sit idle for longer than a round while a run waits for devices (a slow device no plan chose, or one
left over by plans of 3, is no round's worth).
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from pathlib import Path

import pytest
from lab_service import PROGRAMS, Lab
from processes import query
from repository import ROOT

from mjfl.bench.serve_load import idle_while_waiting, waits_in_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RUNS = 5


def shipped_lab(folder: Path) -> Path:
    """examples/lab-service.toml as shipped, but for its ports (any free one: tests run side by side) and its
    program cache (the repository's, shared by every test)."""
    text = (ROOT / "examples" / "lab-service.toml").read_text()
    text, ports = re.subn(r"(?m)^port = \d+", "port = 0", text)
    assert ports == 2, "the shipped lab names a device port and an API port"
    path = folder / "lab-service.toml"
    path.write_text(f'program_cache = "{PROGRAMS}"\n' + text)
    return path


def wall(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) that overlap at one moment."""
    moments = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    return max(itertools.accumulate(step for _, step in moments))


def test_five_runs_on_a_fleet_that_holds_two_each_complete_two_at_a_time_and_never_starve(tmp_path, processes):
    lab = Lab.start(processes, tmp_path, lab_file=shipped_lab(tmp_path))
    config = (ROOT / "examples" / "lab.toml").read_text()
    submitted = [lab.submit(config, lab.admin)["id"] for _ in range(RUNS)]

    # The fleet holds two runs of 3 devices a job: the others wait in the queue and say why.
    def held_back(run: dict) -> bool:
        reason = run["reason"] or ""
        return run["state"] == "queued" and "needs 3 devices a job" in reason and "8 devices hold 2 such runs" in reason

    lab.until(lambda: all(held_back(lab.run(run)) for run in submitted[2:]), 120)

    ended = [lab.ended(run, timeout=1200) for run in submitted]
    assert [(run["state"], run["targets_reached"]) for run in ended] == [("completed", True)] * RUNS, ended
    spans = [(wall(run["admitted_at"]), wall(run["ended_at"])) for run in ended]
    assert most_at_once(spans) == 2

    # No round's worth of devices (3) idles longer than a round while a run waits for devices: the runs' own waits
    # (their logs), the devices' tasks (the lab's task log), on the wall clock.
    runs_dir = lab.folder / "runs"
    rounds = [r for run in submitted for r in query(runs_dir / run / "mjfl.db", "SELECT started_s, ended_s FROM rounds")]
    longest_round = max(end - start for start, end in rounds)
    waits = [w for run in submitted for w in waits_in_log((runs_dir / run / "mjfl.log").read_text())]
    tasks = lab.tasks()
    assert {t["device"] for t in tasks} == {d["device"] for d in lab.devices()}  # every device served
    assert idle_while_waiting(tasks, waits, devices=8, plan=3) <= longest_round, (waits, longest_round)

    # Every round of every job is a line of its run's log.
    for run in submitted:
        log = (lab.folder / "runs" / run / "mjfl.log").read_text()
        count = query(lab.folder / "runs" / run / "mjfl.db", "SELECT count(*) FROM rounds")[0][0]
        assert len(re.findall(r"job \w+ round \d+: accuracy", log)) == count

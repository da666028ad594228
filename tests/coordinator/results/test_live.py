"""The live view: fed the run's events, it shows each round and the engine's verdict on each job."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.engine.events import (
    JobStopped,
    RoundAggregated,
    RunEvent,
    StopReason,
    TaskSent,
)
from mjfl.coordinator.results.live import LiveView
from mjfl.coordinator.storage.records import RoundRecord
from mjfl.ids import DeviceId


def aggregated(record: RoundRecord) -> RoundAggregated:
    return RoundAggregated(
        record=record, choices=None, stopped=None, weights={}, scheduler=None, best_accuracy=0.0
    )


def stopped(record: RoundRecord, reason: StopReason) -> JobStopped:
    return JobStopped(record.job, reason, record.round, record.ended_s)


def cnn_run() -> list[RunEvent]:
    """cnn's three rounds; the engine stops it after round 2 (its target) though the rounds go on here."""
    first, second, third = rounds_of("mg", CNN, [(10, 0.5, 1.0), (25, 0.82, 0.6), (40, 0.79, 0.6)])
    return [aggregated(first), aggregated(second), stopped(second, "target"), aggregated(third)]


def lenet_stops(reason: StopReason) -> JobStopped:
    [record] = rounds_of("mg", LENET, [(30, 0.9, 0.5)])
    return JobStopped(LENET, reason, 0, record.ended_s)


def test_live_view_off_a_terminal_prints_a_few_lines_not_frames() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    assert not console.is_terminal
    with LiveView({"meta-greedy": jobs_of("mg")}, console=console) as view:
        observe = view.observer("meta-greedy")
        for event in [*cnn_run(), lenet_stops("budget")]:
            observe(event)
        row = view.render()
    text = out.getvalue()
    assert text.count("mjfl run") == 1  # the final table, once
    assert "meta-greedy / cnn: target reached in round 2" in text
    assert "meta-greedy / lenet: stopped (budget)" in text
    assert len(text.splitlines()) < 20
    assert text.endswith("┘\n"), "what prints next starts on a line of its own"
    cells = {c.header: list(c.cells) for c in row.columns}
    assert cells["round"] == ["3", "0"] and cells["accuracy"][0] == "0.7900"
    assert cells["best"][0] == "0.8200" and "reached" in cells["status"][0]
    assert "stopped (budget)" in cells["status"][1]
    assert cells["virtual time"][0] == "0:00:40"


def test_the_status_is_the_engines_verdict_only() -> None:
    # A round over the target with no JobStopped: still running (the view decides nothing).
    view = LiveView({"m": jobs_of("mg")}, enabled=False)
    observe = view.observer("m")
    [record] = rounds_of("mg", CNN, [(5, 0.99, 0.01)])
    observe(aggregated(record))
    observe(TaskSent(CNN, 2, DeviceId("d0"), 5.0))  # events it does not show change nothing
    assert "running" in next(iter(view.render().columns[-1].cells))
    # A stop for want of devices is a stop, with its reason.
    observe(JobStopped(CNN, "no devices", 1, 6.0))
    assert "stopped (no devices)" in next(iter(view.render().columns[-1].cells))


def test_each_method_has_its_own_rows() -> None:
    view = LiveView(enabled=False)
    view.add_jobs("random", jobs_of("rnd"))
    [record] = rounds_of("gr", CNN, [(5, 0.6, 1.0)])
    view.observer("greedy")(aggregated(record))
    view.observer("random")(JobStopped(CNN, "target", 4, 9.0))
    cells = {c.header: list(c.cells) for c in view.render().columns}
    assert list(zip(cells["method"], cells["job"], cells["round"])) == [
        ("random", "cnn", "0"), ("random", "lenet", "0"), ("greedy", "cnn", "1"),
    ]  # fmt: skip
    assert "reached" in cells["status"][0] and "running" in cells["status"][2]
    assert cells["target"][2] == "—"  # a job it was never told about


def test_live_view_disabled_prints_nothing() -> None:
    out = io.StringIO()
    with LiveView({"m": jobs_of("mg")}, console=Console(file=out), enabled=False) as view:
        observe = view.observer("m")
        for event in [*cnn_run(), lenet_stops("budget")]:
            observe(event)
    assert out.getvalue() == ""


@pytest.mark.timeout(10)
def test_live_view_on_a_terminal_starts_and_stops() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with LiveView(console=console, clock="wall", refresh_per_second=50) as view:
        view.add_jobs("random", jobs_of("rnd"))
        observe = view.observer("random")
        for event in cnn_run():
            observe(event)
    assert "wall time" in out.getvalue() and "0.7900" in out.getvalue()

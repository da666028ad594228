"""Fixtures for the tests of the results: four methods' runs of the two jobs of ``run_records``."""

from __future__ import annotations

import pytest
from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.storage.records import JobInfo, RoundRecord


@pytest.fixture
def results() -> dict[str, tuple[list[JobInfo], list[RoundRecord]]]:
    """One run per method (``outcomes.Results``); the figures they give are ``test_outcomes.EXPECTED``."""
    meta = (
        rounds_of(
            "mg",
            CNN,
            [(10, 0.5, 1.0), (25, 0.82, 0.6), (40, 0.79, 0.6), (50, 0.85, 0.5)],
            winner="bods",
        )
        # lenet's accuracy is high from round 1, but its target is the loss.
        + rounds_of("mg", LENET, [(12, 0.9, 0.5), (30, 0.97, 0.29)], winner="greedy")
        # Another run's record must not count for this one.
        + rounds_of("elsewhere", CNN, [(1, 0.99, 0.01)])
    )
    random = rounds_of("rnd", CNN, [(20, 0.6, 1.0), (60, 0.81, 0.4)]) + rounds_of(
        "rnd", LENET, [(30, 0.9, 0.4), (120, 0.95, 0.2)]
    )
    greedy = rounds_of("gr", CNN, [(45, 0.8, 0.7)]) + rounds_of("gr", LENET, [(90, 0.9, 0.3)])
    fedcs = rounds_of("fc", CNN, [(30, 0.7, 0.9)]) + rounds_of("fc", LENET, [(20, 0.9, 0.25)])
    return {
        "meta-greedy": (jobs_of("mg"), meta),
        "random": (jobs_of("rnd"), random),
        "greedy": (jobs_of("gr"), greedy),
        "fedcs": (jobs_of("fc"), fedcs),
    }

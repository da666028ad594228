"""Outcomes: a job's time to target, a run's summary, several runs of a method gathered."""

from __future__ import annotations

import math
import statistics

from hypothesis import given
from hypothesis import strategies as st
from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.results.outcomes import gather, job_outcomes, spread, summary
from mjfl.coordinator.storage.records import JobInfo
from mjfl.ids import JobId

EXPECTED = {
    "methods": {
        "meta-greedy": {
            "jobs": {
                # The first reaching round (25 s), not the dip after it nor the last one.
                "cnn": {"time_to_target_s": 25.0, "final_accuracy": 0.85, "rounds": 4},
                "lenet": {"time_to_target_s": 30.0, "final_accuracy": 0.97, "rounds": 2},
            },
            "total_time_s": 30.0,
        },
        "random": {
            "jobs": {
                "cnn": {"time_to_target_s": 60.0, "final_accuracy": 0.81, "rounds": 2},
                "lenet": {"time_to_target_s": 120.0, "final_accuracy": 0.95, "rounds": 2},
            },
            "total_time_s": 120.0,
        },
        "greedy": {
            "jobs": {  # targets are inclusive: 0.8 >= 0.8 and 0.3 <= 0.3
                "cnn": {"time_to_target_s": 45.0, "final_accuracy": 0.8, "rounds": 1},
                "lenet": {"time_to_target_s": 90.0, "final_accuracy": 0.9, "rounds": 1},
            },
            "total_time_s": 90.0,
        },
        "fedcs": {
            "jobs": {
                "cnn": {"time_to_target_s": None, "final_accuracy": 0.7, "rounds": 1},
                "lenet": {"time_to_target_s": 20.0, "final_accuracy": 0.9, "rounds": 1},
            },
            "total_time_s": None,  # one job never reached its target
        },
    }
}


def test_summary_has_exactly_the_specified_shape_and_values(results: dict) -> None:
    got = summary(results)
    energy = {name: method.pop("energy") for name, method in got["methods"].items()}
    assert got == EXPECTED
    # No device round of these records told its energy: every figure is unknown, none is 0.
    assert energy["meta-greedy"] == {
        "jobs": {
            "cnn": {"to_target_j": None, "known": 0, "device_rounds": 4},  # 2 rounds to target, 2 devices each
            "lenet": {"to_target_j": None, "known": 0, "device_rounds": 4},
        },
        "group": {"to_target_j": None, "known": 0, "device_rounds": 8},  # every job's, up to its target
        "devices": {
            "d3": {"total_j": None, "rounds": 0, "per_round_j": None, "source": None, "resolution_j": None,
                   "not_measured": {}},
            "d1": {"total_j": None, "rounds": 0, "per_round_j": None, "source": None, "resolution_j": None,
                   "not_measured": {}},
        },
    }
    assert energy["fedcs"]["jobs"]["cnn"] == {"to_target_j": None, "known": 0, "device_rounds": 2}
    assert list(got) == ["methods"]
    assert list(got["methods"]) == ["meta-greedy", "random", "greedy", "fedcs"]
    for method in got["methods"].values():
        assert set(method) == {"jobs", "total_time_s"}
        assert method["total_time_s"] is None or type(method["total_time_s"]) is float
        for job in method["jobs"].values():
            assert set(job) == {"time_to_target_s", "final_accuracy", "rounds"}
            assert job["time_to_target_s"] is None or type(job["time_to_target_s"]) is float
            assert type(job["final_accuracy"]) is float and type(job["rounds"]) is int


def test_job_outcomes_edge_cases() -> None:
    both = JobInfo("r", CNN, "cnn", "d", 0.9, 0.5, 10, "k")
    neither = JobInfo("r", LENET, "lenet", "d", None, None, 10, "k2")
    empty = JobInfo("r", JobId("idle"), "m", "d", 0.5, None, 10, "k3")
    records = rounds_of("r", CNN, [(5, 0.5, 0.1), (9, 0.91, 0.9)]) + rounds_of(
        "r", LENET, [(3, 1.0, 0.0)]
    )
    outcomes = job_outcomes([both, neither, empty], list(reversed(records)))
    # With both targets the first one met counts (the engine stops the job there):
    # the loss target, met in round 1.
    assert outcomes[CNN].time_to_target_s == 5.0 and outcomes[CNN].reached_target
    assert outcomes[CNN].final_accuracy == 0.91  # last by round, not by list order
    assert outcomes[LENET].time_to_target_s is None and not outcomes[LENET].reached_target
    assert outcomes[JobId("idle")].rounds == 0 and math.isnan(
        outcomes[JobId("idle")].final_accuracy
    )
    assert summary({"m": ([empty], [])})["methods"]["m"] == {
        "jobs": {"idle": {"time_to_target_s": None, "final_accuracy": None, "rounds": 0}},
        "total_time_s": None,
        "energy": {
            "jobs": {"idle": {"to_target_j": None, "known": 0, "device_rounds": 0}},
            "group": {"to_target_j": None, "known": 0, "device_rounds": 0},
            "devices": {},
        },
    }


def test_gather_spreads_over_the_runs_that_reached_and_counts_them(results: dict) -> None:
    # Three runs of one method: two reach every target, one (fedcs's records) misses cnn's.
    runs = [results["meta-greedy"], results["random"], results["fedcs"]]
    got = gather(runs, seeds=[2, 0, 2])
    assert list(got) == ["runs", "seeds", "jobs", "group_time_s", "wins", "energy"]
    assert got["runs"] == 3 and got["seeds"] == [0, 2]
    assert got["jobs"]["cnn"]["time_to_target_s"] == {
        "mean": 42.5, "sd": statistics.stdev([25.0, 60.0]), "reached": 2, "runs": 3,
    }  # fmt: skip
    assert got["jobs"]["lenet"]["final_accuracy"]["mean"] == statistics.fmean([0.97, 0.95, 0.9])
    assert got["group_time_s"] == {"mean": 75.0, "sd": statistics.stdev([30.0, 120.0]), "reached": 2, "runs": 3}
    # Only meta-greedy's rounds have winners: 4 bods (cnn), 2 greedy (lenet), most first.
    assert got["wins"] == {"bods": round(4 / 6, 4), "greedy": round(2 / 6, 4)}
    assert gather([results["random"]], seeds=[0])["wins"] == {}


@given(st.lists(st.one_of(st.none(), st.floats(0.0, 1e6)), max_size=20))
def test_spread_counts_what_exists_and_its_mean_lies_within_it(values: list[float | None]) -> None:
    got = spread(values)
    present = [v for v in values if v is not None]
    assert (got["reached"], got["runs"]) == (len(present), len(values))
    if not present:
        assert got["mean"] is None and got["sd"] is None
    else:
        assert min(present) - 1e-6 <= got["mean"] <= max(present) + 1e-6
        assert (got["sd"] is None) == (len(present) == 1)


def test_a_run_without_a_job_of_another_counts_it_only_where_it_ran() -> None:
    alone = ([jobs_of("a")[0]], rounds_of("a", CNN, [(5, 0.9, 0.1)]))
    both = (jobs_of("b"), rounds_of("b", CNN, [(8, 0.9, 0.1)]) + rounds_of("b", LENET, [(9, 0.9, 0.2)]))
    got = gather([alone, both], seeds=[0, 1])
    assert got["jobs"]["cnn"]["time_to_target_s"]["runs"] == 2
    assert got["jobs"]["lenet"]["time_to_target_s"] == {"mean": 9.0, "sd": None, "reached": 1, "runs": 1}

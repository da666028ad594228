"""Energy from the records: each job's to its target, each device's over the run."""

from __future__ import annotations

import dataclasses

import pytest
from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.results.energy import (
    device_energy,
    device_order,
    energy_to_target,
    job_energy,
    merge_device_energy,
    not_measured_text,
    task_energy,
)
from mjfl.coordinator.results.targets import job_rounds
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord
from mjfl.ids import DeviceId

BATTERY = {"battery_pct": 80, "energy_j": 0.0, "energy_source": "battery"}
MODELLED = {"energy_j": 0.0, "energy_source": "modelled"}


def with_energy(record: RoundRecord, *energies: tuple[str, float | None, dict | None]) -> RoundRecord:
    devices = tuple(
        DeviceRound(DeviceId(name), "ok" if joules is not None else "failed", 10, 0.5, 1.0, energy_j=joules,
                    device_state=state)
        for name, joules, state in energies
    )
    return dataclasses.replace(record, devices=devices)


def test_a_jobs_energy_to_target_sums_its_rounds_up_to_the_first_that_reached_it():
    # cnn (target accuracy 0.8) reaches it in round 2; round 3 comes after and does not count.
    cnn = rounds_of("r", CNN, [(10, 0.5, 1.0), (20, 0.82, 0.6), (30, 0.9, 0.5)])
    cnn = [
        with_energy(cnn[0], ("p1", 10.0, BATTERY), ("e1", 4.0, MODELLED)),
        with_energy(cnn[1], ("p1", None, None), ("e1", 6.0, MODELLED)),  # p1 charged: not known
        with_energy(cnn[2], ("p1", 100.0, BATTERY)),
    ]
    # lenet (target loss 0.3) never reaches it: no energy to target, however much it spent.
    lenet = [with_energy(r, ("e1", 5.0, MODELLED)) for r in rounds_of("r", LENET, [(15, 0.9, 0.5), (25, 0.9, 0.4)])]
    got = job_energy(jobs_of("r"), cnn + lenet)
    assert got == {
        "cnn": {"to_target_j": 20.0, "known": 3, "device_rounds": 4},
        "lenet": {"to_target_j": None, "known": 2, "device_rounds": 2},
    }


def test_a_groups_energy_to_target_is_every_jobs_and_none_until_the_last_job_reached_it():
    cnn = [
        with_energy(r, ("e1", 4.0, MODELLED), ("p1", None, None))  # p1 failed: not known
        for r in rounds_of("r", CNN, [(10, 0.5, 1.0), (20, 0.82, 0.6), (30, 0.9, 0.5)])
    ]
    lenet = [with_energy(r, ("e1", 5.0, MODELLED)) for r in rounds_of("r", LENET, [(15, 0.9, 0.5), (25, 0.9, 0.2)])]
    jobs = jobs_of("r")
    # cnn's two rounds up to its target (its third comes after) and lenet's two.
    assert energy_to_target([job_rounds(job, cnn + lenet) for job in jobs]) == {
        "to_target_j": 18.0, "known": 4, "device_rounds": 6,
    }  # fmt: skip
    # Without lenet's second round lenet has not reached its target: the group has no energy to target yet.
    assert energy_to_target([job_rounds(job, cnn + lenet[:1]) for job in jobs])["to_target_j"] is None
    assert energy_to_target([]) == {"to_target_j": None, "known": 0, "device_rounds": 0}


def test_a_device_sums_the_rounds_it_told_its_energy_in_and_names_the_source():
    records = [
        with_energy(r, ("p1", 12.0, BATTERY), ("e1", 3.0, MODELLED), ("mute", None, None))
        for r in rounds_of("r", CNN, [(10, 0.5, 1.0), (20, 0.6, 0.9)])
    ]
    records.append(with_energy(records[0], ("p1", None, {"energy_j": None, "energy_source": "charging"})))
    got = device_energy(records)
    assert list(got) == ["p1", "e1", "mute"]
    assert got["p1"] == {"total_j": 24.0, "rounds": 2, "per_round_j": 12.0, "source": "battery", "resolution_j": None,
                         "not_measured": {"charging": 1}}  # the round it charged in: counted, by why
    assert got["e1"] == {"total_j": 6.0, "rounds": 2, "per_round_j": 3.0, "source": "modelled", "resolution_j": None,
                         "not_measured": {}}
    assert got["mute"] == {"total_j": None, "rounds": 0, "per_round_j": None, "source": None, "resolution_j": None,
                           "not_measured": {}}  # failed tasks that said nothing of energy: not "not measured"


def test_several_runs_devices_merge_by_adding_and_keep_every_source():
    one = {"p1": {"total_j": 24.0, "rounds": 2, "per_round_j": 12.0, "source": "battery", "resolution_j": 28.8,
                  "not_measured": {"charging": 3}},
           "mute": {"total_j": None, "rounds": 0, "per_round_j": None, "source": None}}  # a summary from before both
    two = {"p1": {"total_j": 6.0, "rounds": 1, "per_round_j": 6.0, "source": "modelled", "resolution_j": None,
                  "not_measured": {"charging": 1, "unsupported": 2}}}
    got = merge_device_energy([one, two])
    assert got["p1"] == {"total_j": 30.0, "rounds": 3, "per_round_j": pytest.approx(10.0), "source": "battery+modelled",
                         "resolution_j": 28.8, "not_measured": {"charging": 4, "unsupported": 2}}
    assert got["mute"] == {"total_j": None, "rounds": 0, "per_round_j": None, "source": None, "resolution_j": None,
                           "not_measured": {}}


def test_a_tasks_energy_reads_with_its_resolution_or_why_it_was_not_measured():
    measured = {"energy_j": 14.4, "energy_source": "battery", "energy_resolution_j": 14.4, "plugged": "none"}
    assert task_energy(14.4, measured) == "14.4 J ± 14.4"
    assert task_energy(3.21, MODELLED) == "3.2 J"  # modelled: no gauge, no resolution
    assert task_energy(None, {"energy_j": None, "energy_source": "charging", "plugged": "usb"}) == "not measured, charging"
    assert task_energy(None, {"energy_source": "unsupported"}) == "not measured, no charge counter"
    assert task_energy(None, {"energy_source": "implausible"}) == "not measured, an implausible reading"
    assert task_energy(None, {"energy_source": "counter_rose"}) == "not measured, the charge counter rose"
    assert task_energy(None, {"energy_source": "unavailable"}) == "not measured, the counter could not be read"
    assert task_energy(None, {"energy_source": "a vendor's word"}) == "not measured, a vendor's word"
    assert task_energy(None, None) == task_energy(None, {"battery_pct": 80}) == ""  # nothing said: a failed task
    for bad in (0, -1.0, float("nan"), "14.4", True):  # a resolution that is not one is left out
        assert task_energy(14.4, {**measured, "energy_resolution_j": bad}) == "14.4 J"
    assert not_measured_text({"charging": 12, "unsupported": 3}) == "12 not measured, charging; 3 not measured, no charge counter"


def test_merged_devices_come_in_the_order_a_person_lists_them():
    entry = {"total_j": 1.0, "rounds": 1, "per_round_j": 1.0, "source": "modelled"}
    got = merge_device_energy([{"d10": entry, "d2": entry}, {"pixel-7a": entry, "d1": entry}])
    assert list(got) == ["d1", "d2", "d10", "pixel-7a"]
    assert sorted(["sim-0010", "sim-0002", "b", "a2b", "a10"], key=device_order) == ["a2b", "a10", "b", "sim-0002", "sim-0010"]

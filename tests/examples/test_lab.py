"""examples/lab.toml keeps its word: a lab of 4-8 devices, data cut for them, every target reached."""

import dataclasses

from repository import EXAMPLES, ROOT
from rich.console import Console

from mjfl.commands.simulate import simulate
from mjfl.coordinator.config import load_config
from mjfl.coordinator.run.coverage import LAB_CONFIG, LAB_SIZES, explain, shortfalls
from mjfl.coordinator.run.driver import Output
from mjfl.coordinator.run.preparation import Assignment, prepare_jobs, shard_count
from mjfl.ids import DeviceId
from mjfl.schedulers.base import plan_size

LAB = EXAMPLES / "lab.toml"
CACHE = ROOT / ".mjfl-cache" / "programs"


def devices(n: int) -> list[DeviceId]:
    return [DeviceId(f"phone-{k}") for k in range(n)]


def test_lab_is_cut_for_the_devices_present_and_trains_three_of_them_a_round():
    config = load_config(LAB)
    assert LAB_CONFIG == "examples/lab.toml" and LAB.is_file()
    assert 2 <= len(config.jobs) <= 3
    for n in LAB_SIZES:
        assert shard_count(config, n, real_time=True) == n  # no shard waits for a phone that is not there
        for job in config.jobs:
            assert job.dataset == "digits" and job.target_accuracy is not None
            assert plan_size(job.fraction, n, n, config.scheduler.min_plan) >= 3


def test_lab_sized_fleets_get_no_warning_and_the_quickstart_is_sent_to_the_lab():
    config = load_config(LAB)
    for n in LAB_SIZES:
        prepared = prepare_jobs(config, n, cache_dir=CACHE)
        assert shortfalls(prepared, Assignment(n, devices(n)), min_plan=config.scheduler.min_plan) == [], n
    # The quickstart's data is cut for 24 devices: six of them miss whole classes.
    quickstart = load_config(EXAMPLES / "quickstart.toml")
    found = shortfalls(prepare_jobs(quickstart, 24, cache_dir=CACHE), Assignment(24, devices(6)))
    assert {s.job for s in found if s.blocking} == {j.name for j in quickstart.jobs}
    assert LAB_CONFIG in explain(found, present=6, slots=24, cut_for="fleet.size")


# ~13 s on 2 cores: the jobs stop at their targets, after 4 to 13 rounds over seeds 0-2.
def test_lab_reaches_every_target_on_six_devices_in_virtual_time(tmp_path):
    config = load_config(LAB)
    assert config.fleet.size == 6
    config = dataclasses.replace(config, out_dir=tmp_path / "out", fleet=dataclasses.replace(config.fleet, workers=2))
    summary = simulate(config, ["meta-greedy"], Output(config.out_dir, Console(quiet=True), live=False))
    for name, row in summary["methods"]["meta-greedy"]["jobs"].items():
        assert row["time_to_target_s"] is not None, (name, row)
        assert row["rounds"] <= 20, (name, row)  # half the budget: room for other seeds and generators

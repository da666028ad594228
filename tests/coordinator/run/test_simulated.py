"""`mjfl simulate` end to end: real ExecuTorch training on digits, virtual time."""

import itertools
import json
import re

import pytest
from rich.console import Console

from mjfl.commands.simulate import simulate
from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.driver import Output
from mjfl.coordinator.storage.database import Storage

pytestmark = pytest.mark.slow


def two_jobs(tmp_path, seed=0, method="meta-greedy", runtime="executorch"):
    return parse_config(
        {
            "seed": seed,
            "out_dir": str(tmp_path / "out"),
            "fleet": {"size": 10, "workers": 2, "runtime": runtime},
            "scheduler": {"method": method, "options": {"rlds": {"pretrain_rounds": 5}}},
            "jobs": [
                {"name": "lenet", "model": "lenet5", "image_size": 12, "partition": "iid", "epochs": 2,
                 "batch_size": 8, "lr": 0.05, "fraction": 0.3, "target_accuracy": 0.6, "max_rounds": 25},
                {"name": "cnnb", "model": "cnn-b", "image_size": 8, "partition": "noniid", "epochs": 2,
                 "batch_size": 8, "lr": 0.05, "fraction": 0.3, "target_accuracy": 0.6, "max_rounds": 25},
            ],
        }
    )


def test_two_jobs_reach_their_targets_and_everything_is_written(tmp_path):
    config = two_jobs(tmp_path)
    out = tmp_path / "out"
    summary = simulate(config, ["meta-greedy", "random"], Output(out, Console(), live=False))
    assert set(summary["methods"]) == {"meta-greedy", "random"}
    for method, result in summary["methods"].items():
        for job, row in result["jobs"].items():
            assert row["time_to_target_s"] is not None, (method, job, row)
            assert row["final_accuracy"] >= 0.6
        assert result["total_time_s"] == max(r["time_to_target_s"] for r in result["jobs"].values())
    assert json.loads((out / "summary.json").read_text()) == summary
    assert (out / "rounds.csv").read_text().count("\n") > 4
    assert (out / "accuracy-lenet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "meta-greedy-wins.png").exists()
    with Storage(config.database_path) as storage:
        runs = storage.runs()
        assert [(info.method, status) for info, status in runs] == [("meta-greedy", "finished"), ("random", "finished")]
        rounds = storage.rounds(runs[0][0].run_id)
        assert all(r.winner is not None for r in rounds)
        # Every answered task told its modelled energy: 3 W (no power_w in a synthetic profile) x its round.
        answered = [d for r in rounds for d in r.devices if d.status == "ok"]
        assert answered and all(d.energy_j == pytest.approx(3.0 * d.duration_s) for d in answered)
        assert all(entry["energy"]["jobs"][job]["to_target_j"] > 0
                   for entry in summary["methods"].values() for job in entry["jobs"])
        # What each run ran on: no file (a parsed config), both programs, the ten simulated devices with their
        # fleet profiles and one shard each; no hello and no app.
        for info, _ in runs:
            kept, admissions = storage.provenance(info.run_id)
            assert kept is not None and kept.config_text is None and [p.job for p in kept.programs] == ["lenet", "cnnb"]
            assert all(len(p.shard_samples) == 10 for p in kept.programs)
            assert sorted(a.shard for a in admissions) == list(range(10))
            assert all(a.hello is None and a.profile["source"] == "fleet" and a.app["absent"] for a in admissions)
        # Exclusivity from the records: no device in two jobs' rounds at overlapping times.
        spans = {}
        for r in rounds:
            for d in r.devices:
                spans.setdefault(d.device, []).append((r.started_s + d.wait_s, r.started_s + d.wait_s + d.duration_s))
        for intervals in spans.values():
            intervals.sort()
            assert all(b[0] >= a[1] - 1e-9 for a, b in itertools.pairwise(intervals))


def test_a_smoothed_target_stops_a_job_only_when_its_last_3_rounds_mean_reaches_it(tmp_path):
    """A few seconds (1.6 s warm, 4.9 s alone): one small job whose accuracy crosses 0.8 alone before its 3-round mean does."""
    out = tmp_path / "out"
    config = parse_config({
        "seed": 0, "out_dir": str(out), "fleet": {"size": 10, "workers": 1}, "scheduler": {"method": "greedy"},
        "jobs": [{"name": "lenet", "model": "lenet5", "image_size": 12, "partition": "iid", "batch_size": 8,
                  "lr": 0.05, "fraction": 0.3, "target_accuracy": 0.8, "target_window": 3, "max_rounds": 25}],
    })
    summary = simulate(config, ["greedy"], Output(out, Console(), live=False))
    with Storage(config.database_path) as storage:
        ((info, _),) = storage.runs()
        assert [job.target_window for job in storage.jobs(info.run_id)] == [3]
        rounds = storage.rounds(info.run_id)
    accuracies = [r.accuracy for r in rounds]
    means = [sum(accuracies[r - 3 : r]) / 3 for r in range(3, len(rounds) + 1)]  # rounds 3, 4, ... of the run
    assert means[-1] >= 0.8 and all(m < 0.8 for m in means[:-1]), accuracies  # it stopped at the first mean >= 0.8
    assert len(rounds) < 25 and any(a >= 0.8 for a in accuracies[:-1]), accuracies  # a single round met it sooner
    assert summary["methods"]["greedy"]["jobs"]["lenet"]["time_to_target_s"] == rounds[-1].ended_s


def test_same_seed_same_schedule_and_virtual_times(tmp_path):
    def schedule(folder):
        config = two_jobs(folder, seed=3, method="greedy")
        simulate(config, ["greedy"], Output(folder / "out", Console(), live=False))
        with Storage(config.database_path) as storage:
            run = storage.runs()[0][0].run_id
            return [(r.job, r.round, r.plan, round(r.started_s, 9), round(r.ended_s, 9)) for r in storage.rounds(run)]

    assert schedule(tmp_path / "a") == schedule(tmp_path / "b")


def test_a_small_non_iid_fleet_serves_every_job_to_its_target(tmp_path):
    # Six devices of two classes each, two jobs of three devices a round: a round
    # holds at most 6 of the 10 classes, and both jobs want the same fast devices.
    # Each job must be spread beyond the fastest three (the classes they lack)
    # and reach its target.
    job = {"image_size": 8, "partition": "noniid", "epochs": 2, "batch_size": 8, "lr": 0.05,
           "fraction": 0.5, "target_accuracy": 0.7, "max_rounds": 60}
    config = parse_config(
        {
            "seed": 0,
            "out_dir": str(tmp_path / "out"),
            "fleet": {"size": 6, "workers": 2},
            "scheduler": {"method": "meta-greedy", "options": {"rlds": {"pretrain_rounds": 5}}},
            "jobs": [{"name": "lenet", "model": "lenet5", **job, "image_size": 12}, {"name": "cnn", "model": "cnn-a-noniid", **job}],
        }
    )
    console = Console(record=True, width=200)
    summary = simulate(config, ["meta-greedy"], Output(tmp_path / "out", console, live=False))
    said = console.export_text()
    # Said up front: three devices a round hold at most 6 of the 10 classes.
    assert said.count("whose data holds at most 6 of its 10 classes") == 2, said  # once per job
    # And once the programs are ready, what a device must hold for each job: a program for the job's batch size.
    for name in ("lenet", "cnn"):
        assert re.search(rf"^job {name}: program \d+\.\d MB, planned memory \d+\.\d MB \(batches up to 8\)$", said, re.MULTILINE), said
    for name, row in summary["methods"]["meta-greedy"]["jobs"].items():
        assert row["time_to_target_s"] is not None, (name, row)
    with Storage(config.database_path) as storage:
        rounds = storage.rounds(storage.runs()[0][0].run_id)
    for name in ("lenet", "cnn"):
        used = {d.device for r in rounds if r.job == name for d in r.devices}
        assert len(used) >= 4, f"{name} trained on {sorted(used)} only"


def test_the_batched_runtime_trains_the_rounds_the_per_device_one_does(tmp_path):
    """Same seed, same fleet: the batched runtime's rounds are the eager runtime's (plans, virtual times) with the
    same accuracies up to float noise (the rounds both ran: where a job nears its target, float noise may end one
    run a round apart from the other), and devices of a round did train together."""

    def rounds(runtime):
        config = two_jobs(tmp_path / runtime, seed=1, method="greedy", runtime=runtime)
        simulate(config, ["greedy"], Output(tmp_path / runtime / "out", Console(), live=False))
        with Storage(config.database_path) as storage:
            run = storage.runs()[0][0].run_id
            return {(r.job, r.round): r for r in storage.rounds(run)}

    eager, batched = rounds("torch"), rounds("batched")
    common = sorted(set(eager) & set(batched))
    assert len(common) >= 4
    for key in common:
        a, b = eager[key], batched[key]
        assert (a.plan, a.started_s, a.ended_s) == (b.plan, b.started_s, b.ended_s), key
        assert b.accuracy == pytest.approx(a.accuracy, abs=0.02), key
    together = [int(m.group(1)) for m in re.finditer(
        r"batched runtime: (\d+) devices of a", (tmp_path / "batched" / "out" / "mjfl.log").read_text())]
    assert together and max(together) >= 2

"""Before a run: whether the devices present can train the config's jobs, said in one message.

Two shortfalls, read from the shards alone:

* **Classes nobody holds.** In real time a job's data may be cut for more
  devices than are present (``fleet.size``; docs/testbed.md, "Devices that
  come and go"), the rest waiting for devices to join. A class that only
  absent devices hold is never trained, so a target set for the whole data
  set is out of reach: the run is refused unless forced (``--force``; devices
  that join later take the free shards). Six phones running a quickstart
  made for 24 for three minutes, to reach no target, help nobody.
* **Few classes a round.** A non-IID round whose devices hold fewer classes
  than the job has (a small fleet, or a small fraction): FedAvg averages
  models that each saw a few classes, and accuracy swings from round to
  round. Such jobs often get there all the same
  (tests/coordinator/run/test_simulated.py), so the run goes on, warned.

A fleet the size of a lab is pointed to ``examples/lab.toml``, which is cut
for the devices present and trains at least three of them a round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mjfl.coordinator.run.preparation import Assignment, PreparedJob
from mjfl.schedulers.base import plan_size

LAB_SIZES = range(4, 9)  # the fleets examples/lab.toml is made for (tests/examples/test_lab.py)
LAB_CONFIG = "examples/lab.toml"


@dataclass(frozen=True)
class Shortfall:
    """What the devices present lack for one job."""

    job: str
    missing: tuple[int, ...]  # classes no device present holds
    held: float  # the share of the job's training data they hold
    plan: int  # devices a round trains
    fraction: float  # C_m, which sets ``plan``
    seen: int  # at most this many classes in a round's data
    classes: int

    @property
    def blocking(self) -> bool:
        """The job cannot reach a target set for its whole data: some class is never trained."""
        return bool(self.missing)


def shortfalls(prepared: Sequence[PreparedJob], assignment: Assignment, *, min_plan: int = 1) -> list[Shortfall]:
    """The jobs the devices holding a shard cannot cover, in the config's order (none: all is well)."""
    present = len(assignment.slot_of)
    found = []
    for job in prepared:
        fraction = job.config.fraction
        plan = plan_size(fraction, present, present, min_plan)
        seen, classes = job.classes_a_round(assignment, plan)
        missing, held = job.coverage(assignment) if present < assignment.slots else ([], 1.0)
        if missing or seen < classes:
            found.append(Shortfall(job.config.name, tuple(missing), held, plan, fraction, seen, classes))
    return found


def explain(found: Sequence[Shortfall], *, present: int, slots: int, cut_for: str) -> str:
    """One message: what is missing, job by job, and what to do (``cut_for`` names what set ``slots``)."""
    blocking = any(s.blocking for s in found)
    if blocking:
        head = (
            f"{present} devices are too few for this config: its data is cut into {slots} shards ({cut_for}),"
            f" and the {present} present miss whole classes, which no round can train:"
        )
    else:
        head = (
            f"a round of these {present} devices holds few of a job's classes, so a non-IID job's accuracy"
            " swings from round to round and may never reach its target:"
        )
    lines = [head]
    for s in found:
        parts = []
        if s.missing:
            parts.append(
                f"they hold {s.held:.0%} of its data and none of class(es) {', '.join(map(str, s.missing))}"
            )
        if s.seen < s.classes:
            parts.append(
                f"a round trains {s.plan} of the {present} devices (fraction {s.fraction:g}),"
                f" whose data holds at most {s.seen} of its {s.classes} classes"
            )
        lines.append(f"  job {s.job}: {'; '.join(parts)}")
    advice = []
    if present in LAB_SIZES:
        advice.append(f"run {LAB_CONFIG}, made for a lab of {LAB_SIZES.start}-{LAB_SIZES.stop - 1} devices")
    if blocking:
        advice += [
            'connect more devices, or cut the data for the devices present (fleet.shards = "present")',
            "start anyway with --force (devices that join later take the free shards)",
        ]
    else:
        advice.append("use more devices or a larger fraction")
    text = "; or ".join(advice)
    lines.append(text[0].upper() + text[1:] + ".")
    return "\n".join(lines)

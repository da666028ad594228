"""When a job, and a group of jobs, reached the target: the one rule every figure of a run counts from.

A job reaches its target in the first of its rounds, in round order, whose
accuracy or loss (the mean over the job's ``target_window`` rounds up to it)
meets it (``records.Target.first_reached``, the rule the engine stops it
by). That round's end is the job's time to target, and the device rounds up
to and including it are what its energy to target sums
(``outcomes``, ``energy``). A group is done when its last job is: its time to
target is its slowest job's (the paper's Tables 4-5), and it has none while
any job has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mjfl.coordinator.storage.records import JobInfo, RoundRecord

__all__ = ["JobRounds", "group_time", "job_rounds"]


@dataclass(frozen=True)
class JobRounds:
    """A job's own rounds in round order, and where the first that reached its target stands (None: none did)."""

    rounds: tuple[RoundRecord, ...]
    reached_at: int | None

    @property
    def first_reached(self) -> RoundRecord | None:
        """The round whose end is the job's time to target; None when it never reached it."""
        return None if self.reached_at is None else self.rounds[self.reached_at]

    @property
    def up_to_target(self) -> tuple[RoundRecord, ...]:
        """The rounds up to and including the first that reached the target; every round when none did."""
        return self.rounds if self.reached_at is None else self.rounds[: self.reached_at + 1]


def job_rounds(job: JobInfo, records: Iterable[RoundRecord]) -> JobRounds:
    """``job``'s rounds among ``records`` (only those of its own run) and the first that reached its target."""
    own = tuple(sorted((r for r in records if r.run_id == job.run_id and r.job == job.job), key=lambda r: r.round))
    return JobRounds(own, job.target.first_reached([(r.accuracy, r.loss) for r in own]))


def group_time(times: Sequence[float | None]) -> float | None:
    """A group's time to target from its jobs' (None: not reached): the slowest, or None if any (or every one of none) is."""
    if not times or None in times:
        return None
    return max(t for t in times if t is not None)

"""The paper's published figures (Tables 4 and 5), and which of our jobs they compare with.

Transcribed from the paper's LaTeX source: Table 4 (``tab:GroupA``, "The
convergence accuracy and the time required to achieve the target accuracy for
different methods in Group A") and Table 5 (``tab:GroupB``, the same for Group
B), with the set-ups of Tables 2 and 3 (``tab:setup-GroupA``,
``tab:setup-GroupB``: data set, network, local epochs, mini-batch size; 100
devices and the non-IID split in Section 5). Times are minutes as printed;
"/" (target never reached) is ``None``. The tables print no group time: the paper's "total time" is
Formula 7's sum over jobs, and its quoted speed-ups (``CLAIMS``) are given as
text, not derived here.

A job of ours *matches* a paper job when all four agree:

- the data set (mjfl's name: ``cifar10``, ``emnist-letters``, ...);
- the model: the zoo model the paper's network is, or the declared stand-in
  where the zoo lacks it (``vgg6`` for VGG-16, ``resnet13`` for ResNet-18;
  such a match is marked as a stand-in);
- the partition (``noniid`` or ``iid``; Tables 4-5 have a half each);
- the target accuracy, equal to the paper's to 1e-9.

Nothing else is compared (fleet size, epochs, batch size, learning rate): the
example configs ``examples/paper-group-a.toml`` and ``paper-group-b.toml``
hold them as the paper states them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mjfl.coordinator.storage.records import JobInfo

__all__ = ["CLAIMS", "JOBS", "METHODS", "PaperJob", "PaperResult", "figures_for", "match"]

Partition = Literal["noniid", "iid"]

METHODS: tuple[str, ...] = ("Random", "Genetic", "FedCS", "Greedy", "BODS", "RLDS", "Meta-Greedy")
"""The methods of Tables 4-5, in the paper's column order (mjfl spells them in lower case;
the paper's Meta-Greedy is Algorithm 4, mjfl's ``meta-greedy-paper``)."""


@dataclass(frozen=True)
class PaperResult:
    """One method's cell pair in Table 4 or 5."""

    time_to_target_min: float | None  # None: "/", the target was not reached
    final_accuracy: float  # "convergence accuracy"

    @property
    def time_to_target_s(self) -> float | None:
        return None if self.time_to_target_min is None else self.time_to_target_min * 60.0


@dataclass(frozen=True)
class PaperJob:
    """One row of Table 4 or 5: a job of a group under one partition, and every method's result."""

    group: Literal["A", "B"]
    table: str  # where the figures are printed
    name: str  # the row's name in the table
    network: str  # the paper's network (Tables 2-3)
    model: str  # the zoo model that runs it
    stand_in: bool  # the zoo lacks the paper's network; ``model`` is the closest
    dataset: str
    partition: Partition
    target_accuracy: float
    epochs: int  # local epochs (Tables 2-3)
    batch_size: int  # mini-batch size (Tables 2-3)
    results: Mapping[str, PaperResult]  # by the paper's method name, ``METHODS`` order


def _row(
    group: Literal["A", "B"],
    name: str,
    network: str,
    model: str,
    dataset: str,
    partition: Partition,
    target: float,
    accuracies: tuple[float, ...],
    times: tuple[float | None, ...],
    *,
    batch_size: int,
    stand_in: bool = False,
) -> PaperJob:
    assert len(accuracies) == len(times) == len(METHODS)
    table = "Table 4 (Group A)" if group == "A" else "Table 5 (Group B)"
    return PaperJob(
        group, table, name, network, model, stand_in, dataset, partition, target, 5, batch_size,
        {m: PaperResult(t, a) for m, a, t in zip(METHODS, accuracies, times)},
    )


# Columns: Random, Genetic, FedCS, Greedy, BODS, RLDS, Meta-Greedy; accuracies, then times (min).
JOBS: tuple[PaperJob, ...] = (
    # Table 4, non-IID
    _row("A", "VGG", "VGG-16", "vgg6", "cifar10", "noniid", 0.55,
         (0.55, 0.54, 0.55, 0.43, 0.57, 0.56, 0.577),
         (2486, 1164.3, 1498.5, None, 455.1, 406.8, 291.3), stand_in=True, batch_size=30),
    _row("A", "Cnn", "CNN-A-non-IID", "cnn-a-noniid", "emnist-letters", "noniid", 0.80,
         (0.90, 0.80, 0.80, 0.83, 0.90, 0.897, 0.90),
         (44.25, 95.85, 27.39, 43.04, 15.88, 17.6, 11.9), batch_size=10),
    _row("A", "LeNet", "LeNet-5", "lenet5", "emnist-digits", "noniid", 0.984,
         (0.990, 0.988, 0.990, 0.986, 0.991, 0.991, 0.991),
         (43.81, 30.15, 33.37, 43.76, 28.84, 22.54, 12.37), batch_size=64),
    # Table 4, IID
    _row("A", "VGG", "VGG-16", "vgg6", "cifar10", "iid", 0.55,
         (0.610, 0.558, 0.603, 0.522, 0.603, 0.605, 0.602),
         (126.9, 231.4, 87.5, None, 57.7, 43.81, 30.34), stand_in=True, batch_size=30),
    _row("A", "Cnn", "CNN-A-IID", "cnn-a-iid", "emnist-letters", "iid", 0.930,
         (0.943, 0.928, 0.942, 0.928, 0.943, 0.935, 0.936),
         (52.05, 176.85, 27.45, 26.48, 19.25, 13.0, 12.88), batch_size=10),
    _row("A", "LeNet", "LeNet-5", "lenet5", "emnist-digits", "iid", 0.99,
         (0.9945, 0.9928, 0.9934, 0.990, 0.9946, 0.9946, 0.9936),
         (14.94, 6.03, 7.12, 17.98, 5.18, 4.02, 2.02), batch_size=64),
    # Table 5, non-IID
    _row("B", "ResNet", "ResNet-18", "resnet13", "cifar10", "noniid", 0.50,
         (0.546, 0.489, 0.523, 0.403, 0.583, 0.562, 0.590),
         (852.9, 621.5, 402.3, None, 219.8, 168.9, 149.8), stand_in=True, batch_size=30),
    _row("B", "Cnn", "CNN-B", "cnn-b", "fashion-mnist", "noniid", 0.73,
         (0.824, 0.767, 0.823, 0.764, 0.836, 0.830, 0.845),
         (47.1, 22.0, 18.5, 70.8, 13.8, 15.5, 13.0), batch_size=10),
    _row("B", "AlexNet", "AlexNet", "alexnet", "mnist", "noniid", 0.976,
         (0.989, 0.986, 0.987, 0.871, 0.990, 0.990, 0.990),
         (140.57, 60.0, 82.87, 181.2, 59.2, 53.87, 45.0), batch_size=64),
    # Table 5, IID
    _row("B", "ResNet", "ResNet-18", "resnet13", "cifar10", "iid", 0.740,
         (0.787, 0.754, 0.782, 0.743, 0.791, 0.785, 0.799),
         (65.93, 32.51, 31.4, 52.93, 15.9, 12.82, 10.6), stand_in=True, batch_size=30),
    _row("B", "Cnn", "CNN-B", "cnn-b", "fashion-mnist", "iid", 0.867,
         (0.868, 0.867, 0.868, 0.868, 0.869, 0.869, 0.871),
         (120.19, 38.99, 89.6, 36.13, 32.83, 19.7, 16.13), batch_size=10),
    _row("B", "AlexNet", "AlexNet", "alexnet", "mnist", "iid", 0.9933,
         (0.9938, 0.9938, 0.9939, 0.9935, 0.9939, 0.9943, 0.9940),
         (35.08, 19.44, 20.97, None, 21.65, 12.9, 10.8), batch_size=64),
)

CLAIMS: tuple[str, ...] = (
    "IID: Meta-Greedy up to 12.73x faster for a single job and 8.16x for the total time (Section 5, IID evaluation)",
    "non-IID: Meta-Greedy up to 7.53x faster for a single job and 7.16x for the total time (Section 5, non-IID evaluation)",
    "final accuracy up to 46.4% higher with Meta-Greedy (abstract)",
)
"""The paper's headline speed-ups, quoted: its "total time" is Formula 7's sum over jobs."""


def match(dataset: str, model: str, partition: str | None, target_accuracy: float | None) -> PaperJob | None:
    """The paper job with this set-up (the module docstring defines a match), or None."""
    if partition is None or target_accuracy is None:
        return None
    for job in JOBS:
        if (
            job.dataset == dataset
            and job.model == model
            and job.partition == partition
            and math.isclose(job.target_accuracy, target_accuracy, rel_tol=0.0, abs_tol=1e-9)
        ):
            return job
    return None


def figures_for(jobs: Mapping[str, JobInfo], partitions: Mapping[str, str]) -> dict[str, Any]:
    """The paper's figures for each of our jobs whose set-up matches one of its rows, and a one-line note.

    ``{"matches": {job: {...}}, "note": str}``, the ``paper`` part of `mjfl
    report --json`; ``partitions`` names each job's partition as the tables
    do (``results.runs.partition_name``); a job without one matches nothing.
    """
    matches: dict[str, Any] = {}
    for name, info in jobs.items():
        found = match(info.dataset, info.model, partitions.get(name), info.target_accuracy)
        if found is None:
            continue
        matches[name] = {
            "table": found.table,
            "group": found.group,
            "job": found.name,
            "network": found.network,
            "model": found.model,
            "stand_in": found.stand_in,
            "dataset": found.dataset,
            "partition": found.partition,
            "target_accuracy": found.target_accuracy,
            "methods": {
                method: {
                    "time_to_target_min": result.time_to_target_min,
                    "time_to_target_s": result.time_to_target_s,
                    "final_accuracy": result.final_accuracy,
                }
                for method, result in found.results.items()
            },
        }
    if not matches:
        note = (
            "the paper's figures: no job here matches a set-up of its Tables 4-5 "
            "(same data set, model, partition and target accuracy; docs/results.md)"
        )
    else:
        pairs = ", ".join(
            f"{name} = {m['table']} {m['job']} {m['partition']} ({m['network']}"
            + (f", run as {m['model']}, a stand-in)" if m["stand_in"] else ")")
            for name, m in matches.items()
        )
        note = f"(paper) rows: the paper's Tables 4-5, its minutes x 60 (it prints no group time); {pairs}"
    return {"matches": matches, "note": note}

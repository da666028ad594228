"""The paper's figures (Tables 4-5) and the example configs of its groups A and B."""

import os
import pickle
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from processes import mjfl_args
from repository import EXAMPLES

from mjfl.coordinator.config import load_config
from mjfl.coordinator.results import paper
from mjfl.jobs.datasets import CIFAR10_FILES, DATA_DIR_ENV, idx_file_names, load_dataset
from mjfl.jobs.models import MODEL_NAMES
from mjfl.jobs.partition import partition

GROUPS = {"A": EXAMPLES / "paper-group-a.toml", "B": EXAMPLES / "paper-group-b.toml"}


def test_the_tables_hold_each_group_and_partition_once_with_every_method() -> None:
    rows = {(job.group, job.partition, job.name) for job in paper.JOBS}
    assert len(rows) == len(paper.JOBS) == 12
    for job in paper.JOBS:
        assert tuple(job.results) == paper.METHODS
        assert job.model in MODEL_NAMES
        assert job.stand_in == (job.network in ("VGG-16", "ResNet-18"))
        # Table 4-5's bold: Meta-Greedy reaches every target first (the paper's claim, Section 5).
        times = {m: r.time_to_target_min for m, r in job.results.items() if r.time_to_target_min is not None}
        assert min(times, key=times.__getitem__) == "Meta-Greedy", job
    assert paper.match("cifar10", "vgg6", "noniid", 0.55) is not paper.match("cifar10", "vgg6", "iid", 0.55)
    assert paper.match("cifar10", "vgg6", "noniid", 0.56) is None
    assert paper.match("cifar10", "resnet13", "noniid", 0.55) is None
    assert paper.match("mnist", "alexnet", None, 0.976) is None


@pytest.mark.parametrize("group", ["A", "B"])
def test_each_example_job_is_a_job_of_the_papers_group(group: str) -> None:
    config = load_config(GROUPS[group])
    assert config.fleet.size == 100
    assert config.scheduler.omega == "sqrt"
    matched = []
    for job in config.jobs:
        found = paper.match(job.dataset, job.model, job.partition, job.target_accuracy)
        assert found is not None, job.name
        assert (found.group, job.training.epochs, job.training.batch_size, job.classes_per_device) == (group, found.epochs, found.batch_size, 2)
        assert job.data_dir is None  # read from $MJFL_DATA_DIR, the folder the user gives
        matched.append(found.name)
    assert sorted(matched) == sorted(j.name for j in paper.JOBS if j.group == group and j.partition == "noniid")


def write_idx(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes())


def write_fake_data(root: Path, samples: int) -> None:
    """Each data set of groups A and B in docs/data.md's layout: ``samples`` training images, a fifth as many test."""
    rng = np.random.default_rng(0)
    folders = {"mnist": "mnist", "fashion-mnist": "fashion-mnist", "emnist-letters": "emnist", "emnist-digits": "emnist"}
    for name, folder in folders.items():
        first, classes = (1, 26) if name == "emnist-letters" else (0, 10)  # EMNIST letters are labelled 1..26
        for count, (images, labels) in zip((samples, samples // 5), (idx_file_names(name)[:2], idx_file_names(name)[2:])):
            write_idx(root / folder / images, rng.integers(0, 256, (count, 28, 28), dtype=np.uint8))
            write_idx(root / folder / labels, (first + np.arange(count) % classes).astype(np.uint8))
    cifar = root / "cifar-10-batches-py"
    cifar.mkdir(parents=True)
    for file in CIFAR10_FILES:
        count = samples // 5  # five training batches, and a test batch as large as one
        batch = {b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8), b"labels": [i % 10 for i in range(count)]}
        (cifar / file).write_bytes(pickle.dumps(batch, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))


@pytest.mark.parametrize("group", ["A", "B"])
def test_an_example_reads_its_data_from_the_given_folder_and_splits_it_over_100_devices(
    group: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_data(tmp_path, 400)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    config = load_config(GROUPS[group])
    for m, job in enumerate(config.jobs):
        # As the run prepares a job (coordinator/run/preparation.py): load, then cut into a shard per device.
        data = load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels, seed=config.seed)
        assert data.train_x.shape[0] == 400 and data.num_classes == (26 if job.dataset == "emnist-letters" else 10)
        shards = partition(data.train_y, config.fleet.size, job.partition, np.random.default_rng([config.seed, 2, m]))
        assert len(shards) == 100
        assert {len(np.unique(data.train_y[s])) for s in shards} == {2}  # the paper's two classes a device


def test_an_example_without_its_data_names_the_missing_files(tmp_path: Path) -> None:
    env = os.environ | {DATA_DIR_ENV: str(tmp_path / "data")}
    result = subprocess.run(
        mjfl_args("simulate", str(GROUPS["A"]), "--methods", "random", "--out", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "data set 'cifar10': expected files data_batch_1" in errors[0]
    assert f"{tmp_path / 'data' / 'cifar-10-batches-py'} (missing)" in errors[0]
    assert "Traceback" not in result.stderr

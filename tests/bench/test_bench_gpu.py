"""`mjfl bench gpu` (mjfl.bench.gpu) at a tiny size on this CPU (--cpu): the data it writes and the figures it reports."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from mjfl.bench.gpu import PAPER_SETS, run_gpu_bench
from mjfl.errors import UserError


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_it_writes_paper_shaped_data_and_reports_both_parts(tmp_path):
    import torch

    figures = run_gpu_bench(tmp_path / "gpu", scale=0.001, rounds=1, devices_per_step=(2,), tasks=2, cpu=True,
                            json_path=tmp_path / "gpu.json", console=Console(quiet=True))
    assert figures["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    written = json.loads((tmp_path / "gpu.json").read_text())
    assert written["simulation"] == figures["simulation"] and written["device"] == figures["device"]
    for name, (channels, size, classes, _, _) in PAPER_SETS.items():
        with np.load(tmp_path / "gpu" / "data" / f"{name}.npz") as data:
            assert data["x_train"].shape[1:] == (size, size, channels) and data["x_train"].dtype == np.uint8
            assert set(np.unique(data["y_train"])) == set(range(classes))  # every class, for 100 devices' shards
    assert list(figures["device_trainings"]) == ["lenet5", "cnn-a-noniid", "vgg6"]
    assert all(entry["batched"]["2"] > 0 for entry in figures["device_trainings"].values())
    simulation = figures["simulation"]
    assert simulation["devices"] == 100 and simulation["device_trainings"] > 0 and simulation["wall_s"] > 0
    assert set(simulation["jobs"]) == {"vgg", "cnn", "lenet"}


def test_bad_sizes_name_the_option(tmp_path):
    with pytest.raises(UserError, match="--scale 2"):
        run_gpu_bench(tmp_path, scale=2, console=Console(quiet=True))
    with pytest.raises(UserError, match="--rounds 0"):
        run_gpu_bench(tmp_path, rounds=0, console=Console(quiet=True))
    with pytest.raises(UserError, match="--devices-per-step ''"):
        run_gpu_bench(tmp_path, devices_per_step=(), console=Console(quiet=True))


def test_without_a_gpu_it_refuses_unless_told_to_run_on_the_cpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="no CUDA device here: .* give --cpu"):
        run_gpu_bench(tmp_path, console=Console(quiet=True))
    assert not (tmp_path / "data").exists()

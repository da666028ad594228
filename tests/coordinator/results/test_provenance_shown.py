"""A run's provenance as the report and the dashboard show it: the whole record, and a row a person reads."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from mjfl.coordinator.results.provenance import (
    provenance_document,
    provenance_summary,
    provenance_table,
)
from mjfl.coordinator.storage.records import DeviceAdmission, ProgramBuild, RunProvenance
from mjfl.ids import DeviceId, JobId

RUN = RunProvenance(
    "r1", "2026-11-28T00:00:00+00:00", "seed = 1\n", "run.toml", "1" * 64, (),
    {"mjfl": "0.1.0", "mjfl_commit": "abcdef0123456789", "torch": "2.13.0", "executorch": None},
    (ProgramBuild(JobId("cnn"), "2" * 64, 10, "/cache/cnn.pte", (5, 5, 4)),),
)


def admitted(device: str, shard: int | None, hardware: dict[str, Any] | None, app: dict[str, Any]) -> DeviceAdmission:
    hello = None if hardware is None else {"device_id": device, "runtime": "executorch", "versions": [1], "hardware": hardware}
    return DeviceAdmission("r1", DeviceId(device), "2026-11-28T00:00:01+00:00", shard, hello, {"source": "hello"}, app)


ADMISSIONS = [
    admitted("pixel", 0, {"model": "Pixel 7"}, {"sha256": "3" * 64, "source": "adb"}),
    admitted("emu-0", 1, {"model": "emulated", "emulated": True}, {"sha256": None, "absent": "an emulated device"}),
    admitted("wifi", 2, {"model": "Pixel 7"}, {"sha256": None, "missing": "not attached over adb"}),
    admitted("late", None, {"model": "emulated", "emulated": True}, {"sha256": None, "absent": "an emulated device"}),
    admitted("pixel", 0, {"model": "Pixel 7"}, {"sha256": "4" * 64, "source": "adb"}),  # back with another build
]


def test_the_document_holds_every_admission_and_each_devices_shard() -> None:
    document = provenance_document(RUN, ADMISSIONS)
    assert document is not None
    assert document["config"] == {"file": "run.toml", "sha256": "1" * 64, "redacted": [], "text": "seed = 1\n"}
    assert document["programs"] == [{"job": "cnn", "sha256": "2" * 64, "size": 10, "file": "/cache/cnn.pte", "shard_samples": [5, 5, 4]}]
    assert [d["device"] for d in document["devices"]] == ["pixel", "emu-0", "wifi", "late", "pixel"]
    assert document["shards"] == {"pixel": 0, "emu-0": 1, "wifi": 2, "late": None}
    assert provenance_document(None, []) is None  # a run recorded before mjfl kept it


def test_the_summary_counts_devices_by_model_and_apps_by_build_as_last_admitted() -> None:
    document = provenance_document(RUN, ADMISSIONS)
    assert document is not None
    summary = provenance_summary(document)
    assert summary["versions"] == "mjfl 0.1.0 (abcdef012345), torch 2.13.0, executorch none"
    assert summary["config"] == "sha256 111111111111" and summary["programs"] == "cnn 222222222222"
    assert summary["devices"] == "4: Pixel 7 x2, emulated x2 (1 without a shard)"
    assert summary["apps"] == "no app x2, 444444444444 x1, unknown x1"  # most first


def test_the_table_has_a_row_per_run_and_says_which_kept_none() -> None:
    console = Console(file=io.StringIO(), width=300)
    console.print(provenance_table({"r1": provenance_document(RUN, ADMISSIONS), "r0": None}))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Pixel 7 x2" in shown and "444444444444 x1" in shown
    assert "not kept (recorded before mjfl kept provenance)" in shown

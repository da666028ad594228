"""The report's files: JSON documents (summary.json) and rounds.csv."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from mjfl.coordinator.results.files import CSV_COLUMNS, write_json, write_rounds_csv
from mjfl.coordinator.results.outcomes import summary


def test_write_json_is_json_with_null(results: dict, tmp_path: Path) -> None:
    figures = summary(results)
    path = write_json(tmp_path / "out" / "summary.json", figures)
    text = path.read_text()
    assert json.loads(text) == figures
    assert '"time_to_target_s": null' in text and "NaN" not in text
    assert text.endswith("}\n") and text.startswith('{\n  "methods"')


def test_write_json_refuses_nan_and_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_json(tmp_path / "bad.json", {"x": math.nan})
    assert list(tmp_path.iterdir()) == []


def test_rounds_csv_has_header_and_a_row_per_round(results: dict, tmp_path: Path) -> None:
    path = write_rounds_csv(tmp_path / "rounds.csv", results)
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) - 1 == sum(len(records) for _, records in results.values())
    first = dict(zip(rows[0], rows[1]))
    assert first == {
        "method": "meta-greedy", "run_id": "mg", "job": "cnn", "round": "1",
        "started_s": "0.0", "ended_s": "10.0", "accuracy": "0.5", "loss": "1.0",
        "aggregated": "1", "devices": "2", "failed": "1", "expected_time_s": "10.0",
        "cost": "2.5", "winner": "bods", "plan": "d3;d1",
    }  # fmt: skip
    random_rows = [dict(zip(rows[0], row)) for row in rows[1:] if row[0] == "random"]
    assert [(r["job"], r["round"]) for r in random_rows] == [
        ("cnn", "1"), ("cnn", "2"), ("lenet", "1"), ("lenet", "2"),
    ]  # fmt: skip
    assert all(r["winner"] == "" for r in random_rows)


def test_a_json_document_is_as_readable_as_a_plain_file(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert write_json(tmp_path / "doc.json", {}).stat().st_mode == plain.stat().st_mode

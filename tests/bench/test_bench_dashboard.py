"""`mjfl bench dashboard` (mjfl.bench.dashboard) at a tiny size, in the real headless Chromium."""

import json

import pytest
from rich.console import Console

from mjfl.bench.dashboard import run_dashboard_bench, write_run_database
from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.errors import UserError


def test_the_synthetic_run_lists_every_device(tmp_path):
    key = write_run_database(tmp_path, devices=50, jobs=2, rounds=3, per_round=10)
    view = Catalog([tmp_path]).run(key)
    assert view is not None
    assert len(view["devices"]) == 50 and [len(j["series"]["accuracy"]) for j in view["jobs"]] == [3, 3]


def test_the_bench_measures_a_page_load(tmp_path, needs_chromium):
    out = tmp_path / "dashboard.json"
    figures = run_dashboard_bench(devices=50, rounds=3, per_round=10, timeline_rounds=4, loads=2, json_path=out,
                                  console=Console(quiet=True))
    assert json.loads(out.read_text()) == figures
    assert figures["devices"] == 50 and 0 < figures["api_run_s"] < figures["page_load_s"] < 30
    assert figures["json_bytes"] > 50 * 100
    # The timeline's run: 50 devices x 4 device rounds each, every bar drawn (its data-bars), its render within its load.
    assert figures["timeline_bars"] == 200 and 0 < figures["timeline_render_s"] < figures["timeline_load_s"] < 30
    assert figures["timeline_first_load_s"] > 0 and figures["timeline_first_api_s"] > 0
    assert figures["goals"]["timeline_load_s"] == "< 1"
    # Columns: a bar's six figures (device, job, round, start, end, status) and their commas, no names repeated.
    assert 200 * 12 < figures["timeline_json_bytes"] < 200 * 12 + 5_000


def test_a_run_where_some_device_never_trains_names_the_options():
    with pytest.raises(UserError, match="every device trains once"):
        run_dashboard_bench(devices=100, jobs=1, rounds=2, per_round=10, console=Console(quiet=True))

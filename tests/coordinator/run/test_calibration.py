"""A profiling session over real sockets against emulated devices that impersonate known phones."""

import io
import json
import queue
import re
import threading
import urllib.request

import pytest
from rich.console import Console

from mjfl.commands.profile import profile_run, show
from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.driver import Output
from mjfl.profiling.observations import Observation, fit_profiles
from mjfl.profiling.profiles import DeviceProfile, load_profiles, save_profiles

pytestmark = pytest.mark.slow

# Four phones slower than this machine trains LeNet-5 on a few dozen digits,
# so the emulated devices can follow the profiles exactly.
PHONES = [(0.008, 0.25), (0.010, 0.25), (0.012, 0.2), (0.009, 0.3)]  # (a, 1/mu as a fraction of a)


def test_session_recovers_the_impersonated_profiles(tmp_path):
    phones = [
        DeviceProfile(device_id=f"phone-{i}", a=a, mu=1 / (ratio * a), n=30, source="profiled")
        for i, (a, ratio) in enumerate(PHONES)
    ]
    save_profiles(tmp_path / "phones.json", phones, created="2026-01-01T00:00:00+00:00")
    config = parse_config(
        {
            "seed": 1,
            "out_dir": str(tmp_path / "profile"),  # `--out` names the session's folder and its database's, as the README's
            "fleet": {"profiles": "phones.json", "runtime": "torch", "workers": 4},
            "testbed": {"port": 0},
            "jobs": [{"name": "lenet", "model": "lenet5", "image_size": 12, "batch_size": 8, "partition": "iid"}],
        },
        base=tmp_path,
    )
    printed = Printed()
    console = Console(file=printed, record=True, width=200)
    out = tmp_path / "profile"
    seen: list[dict] = []
    watcher = threading.Thread(target=watch_dashboard, args=(printed, seen), daemon=True)
    watcher.start()
    profiles = profile_run(config, Output(out, console, dashboard_port=0), emulate=4, rounds=12)
    watcher.join(60)

    # The session's live dashboard showed its devices, what they are, and their calibration tasks as they ended.
    assert seen, "the dashboard pushed no snapshot with a finished task"
    view = seen[-1]
    assert view["run"]["label"] == "profiling session" and view["jobs"] == []
    assert sorted(row["device"] for row in view["devices"]) == sorted(p.device_id for p in profiles)
    assert {row["kind"] for row in view["devices"]} == {"emulated"}
    assert any(row["ok"] >= 1 for row in view["devices"])
    assert sorted(e["device"] for e in view["events"] if e["kind"] == "joined") == sorted(p.device_id for p in profiles)

    assert len(profiles) == 4
    saved = {p.device_id: p for p in load_profiles(out / "profiles.json")}
    for profile in profiles:
        truth = profile.hardware["a"]  # the impersonated phone's a, sent in its hello
        assert profile.a == pytest.approx(truth, rel=0.10), profile.device_id
        assert profile.a_ci[0] <= profile.a <= profile.a_ci[1]
        assert profile.n == 12 and profile.ks_statistic is not None
        assert profile.compute is not None and profile.communication is not None
        assert saved[profile.device_id].a == profile.a
    rows = (out / "observations.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 4 * 12  # the warm-up task is not kept
    assert len(list((out / "plots").glob("cdf-*.png"))) == 4
    # The table's "emulated a" is each device's own impersonated phone.
    text = console.export_text()
    assert re.search(r"^job lenet: program \d+\.\d MB, planned memory \d+\.\d MB \(batches up to 8\)$", text, re.MULTILINE), text
    rows = {cells[0]: cells for line in text.splitlines()
            if (cells := [c.strip() for c in line.split("│")[1:-1]]) and cells[0].startswith("emu-")}
    assert "emulated a" in text and len(rows) == 4
    for profile in profiles:
        assert rows[profile.device_id][-1] == f"{profile.hardware['a'] * 1e3:.3f}"
    document = json.loads((out / "profiles.json").read_text())
    assert document["format"] == "mjfl-profiles/1" and len(document["devices"]) == 4


def test_fit_profiles_needs_three_observations():
    rows = [Observation("d1", "j", 1, 10, 0.5 + i / 100, 0.0, 0.4 + i / 100, 0.0) for i in range(5)]
    rows += [Observation("d2", "j", 1, 10, 0.5, 0.0, 0.4, 0.0)]
    profiles, skipped = fit_profiles(rows)
    assert [p.device_id for p in profiles] == ["d1"]
    assert "only 1" in skipped["d2"]


def test_show_works_without_observations(tmp_path):
    save_profiles(tmp_path / "p.json", [DeviceProfile(device_id="x", a=0.01, mu=50.0)], created="2026-01-01T00:00:00+00:00")
    console = Console(record=True, width=200)
    written = show(tmp_path / "p.json", console=console)
    assert [p.name for p in written] == ["cdf-x.png"]
    assert "without data" in console.export_text()


class Printed(io.StringIO):
    """A console's output that hands on the dashboard's address as soon as it is printed."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: queue.Queue[str] = queue.Queue()

    def write(self, text: str) -> int:
        found = re.search(r"dashboard: (http://\S+)", text)
        if found:
            self.urls.put(found.group(1))
        return super().write(text)


def watch_dashboard(printed: Printed, seen: list[dict]) -> None:
    """Read the live dashboard's pushes until one shows a finished calibration task (or the stream ends)."""
    url = printed.urls.get(timeout=300)
    with urllib.request.urlopen(url + "api/live/events", timeout=60) as response:
        for raw in response:
            line = raw.decode()
            if line.startswith("data: "):
                view = json.loads(line.removeprefix("data: "))
                if any(row["ok"] >= 1 for row in view["devices"]):
                    seen.append(view)
                    return

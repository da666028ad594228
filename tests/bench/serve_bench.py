"""Running `mjfl bench serve` from a test: its figures and what it said (test_bench_serve*.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path


def fast_phones(path: Path) -> Path:
    """A profile file of phones a hundred times faster than the synthetic fleet's: rounds of a few milliseconds."""
    from mjfl.profiling.profiles import DeviceProfile, save_profiles

    phones = [DeviceProfile(device_id=f"fast-{n}", a=1e-5, mu=1e5, source="synthetic") for n in range(8)]
    save_profiles(path, phones, created="2026-01-01T00:00:00+00:00")
    return path


def run_bench(folder: Path, args: list[str]) -> tuple[dict, str]:
    """`mjfl bench serve ARGS` with fast phones, in ``folder``: its figures and what it said on stderr."""
    profiles = ["--profiles", str(fast_phones(folder / "phones.json"))]
    bench = subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "bench", "serve", *args, *profiles, "--json", str(folder / "serve.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        _, said = bench.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGTERM)  # the bench stops the labs and runs it started, in their own sessions
        _, said = bench.communicate(timeout=120)
    assert bench.returncode == 0, said[-4000:]
    return json.loads((folder / "serve.json").read_text()), said

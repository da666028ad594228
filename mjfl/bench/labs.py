"""The labs and runs the benchmarks start: `mjfl serve` and `mjfl testbed run` as processes, asked as a client asks.

``lab(folder, toml, emulate, deadline)`` starts a service with ``emulate``
emulated devices and yields a ``Lab`` once they are all connected: its API
asked over HTTP with the admin's token, as any client asks it. Every
process is started in a session of its own and stopped when its part ends,
fails or the bench is stopped (Ctrl-C, SIGTERM): SIGTERM, then SIGKILL to its
whole process group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mjfl.coordinator.lab.store import FINAL

POLL_S = 0.5  # how often a bench asks a lab how its runs stand
STOP_S = 30.0  # how long a stopped service or run may take to exit before its group is killed

LAB = """
seed = {seed}
program_cache = "{programs}"
[fleet]
size = {size}
{profiles}
[server]
port = 0
wait_timeout_s = 300
[api]
port = 0
[limits]
max_running = {max_running}
max_queued_per_researcher = {queued}
share = "{share}"
"""

RUN = """
seed = {seed}
[fleet]
size = {size}
[scheduler]
method = "{method}"
min_plan = 2
[testbed]
port = 0
"""

JOB = """
[[jobs]]
name = "{name}"
model = "{model}"
image_size = {image_size}
partition = "iid"
epochs = 1
batch_size = 8
fraction = {fraction}
target_accuracy = {target}
max_rounds = {rounds}
"""


class Process:
    """A `mjfl` command in a session of its own, its terminal output in a file (a pipe could fill)."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.log = log
        with open(log, "w") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mjfl.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM (the command stops as on Ctrl-C), then SIGKILL to its process group, until none of it is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_S)
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # its worker processes, were any left
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self.proc.wait(STOP_S)


@contextlib.contextmanager
def started(args: Sequence[str], log: Path) -> Iterator[Process]:
    process = Process(args, log)
    try:
        yield process
    finally:
        process.stop()


@dataclasses.dataclass
class Lab:
    """A started `mjfl serve`, asked over its API as any client asks it."""

    process: Process
    url: str
    admin: str

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One request; its JSON answer (a RuntimeError with the lab's reason if refused)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {token or self.admin}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"the lab refused {method} {path}: {exc.code} {exc.read()[:300]!r}") from None

    def researchers(self, count: int) -> list[str]:
        """Tokens of ``count`` new researchers."""
        return [self.call("POST", "/api/lab/researchers", {"name": f"r{k + 1}"})["token"] for k in range(count)]

    def submit(self, toml: str, token: str) -> str:
        return str(self.call("POST", "/api/lab/runs", {"config": toml}, token=token)["run"]["id"])

    def runs(self) -> dict[str, dict[str, Any]]:
        return {run["id"]: run for run in self.call("GET", "/api/lab/runs")["runs"]}

    def until(self, holds: Callable[[], bool], deadline: float, what: str) -> None:
        """Poll ``holds`` until it does; a RuntimeError if the service exits or the deadline passes."""
        while not holds():
            if self.process.proc.poll() is not None:
                raise RuntimeError(f"mjfl serve exited ({self.process.proc.returncode}): {self.process.said()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(POLL_S)


@contextlib.contextmanager
def lab(folder: Path, lab_toml: str, emulate: int, deadline: float) -> Iterator[Lab]:
    """`mjfl serve` of ``lab_toml`` with ``emulate`` emulated devices, once they are all connected; stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lab.toml").write_text(lab_toml)
    args = ["serve", str(folder / "lab.toml"), "--emulate", str(emulate), "--out", str(folder / "lab")]
    with started(args, folder / "serve.out") as process:
        lab = Lab(process, "", "")
        lab.until(lambda: "researchers' API: " in process.said(), deadline, "the service's API")
        lab.url = process.said().split("researchers' API: ")[1].split("/api/lab")[0]
        lab.admin = (folder / "lab" / "admin.token").read_text().strip()
        lab.until(lambda: lab.call("GET", "/api/lab/health")["devices"] >= emulate, deadline, f"{emulate} devices")
        yield lab


def until_ended(lab: Lab, ids: Sequence[str], deadline: float, update: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """The runs as the lab shows them once all have ended (or at the deadline, as they stand)."""
    while True:
        views = lab.runs()
        ended = sum(views[i]["state"] in FINAL for i in ids)
        update(f"{ended}/{len(ids)} runs ended")
        if ended == len(ids) or time.monotonic() > deadline or lab.process.proc.poll() is not None:
            return views
        time.sleep(POLL_S)


def wall(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()



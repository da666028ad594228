"""A real `mjfl serve` for the tests: its own process, emulated devices, the researchers' API over HTTP.

``Lab.start(processes, folder)`` writes a LAB.toml (ports 0), starts the
service and reads its API address and admin token from what it prints and
writes. ``call`` is one API request as any client sends it (urllib, JSON),
answering ``(status, document)``. Importable as ``lab_service`` (pytest puts
tests/ on the path for its conftest.py).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processes import Process, mjfl_args
from waiting import eventually

# Every test's lab keeps the runs' exported programs where the repository's runs do, so no test exports them again.
PROGRAMS = Path(__file__).resolve().parent.parent / ".mjfl-cache" / "programs"

LAB = """{top}
program_cache = "{programs}"
[fleet]
size = {size}
workers = 2
[server]
port = 0
wait_timeout_s = 120
[api]
port = 0
[limits]
max_running = {max_running}
max_queued_per_researcher = {max_queued}
{limits}"""

# A run of two small jobs on the lab's devices (a few seconds a run once their programs are exported).
RUN = """
seed = {seed}
[fleet]
size = {size}
shards = "present"
[scheduler]
method = "{method}"
min_plan = 2
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
epochs = 1
batch_size = 8
fraction = 0.5
target_accuracy = {target}
max_rounds = {rounds}
[[jobs]]
name = "cnn"
model = "cnn-a-noniid"
image_size = 8
partition = "iid"
epochs = 1
batch_size = 8
fraction = 0.5
target_accuracy = {target}
max_rounds = {rounds}
"""


def run_config(*, method: str = "random", seed: int = 1, size: int = 4, target: float = 0.8, rounds: int = 40) -> str:
    return RUN.format(method=method, seed=seed, size=size, target=target, rounds=rounds)


@dataclass
class Lab:
    """A started lab service."""

    process: Process
    folder: Path
    url: str
    admin: str

    @classmethod
    def start(
        cls, processes: Callable[..., Process], folder: Path, *, devices: int = 8, max_running: int = 4,
        max_queued: int = 20, lab_file: Path | None = None, options: Sequence[str] | None = None,
        top: str = "", limits: str = "",
    ) -> Lab:
        """The service with ``devices`` connected; ``options``, its devices' options (default: ``--emulate DEVICES``);
        ``top`` and ``limits``, more lines for LAB.toml's top and its ``[limits]``."""
        if lab_file is None:
            lab_file = folder / "lab.toml"
            lab_file.write_text(LAB.format(size=devices, max_running=max_running, max_queued=max_queued, programs=PROGRAMS,
                                           top=top, limits=limits))
        out = folder / "out"
        options = ("--emulate", str(devices)) if options is None else options
        process = processes(mjfl_args("serve", str(lab_file), *options, "--out", str(out)), read=True)
        line = process.line_with("researchers' API: ", 300)
        url = line.split("researchers' API: ")[1].split("/api/lab")[0]
        lab = cls(process, out, url, (out / "admin.token").read_text().strip())
        lab.until(lambda: lab.call("GET", "/api/lab/health")[1]["devices"] == devices, 300, what=f"{devices} devices connected")
        return lab

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None, raw: bytes | None = None,
             headers: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, Any]:
        """One request; (status, its JSON document, or its bytes when not JSON)."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if token or (token is None and self.admin):
            request.add_header("Authorization", f"Bearer {token or self.admin}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, _decoded(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _decoded(exc.read())

    def researcher(self, name: str, *, admin: bool = False) -> str:
        status, made = self.call("POST", "/api/lab/researchers", {"name": name, "admin": admin})
        assert status == 201, made
        return str(made["token"])

    def submit(self, config: str, token: str, key: str | None = None, files: dict[str, bytes] | None = None) -> dict[str, Any]:
        status, answer = self.call("POST", "/api/lab/runs", submit_body(config, key, files), token=token)
        assert status in (200, 201), answer
        return dict(answer["run"])

    def run(self, run_id: str) -> dict[str, Any]:
        status, answer = self.call("GET", f"/api/lab/runs/{run_id}")
        assert status == 200, answer
        return dict(answer["run"])

    def tasks(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/api/lab/tasks")[1]["tasks"])

    def devices(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/api/lab/devices")[1]["devices"])

    def ended(self, run_id: str, timeout: float = 300) -> dict[str, Any]:
        """The run once it has ended (its state final)."""
        final = ("completed", "failed", "cancelled", "abandoned")
        self.until(lambda: self.run(run_id)["state"] in final, timeout, what=f"run {run_id} to end")
        return self.run(run_id)

    def until(self, holds: Callable[[], Any], timeout: float, *, what: str | None = None) -> Any:
        """Poll ``holds`` until it does (its value); fail at once if the service exits."""
        return eventually(
            holds, timeout=timeout, interval=0.2, what=what,
            ignoring=(urllib.error.URLError, ConnectionError),  # not listening yet
            stop_if=self._exited, explain=lambda: "its output, the end:\n" + "".join(self.process.output)[-6000:],
        )

    def _exited(self) -> str | None:
        code = self.process.proc.poll()
        return None if code is None else f"mjfl serve exited ({code})"


def submit_body(config: str, key: str | None = None, files: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A submit request's body, as docs/lab-api.yaml says: ``files`` base64."""
    body: dict[str, Any] = {"config": config}
    if key:
        body["key"] = key
    if files:
        body["files"] = {name: base64.b64encode(data).decode("ascii") for name, data in files.items()}
    return body


def _decoded(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data

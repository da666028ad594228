"""The researchers' commands against a lab's API (docs/lab-api.yaml): submit, runs, log, cancel, pull, lab ...

Each is one HTTP call (or a few, to follow), with the lab's address and the
researcher's token from ``--lab`` / ``--token`` or ``MJFL_LAB`` /
``MJFL_TOKEN``. A refusal prints the lab's reason and exits 2 (a script
reads the same ``code`` with ``--json``); a lab that cannot be reached is
one line naming the address.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import tarfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mjfl.addresses import LAB_API_PORT, LOOPBACK
from mjfl.commands.secrets import owner_only_stdout
from mjfl.coordinator.lab.store import FINAL
from mjfl.errors import Refusal, UserError
from mjfl.jobs.base import is_factory_file

DEFAULT_LAB = f"http://{LOOPBACK}:{LAB_API_PORT}"
CODE_CHECK_WAIT_S = 900.0  # how long a submit with model files waits for the lab's answer
FOLLOW_EVERY_S = 0.5  # how often --follow and --wait ask again


@dataclass(frozen=True)
class LabClient:
    """The lab at ``url``, asked as the researcher whose ``token`` this is."""

    url: str
    token: str | None
    timeout_s: float = 60.0

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; the answer's JSON, or the lab's Refusal."""
        return json.loads(self._send(method, path, body))

    def raw(self, path: str) -> bytes:
        return self._send("GET", path, None)

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise _refusal(exc) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(f"no lab answers at {self.url} ({reason}); give --lab URL or MJFL_LAB") from None


def client(lab: str | None, token: str | None) -> LabClient:
    url = lab or DEFAULT_LAB
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--lab {url}: give the lab's API address, http://HOST:PORT")
    return LabClient(url, token)


# What this command line adds to the lab's refusals, which the API words for any client (docs/lab-api.yaml).
_ON_THE_COMMAND_LINE = {
    "unauthorized": "give yours with --token or MJFL_TOKEN (an admin makes one: mjfl lab researcher add NAME)",
    "last_admin": "mjfl lab researcher add NAME --admin",
}


def _refusal(exc: urllib.error.HTTPError) -> Refusal:
    try:
        error = json.loads(exc.read())["error"]
        hint = _ON_THE_COMMAND_LINE.get(error["code"])
        message = error["message"] + (f"; {hint}" if hint else "")
        return Refusal(error["code"], message, status=exc.code, field=error.get("field"))
    except (ValueError, KeyError, TypeError):
        return Refusal("internal", f"the lab answered {exc.code} {exc.reason}", status=exc.code)


# -- the commands --------------------------------------------------------------


def submit(lab: LabClient, config: Path, *, key: str | None, wait: bool, as_json: bool, console: Console) -> bool:
    """Submit ``config``; print the run's id (its JSON with ``as_json``). With ``wait``, follow it: True iff
    every job reached its target."""
    if not config.is_file():
        raise UserError(f"{config}: no such config file")
    text = config.read_text(encoding="utf-8")
    body: dict[str, Any] = {"config": text}
    files = code_files_of(config, text)
    if files:
        body["files"] = {name: base64.b64encode(data).decode("ascii") for name, data in files.items()}
    if key is not None:
        body["key"] = key
    if files:
        # The lab checks a model of one's own in a child of its own before it answers, within its limits
        # (limits.code_check_s, after the child has started): the answer may take minutes.
        console.print(f"sending {len(files)} model file(s); the lab checks the model before it answers ...")
        lab = dataclasses.replace(lab, timeout_s=max(lab.timeout_s, CODE_CHECK_WAIT_S))
    run = lab.call("POST", "/api/lab/runs", body)["run"]
    _show(console, run, as_json)
    if not wait:
        return True
    last = run["state"]
    while run["state"] not in FINAL:
        time.sleep(FOLLOW_EVERY_S)
        run = lab.call("GET", f"/api/lab/runs/{run['id']}")["run"]
        if run["state"] != last and not as_json:
            console.print(f"{run['id']} {run['state']}" + (f": {run['reason']}" if run["reason"] else ""), highlight=False)
        last = run["state"]
    if as_json:
        _show(console, run, as_json)
    return run["state"] == "completed" and bool(run["targets_reached"])


def code_files_of(config: Path, text: str) -> dict[str, bytes]:
    """The files a config names as its models' code (each job's model file and its ``files``), by the names the
    config gives them, read from beside it: what a submit sends with the config (docs/lab-api.yaml)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}  # the lab names the error (config_invalid)
    named: dict[str, str] = {}
    jobs = raw.get("jobs")
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        model = job.get("model") if isinstance(job, dict) else None
        if not (isinstance(model, str) and is_factory_file(model)):
            continue
        named.setdefault(model.rsplit(":", 1)[0], f"jobs[{index}].model")
        helpers = job.get("files", [])
        for k, name in enumerate(helpers if isinstance(helpers, list) else []):
            if isinstance(name, str):
                named.setdefault(name, f"jobs[{index}].files[{k}]")
    files = {}
    for name, field in named.items():
        path = Path(name)
        if path.is_absolute() or ".." in path.parts:
            raise UserError(f"{config}: {field} {name!r}: a run sent to a lab names its files beside its config"
                            " or below it (models.py, nets/blocks.py)")
        try:
            files[path.as_posix()] = (config.parent / path).read_bytes()
        except OSError as exc:
            raise UserError(f"{config}: {field} {name!r}: cannot read {config.parent / path}: {exc.strerror or exc}") from None
    return files


def runs(lab: LabClient, *, as_json: bool, console: Console) -> None:
    """Every run of the lab as a table on ``console`` (stdout, for `mjfl runs | less`), or as JSON."""
    listed = lab.call("GET", "/api/lab/runs")["runs"]
    if as_json:
        print(json.dumps({"runs": listed}))  # stdout, as submit --json: for scripts and jq
        return
    table = Table(title=f"runs of {lab.url}")
    for column in ("run", "owner", "state", "method", "queued at"):
        table.add_column(column, no_wrap=True)
    table.add_column("why / how it ended", overflow="fold")  # whole, wrapped: a word longer than the column folds
    for run in listed:
        position = str(run["position"]) if run["position"] is not None else ""
        table.add_row(run["id"], run["owner"], run["state"], run["method"], position, run["reason"] or "")
    console.print(table)


def log(lab: LabClient, run: str, *, follow: bool, device: str | None, out: Callable[[str], None]) -> None:
    """Print the run's log lines (``device``: those naming it); with ``follow``, until the run has ended."""
    for line in _log_lines(lab, run, follow=follow, device=device):
        out(line)


def _log_lines(lab: LabClient, run: str, *, follow: bool, device: str | None) -> Iterator[str]:
    after = 0
    while True:
        query = f"?after={after}" + (f"&device={urllib.request.quote(device)}" if device else "")
        page = lab.call("GET", f"/api/lab/runs/{run}/log{query}")
        yield from page["lines"]
        advanced, after = page["next"] != after, page["next"]
        if page["final"] or not (follow or advanced):
            return
        if not advanced:
            time.sleep(FOLLOW_EVERY_S)


def cancel(lab: LabClient, run: str, *, console: Console) -> None:
    answer = lab.call("POST", f"/api/lab/runs/{run}/cancel")["run"]
    _show(console, answer, False)


def pull(lab: LabClient, run: str, out: Path, *, console: Console) -> Path:
    """The run's folder, as `mjfl testbed run` writes it, into ``out`` (``mjfl report out``, ``mjfl dashboard out``)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: not an empty folder; give a new one")
    data = lab.raw(f"/api/lab/runs/{run}/archive")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            member.name = member.name.split("/", 1)[1] if "/" in member.name else "."
        tar.extractall(out, filter="data")
    console.print(f"pulled run {run} into {out} (mjfl report {out}, mjfl dashboard {out})", highlight=False, soft_wrap=True)
    return out


def add_researcher(lab: LabClient, name: str, *, admin: bool, console: Console) -> None:
    """Make ``name`` a token and print it alone on stdout (``owner_only_stdout``: a file there is made 0600 first)."""
    owner_only_stdout()
    made = lab.call("POST", "/api/lab/researchers", {"name": name, "admin": admin})
    console.print(f"{name}{' (admin)' if admin else ''}: give them this token, shown once:", highlight=False)
    print(made["token"])  # stdout alone, so a script can take it


def revoke_researcher(lab: LabClient, name: str, *, console: Console) -> None:
    lab.call("DELETE", f"/api/lab/researchers/{name}")
    console.print(f"{name}'s token is revoked: the lab refuses it from now on", highlight=False)


def drain(lab: LabClient, *, console: Console) -> None:
    answer = lab.call("POST", "/api/lab/drain")
    console.print(f"the lab admits no new run; it exits once its {answer['running']} running runs end", highlight=False)


def _show(console: Console, run: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"run": run}))
        return
    print(run["id"])  # stdout alone: RUN=$(mjfl submit ...)
    why = f": {run['reason']}" if run["reason"] else ""
    console.print(f"{run['id']} {run['state']}{why}", highlight=False, soft_wrap=True)

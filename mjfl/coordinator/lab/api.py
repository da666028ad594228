"""The researchers' HTTP API of a lab (its contract: docs/lab-api.yaml, OpenAPI 3.1).

Every path is under ``/api/lab``; every answer is JSON but a run's archive.
A request carries its researcher's token (``Authorization: Bearer TOKEN``)
except the health check. A refusal is ``{"error": {"code", "message",
"field"?}}`` with its HTTP status, so a script reads ``code``:

=====================  ======  ==================================================
code                   status  when
=====================  ======  ==================================================
unauthorized           401     no token, or one unknown or revoked
forbidden              403     not the run's owner nor an admin; not an admin
not_found              404     no such run, researcher or path
method_not_allowed     405     a path that takes another method
request_invalid        400     not JSON, a field missing or of the wrong type
request_too_large      413     over ``limits.max_request_kb``
config_invalid         400     the config is not TOML or a field is bad (``field``)
fleet_too_small        400     the run is made for more devices than the lab has
unsupported            400     something no lab run does
data_missing           400     a job's data set cannot be read in the lab (``field``)
custom_code_off        400     a job's model is the researcher's own; the lab runs none
custom_code_forbidden  403     a job's model is the researcher's own; the lab runs its admins' only
files_invalid          400     the files sent are not the ones the config names as its models'
model_invalid          400     a model of one's own failed its check (it raised; an operator without a rule)
model_timeout          400     ... took longer than ``limits.code_check_s``
model_cpu_limit        400     ... used more CPU than ``limits.code_cpu_s``
model_memory_limit     400     ... allocated more than ``limits.code_memory_mb``
model_crashed          400     ... ended its process
last_admin             409     the change would leave the lab with no admin
too_many_queued        429     the researcher's queued runs are at the limit
draining               503     the lab admits no new run
internal               500     our bug (logged in lab.log, never detailed here)
=====================  ======  ==================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import io
import json
import logging
import re
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

from mjfl import __version__
from mjfl.coordinator.dashboard.device_logs import SharedLog, device_log
from mjfl.coordinator.lab.admission import code_files
from mjfl.coordinator.lab.runlogs import LAB_LOG
from mjfl.coordinator.lab.runs import LabRuns
from mjfl.coordinator.lab.store import LabRun, LabStore, Researcher
from mjfl.errors import Refusal, StorageError

log = logging.getLogger(__name__)

NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # a researcher's name: in run ids and folder names
MAX_KEY = 200  # a submit key's characters
LOG_CHUNK = 256 * 1024  # the most of a run's log one request reads
CANCEL_WAIT_S = 30.0  # how long a cancel waits for a running run's engine to stop before answering

_WHO = web.RequestKey("mjfl.researcher", Researcher)  # the request's researcher, set by _tokens
_LAB = web.AppKey("lab", "LabApi")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TaskSpan = tuple[str, str, int, float, float, str]  # RemoteFleet.task_log's entries


class LabApi:
    """The API's handlers over the lab's store and runs (``lab_app`` routes them)."""

    def __init__(
        self, store: LabStore, runs: LabRuns, devices: Callable[[], list[dict[str, Any]]],
        tasks: Callable[[], Iterable[TaskSpan]], *, max_request_kb: int,
    ) -> None:
        self.store = store
        self.runs = runs
        self.devices = devices  # the lobby: each connected device and what it serves (``LabFleet.devices``)
        self.tasks = tasks  # the fleet's latest tasks: (device, wire job, round, sent, ended, outcome), loop time
        self.max_request_kb = max_request_kb
        # The service's own health: its event loop's lag (``loop.py``) and its devices' heartbeats, once it serves.
        self.loop: Callable[[], dict[str, Any]] | None = None
        self.heartbeats: Callable[[], dict[str, Any]] | None = None

    # -- runs -----------------------------------------------------------------

    async def submit(self, request: web.Request) -> web.Response:
        body = await _body(request)
        config, key = _text(body, "config"), body.get("key")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_KEY):
            raise Refusal("request_invalid", f"key must be a string of 1 to {MAX_KEY} characters", field="key")
        files = code_files(body.get("files"))
        who = request[_WHO]
        run, new = await self.runs.submit(who.name, config, key, files, admin=who.admin)
        return _json({"run": self.view(run)}, status=201 if new else 200)

    async def list_runs(self, request: web.Request) -> web.Response:
        queued = self._queue()
        return _json({"runs": [self.view(run, queued) for run in self.store.runs()]})

    async def get_run(self, request: web.Request) -> web.Response:
        return _json({"run": self.view(self._run(request))})

    async def cancel(self, request: web.Request) -> web.Response:
        run, who = self._run(request), request[_WHO]
        if run.owner != who.name and not who.admin:
            raise Refusal("forbidden", f"run {run.run_id} is {run.owner}'s: only its owner or an admin cancels it", status=403)
        run = self.runs.cancel(run.run_id)
        if not run.final:
            try:
                run = await asyncio.wait_for(self.runs.ended(run.run_id), CANCEL_WAIT_S)
            except TimeoutError:
                run = self._run(request)  # still stopping: the answer says so, and asking again is fine
        return _json({"run": self.view(run)})

    async def log_lines(self, request: web.Request) -> web.Response:
        run = self._run(request)
        after = _int_query(request, "after", 0)
        device = request.query.get("device")
        folder = self.runs.folder(run.run_id)
        chunk, end, at_end = await asyncio.to_thread(_read_from, folder / "mjfl.log", after)
        lines = chunk.splitlines()
        if device and after == 0:
            # A device's own lines, the first time: the run's and, for a device the lab runs itself (emulated),
            # the lab log's that name it while the run ran; following on, the run's new lines that name it.
            lines = (await asyncio.to_thread(device_log, folder, device, shared=self._shared_log(run)))["lines"]
        elif device:
            lines = [line for line in lines if device in line]
        return _json({"lines": lines, "next": end, "final": run.final and at_end})

    def _shared_log(self, run: LabRun) -> SharedLog:
        since = _unix(run.started_at) if run.started_at else 0.0
        return SharedLog(self.runs.out_dir / LAB_LOG, since, _unix(run.ended_at) if run.ended_at else None)

    async def archive(self, request: web.Request) -> web.Response:
        run = self._run(request)
        data = await asyncio.to_thread(_tar, self.runs.folder(run.run_id), run.run_id)
        return web.Response(
            body=data, content_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="{run.run_id}.tar.gz"'},
        )

    def view(self, run: LabRun, queued: dict[str, int] | None = None) -> dict[str, Any]:
        """A run as the API shows it (docs/lab-api.yaml, ``Run``); ``queued``: the queue's positions, if known."""
        positions = self._queue() if queued is None else queued
        return {
            "id": run.run_id, "owner": run.owner, "state": run.state, "method": run.method, "needs": run.needs,
            "position": positions.get(run.run_id), "reason": run.reason,
            "submitted_at": run.submitted_at, "admitted_at": run.admitted_at, "started_at": run.started_at,
            "ended_at": run.ended_at, "targets_reached": run.targets_reached,
        }

    def _queue(self) -> dict[str, int]:
        """Each queued run's position in the queue, from 1."""
        return {run.run_id: at for at, run in enumerate(self.store.runs("queued"), start=1)}

    def _run(self, request: web.Request) -> LabRun:
        run = self.store.run(request.match_info["id"])
        if run is None:
            raise Refusal("not_found", f"no run {request.match_info['id']} in this lab (mjfl runs lists them)", status=404)
        return run

    # -- the lab ----------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        counts = {state: len(self.store.runs(state)) for state in ("queued", "running")}  # type: ignore[arg-type]
        status = "draining" if self.runs.draining else "up"
        body = {"status": status, "version": __version__, "devices": len(self.devices()), "runs": counts}
        if self.loop is not None:
            body["loop"] = self.loop()
        if self.heartbeats is not None:
            body["heartbeats"] = self.heartbeats()
        return _json(body)

    async def lobby(self, request: web.Request) -> web.Response:
        """Every connected device: since when (wall clock), from where, and the run's job it serves now, if any."""
        return _json({"devices": self.devices()})

    async def task_spans(self, request: web.Request) -> web.Response:
        """The fleet's latest tasks, every run's, on the wall clock: which device trained which run's job when."""
        loop = asyncio.get_running_loop()
        to_wall = time.time() - loop.time()
        spans = []
        for device, job, number, sent, ended, outcome in self.tasks():
            run, _, name = str(job).partition("/")
            spans.append({"device": device, "run": run, "job": name, "round": number, "sent": sent + to_wall,
                          "ended": ended + to_wall, "outcome": outcome})
        return _json({"tasks": spans})

    async def add_researcher(self, request: web.Request) -> web.Response:
        _admin(request)
        body = await _body(request)
        name, admin = _text(body, "name"), body.get("admin", False)
        if not NAME.fullmatch(name):
            raise Refusal("request_invalid", f"name {name!r}: 1 to 32 of a-z, 0-9, _ and -, a letter first", field="name")
        if not isinstance(admin, bool):
            raise Refusal("request_invalid", "admin must be true or false", field="admin")
        if not admin:
            self._keep_an_admin(name)
        token = self.store.add_researcher(name, admin=admin)
        return _json({"name": name, "admin": admin, "token": token}, status=201)

    async def list_researchers(self, request: web.Request) -> web.Response:
        _admin(request)
        rows = [{"name": r.name, "admin": r.admin, "created_at": r.created_at, "revoked_at": r.revoked_at}
                for r in self.store.researchers()]
        return _json({"researchers": rows})

    async def revoke(self, request: web.Request) -> web.Response:
        _admin(request)
        name = request.match_info["name"]
        self._keep_an_admin(name)
        if not self.store.revoke(name):
            raise Refusal("not_found", f"no researcher {name} in this lab", status=404)
        return _json({"name": name, "revoked": True})

    def _keep_an_admin(self, name: str) -> None:
        """Refuse a change that takes ``name``'s admin away when no other admin is left: no one could mend it."""
        admins = {r.name for r in self.store.researchers() if r.admin and r.revoked_at is None}
        if admins == {name}:
            raise Refusal(
                "last_admin", f"{name} is the lab's last admin: make another admin first (a researcher added with admin true)",
                status=409, field="name",
            )

    async def drain(self, request: web.Request) -> web.Response:
        _admin(request)
        self.runs.drain()
        return _json({"draining": True, "running": self.runs.running()})


def lab_app(api: LabApi) -> web.Application:
    """The API's aiohttp application (see the module docstring)."""
    app = web.Application(client_max_size=api.max_request_kb * 1024, middlewares=[_refusals, _tokens])
    app[_LAB] = api
    add = app.router.add_route
    add("GET", "/api/lab/health", api.health)
    add("POST", "/api/lab/runs", api.submit)
    add("GET", "/api/lab/runs", api.list_runs)
    add("GET", "/api/lab/runs/{id}", api.get_run)
    add("POST", "/api/lab/runs/{id}/cancel", api.cancel)
    add("GET", "/api/lab/tasks", api.task_spans)
    add("GET", "/api/lab/devices", api.lobby)
    add("GET", "/api/lab/runs/{id}/log", api.log_lines)
    add("GET", "/api/lab/runs/{id}/archive", api.archive)
    add("POST", "/api/lab/researchers", api.add_researcher)
    add("GET", "/api/lab/researchers", api.list_researchers)
    add("DELETE", "/api/lab/researchers/{name}", api.revoke)
    add("POST", "/api/lab/drain", api.drain)
    return app


@web.middleware
async def _refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal as ``{"error": ...}`` JSON with its status; our bugs as 500 ``internal``, logged."""
    try:
        return await handler(request)
    except Refusal as refusal:
        return _json(refusal.document(), status=refusal.status)
    except web.HTTPException as exc:
        code = _HTTP_CODES.get(exc.status, "request_invalid")
        message = "the request is larger than the lab reads (limits.max_request_kb)" if exc.status == 413 else exc.reason
        return _json(Refusal(code, message, status=exc.status).document(), status=exc.status)
    except StorageError as exc:
        log.error("lab database: %s", exc)
        return _json(Refusal("internal", "the lab's database refused the change; try again").document(), status=500)
    except Exception:
        log.exception("lab API: %s %s", request.method, request.path)
        return _json(Refusal("internal", "internal error (logged in the lab's lab.log)").document(), status=500)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@web.middleware
async def _tokens(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Who is asking: the researcher whose token the request carries (the health check needs none).

    Paths outside ``/api/lab/`` are the lab's pages (``pages.py``), under the dashboard's token rule.
    """
    if request.path == "/api/lab/health" or not request.path.startswith("/api/lab/"):
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    # An auth-scheme is a case-insensitive token (RFC 7235 section 2.1; RFC 9110 section 11.1): Bearer, bearer.
    token = credentials.strip() if scheme.lower() == "bearer" else ""
    who = request.app[_LAB].store.holder_of(token) if token else None
    if who is None:
        said = "no token was given" if not token else "the token is unknown or revoked"
        raise Refusal(
            "unauthorized", f"{said}: send a researcher's token, Authorization: Bearer TOKEN (an admin makes one)",
            status=401,
        )
    request[_WHO] = who
    return await handler(request)


def _admin(request: web.Request) -> None:
    if not request[_WHO].admin:
        raise Refusal("forbidden", "only an admin of the lab may do this", status=403)


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (a Refusal naming what is wrong with it)."""
    try:
        body = json.loads(await request.text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refusal("request_invalid", "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise Refusal("request_invalid", "the body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise Refusal("request_invalid", f"{key} must be a non-empty string", field=key)
    return value


def _int_query(request: web.Request, key: str, default: int) -> int:
    text = request.query.get(key)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise Refusal("request_invalid", f"{key} must be a whole number >= 0", field=key)
    return int(text)


def _read_from(path: Path, offset: int) -> tuple[str, int, bool]:
    """At most ``LOG_CHUNK`` bytes of ``path`` from ``offset``, whole lines only: (text, the next offset, at its end)."""
    if not path.is_file():
        return "", offset, True
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(LOG_CHUNK)
    cut = data.rfind(b"\n") + 1  # a line still being written waits for the next read
    return data[:cut].decode("utf-8", errors="replace"), offset + cut, len(data) < LOG_CHUNK and cut == len(data)


# What SQLite keeps beside a database while it is open (https://sqlite.org/tempfiles.html), and the first bytes of a
# database file (https://sqlite.org/fileformat.html, section 1.3.1).
_SQLITE_BESIDE = ("-wal", "-shm", "-journal")
_SQLITE_HEADER = b"SQLite format 3\x00"


def _tar(folder: Path, name: str) -> bytes:
    """The run's folder as a gzipped tar whose top folder is ``name``.

    A run may still be writing its database (``mjfl.db`` in WAL mode, its last commits in ``mjfl.db-wal``):
    each database goes in as one file holding its last commit (``_snapshot``), and what SQLite keeps beside
    it (-wal, -shm) stays out. Blocking work: callers run it off the event loop.
    """
    databases: list[tarfile.TarInfo] = []

    def kept(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        path = folder / Path(member.name).relative_to(name)
        if member.isfile() and _is_database(path):
            databases.append(member)  # added below, as its snapshot
            return None
        if member.isfile() and any(_is_database(path.with_name(path.name.removesuffix(end)))
                                   for end in _SQLITE_BESIDE if path.name.endswith(end)):
            return None
        return member

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if folder.is_dir():
            tar.add(folder, arcname=name, filter=kept)
            for member in databases:
                data = _snapshot(folder / Path(member.name).relative_to(name))
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def _is_database(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def _snapshot(path: Path) -> bytes:
    """The SQLite database at ``path`` as one file, as of its last commit (its WAL's included).

    SQLite's online backup (https://sqlite.org/backup.html) copies it in one read transaction, while its
    writer may go on; the copy keeps a rollback journal, so it opens alone, with no -wal or -shm. The
    connection reads only (``query_only``), and closing it, when it is the database's last, folds the
    WAL back into the file as any last connection does.
    """
    with tempfile.TemporaryDirectory(prefix="mjfl-archive-") as tmp:
        copy_path = Path(tmp) / path.name
        with contextlib.closing(sqlite3.connect(path)) as source, contextlib.closing(sqlite3.connect(copy_path)) as copy:
            source.execute("PRAGMA query_only = ON")
            source.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")
        return copy_path.read_bytes()


def _json(data: Any, *, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, separators=(",", ":")), status=status, content_type="application/json")


def _unix(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()

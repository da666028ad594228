"""What a run ran on, kept in its run database as it starts and as devices are admitted (docs/storage.md, provenance).

Once, when the run is recorded (a resumed run keeps what it had):
the configuration file's text as given, mjfl's version and commit and
those of Python, torch and ExecuTorch, each job's program (the sha256 of
the bytes its devices get) and the sizes of the shards its data was cut
into (``run_provenance``). Then each device as the run admits it
(``Admissions``): its hello, the profile it is planned with, the shard of
every job it holds, and the build of its app where it is known (the adb
bridge reads an attached phone's; a hello may say it). A device is kept
again only when one of those changed (a phone back with another build).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import platform
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import mjfl
from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.engine.fleet import Fleet
from mjfl.coordinator.run.database import RunDatabase
from mjfl.coordinator.run.preparation import Assignment, PreparedJob
from mjfl.coordinator.run.recorder import Membership
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.records import DeviceAdmission, ProgramBuild, RunProvenance
from mjfl.errors import StorageError
from mjfl.ids import DeviceId, JobId

log = logging.getLogger(__name__)

REDACTED = "(redacted)"
_PACKAGES = ("torch", "executorch", "numpy")


def run_provenance(
    run_id: str, config: RunConfig, config_text: str | None, prepared: Sequence[PreparedJob]
) -> RunProvenance:
    """What run ``run_id`` runs: its configuration as given (``config_text``: the file's text), versions, programs."""
    text, redacted = _redacted(config_text, config)
    programs = tuple(
        ProgramBuild(
            JobId(job.config.name), hashlib.sha256(job.program).hexdigest(), len(job.program),
            None if job.program_file is None else str(Path(job.program_file).absolute()),
            tuple(len(y) for _, y in job.parts),
            job.config.model, job.config.model_sha256 or None, _helper_digests(job.config.files),
        )
        for job in prepared
    )
    return RunProvenance(
        run_id, _now(), text, None if config.source is None else str(config.source),
        None if config_text is None else hashlib.sha256(config_text.encode()).hexdigest(),
        redacted, versions(), programs,
    )


def _helper_digests(files: Sequence[Path]) -> dict[str, str]:
    """Each helper file of a model (the config's ``files``) by its absolute path, to its sha256 as read now."""
    from mjfl.jobs.base import file_sha256

    return {str(Path(f).absolute()): file_sha256(Path(f)) for f in files}


def source_text(config: RunConfig) -> str | None:
    """The text of the file ``config`` was read from, as it is now; None when it came from none."""
    if config.source is None:
        return None
    try:
        return Path(config.source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.info("the configuration's text is not kept: %s", exc)
        return None


def _redacted(text: str | None, config: RunConfig) -> tuple[str | None, tuple[str, ...]]:
    """``text`` without the value of a credential it holds (``testbed.token``), and which fields were left out.

    A run record is no place for a credential; its sha256 is still that of the text as given.
    """
    token = config.testbed.token
    if text is None or not token or token not in text:
        return text, ()
    return text.replace(token, REDACTED), ("testbed.token",)


@functools.cache
def versions() -> dict[str, str | None]:
    """mjfl's version (and its commit, run from a git checkout), Python's, and those of the packages it trains with."""
    found: dict[str, str | None] = {
        "mjfl": mjfl.__version__, "mjfl_commit": _commit(), "python": platform.python_version(),
    }
    for package in _PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _commit() -> str | None:
    """The commit of the checkout mjfl runs from (``-dirty``: with changes), None when it is no checkout."""
    root = Path(mjfl.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


class Admissions:
    """Each device as the run admits it, kept in the run database (``Storage.record_admissions``, on its thread).

    Call it with a device once its shard is settled (``assignment``): at the
    start for the devices present, then for each that joins. ``members`` (a
    testbed's registry) says what a device said in its hello and the profile
    it is planned with; without it (simulated devices) the fleet's profile is
    the one. ``apps``: the installed app's sha256 of each phone the adb bridge
    prepared, by device id (None: it could not be read).
    """

    def __init__(
        self, database: RunDatabase, run_id: str, assignment: Assignment, fleet: Fleet, *,
        members: Membership | None = None, apps: Mapping[str, str | None] | None = None,
    ) -> None:
        self.database = database
        self.run_id = run_id
        self.assignment = assignment
        self.members = members
        self.apps = apps or {}
        self._planned = {} if members is not None else {p.device: p for p in fleet.profiles()}

    def __call__(self, device: DeviceId) -> None:
        self.admit([device])

    def admit(self, devices: Sequence[DeviceId]) -> None:
        """Keep the admission of ``devices`` (those connected, with a registry), in one transaction."""
        connected = None if self.members is None else self.members.connected()
        admissions = [self.admission(d) for d in devices if connected is None or d in connected]
        run_id = self.run_id

        def keep(storage: Storage) -> None:
            try:
                storage.record_admissions(admissions)
            except (OSError, StorageError) as exc:  # the rounds are what must not be lost; this only warns
                log.warning("the admission of %s into run %s is not kept: %s", ", ".join(devices), run_id, exc)

        self.database.put(keep)

    def admission(self, device: DeviceId) -> DeviceAdmission:
        """What the run knows of ``device`` now."""
        shard = self.assignment.slot_of.get(device)
        info = None if self.members is None else self.members.connected().get(device)
        if info is None:
            planned = self._planned.get(device)
            profile = {"source": "fleet"} if planned is None else {"a": planned.a, "mu": planned.mu, "source": "fleet"}
            return DeviceAdmission(self.run_id, device, _now(), shard, None, profile, self._app(device, None))
        hello = info.hello
        told = {
            "device_id": hello.device_id, "runtime": hello.runtime, "versions": list(hello.versions),
            # Its state (battery, temperature) changes by the minute and is kept with each round instead.
            "hardware": {k: v for k, v in hello.hardware.items() if k != "device_state"},
            "max_message_bytes": hello.max_message_bytes,
        }
        profile = {"a": info.profile.a, "mu": info.profile.mu, "source": info.profile_source}
        return DeviceAdmission(self.run_id, device, _now(), shard, told, profile, self._app(device, told["hardware"]))

    def _app(self, device: DeviceId, hardware: Mapping[str, Any] | None) -> dict[str, Any]:
        """The device's app build: ``sha256`` and its ``source``; else what it is instead of an app (``absent``),
        or why its build is not known (``missing``)."""
        if device in self.apps:
            sha = self.apps[device]
            if sha is not None:
                return {"sha256": sha, "source": "adb"}
            return {"sha256": None, "missing": "the adb bridge could not read the installed app's sha256"}
        if hardware is None:
            return {"sha256": None, "absent": "a simulated device"}
        told = hardware.get("app_sha256")
        if isinstance(told, str) and told:
            return {"sha256": told, "source": "hello"}
        if hardware.get("emulated"):
            return {"sha256": None, "absent": "an emulated device (mjfl's emulator)"}
        if "java" in hardware:
            return {"sha256": None, "absent": "the JVM client"}
        return {"sha256": None, "missing": "not attached over adb to this coordinator, and its hello tells no build"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")

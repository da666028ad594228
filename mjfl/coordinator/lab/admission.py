"""Whether the lab takes a submitted run: checked at once, refused with a typed reason, or queued.

A run is the TOML a researcher submits, a run configuration as
`mjfl testbed run` reads (docs/config.md). The lab checks it when it is
submitted, before anything is queued:

* ``config_invalid``: not TOML, or a field the config checks refuses (the
  error names the field);
* ``fleet_too_small``: its data is cut for more devices (``fleet.size``,
  ``testbed.min_devices``) than the lab has, so it could never start;
* ``unsupported``: something no lab run can do (stand-in devices exist in
  simulations only);
* ``custom_code_off`` / ``custom_code_forbidden``: a job names a model of
  the researcher's own (a factory, docs/models.md) and the lab runs no
  submitted code (LAB.toml ``custom_code = "off"``), or runs its admins'
  only (``"admins"``; docs/security.md, section 8);
* ``files_invalid``: the files sent with the run are not the files its
  config names (a job's model file and its ``files``), each once;
* ``model_invalid``, ``model_timeout``, ``model_cpu_limit``,
  ``model_memory_limit``, ``model_crashed``: a model of the researcher's
  own, imported, built and converted in a bounded child process
  (``sandbox.py``), failed there or went past a limit (the runs' part,
  ``LabRuns.submit``);
* ``data_missing``: a job's data set cannot be read here (``check_data``).

What it needs of the lab is recorded with it: the devices that must be
connected before it is admitted (``needs``). Its data is then cut for the
devices connected at its start, at least ``needs``, so every shard has a
device and no class goes untrained (``coordinator/run/coverage.py``).

In a lab the lab decides where a run's outputs go (its folder under
``LAB_DIR/runs``) and where devices connect (the lab's server): the config's
``out_dir``, ``database`` and ``[testbed]`` address, keys and TLS are not
used. Relative input paths (``data_dir``, ``fleet.profiles``) are taken
from the lab's configuration folder.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mjfl.coordinator.config import RunConfig, parse_config
from mjfl.coordinator.lab.config import LabConfig
from mjfl.errors import ConfigError, Refusal, UserError
from mjfl.jobs.base import FACTORY, MODEL_NAMES, is_factory_file
from mjfl.jobs.datasets import load_dataset
from mjfl.profiling.profiles import load_profiles

CODE = "code"  # a run folder's copy of the model files it was sent, verbatim
CODE_MANIFEST = "code.json"  # beside it: each file's sha256 and size
MAX_FILES = 32  # the most files one run may send


@dataclass(frozen=True)
class Submission:
    """A run the lab can take: its configuration, how many devices it needs connected to start, and whether a job's
    model is the researcher's own (then it runs only in a bounded child, ``sandbox.py``)."""

    config: RunConfig
    needs: int
    own_code: bool = False

    @property
    def method(self) -> str:
        return self.config.scheduler.method


def check(text: str, lab: LabConfig, *, code: Path | None = None, admin: bool = False) -> Submission:
    """The run ``text`` describes, or a Refusal saying why the lab cannot take it.

    ``code`` is the folder holding the files sent with it (None: none were),
    ``admin`` whether its researcher is one of the lab's admins. Nothing of a
    model's code runs here: its files are only read, to hash them.
    """
    base = lab.source.parent if lab.source is not None else Path(".")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Refusal("config_invalid", f"the config is not valid TOML: {exc}") from None
    own = _own_models(raw, lab, admin=admin)
    _sent_as_named(raw, own, code)
    try:
        config = parse_config(raw, base=base, code_base=code)
        profiles = config.fleet.profiles
        size = config.fleet.size or (len(load_profiles(profiles)) if profiles is not None else 0)
        needs = max(size, config.testbed.min_devices or 0, 1)
    except ConfigError as exc:
        raise Refusal("config_invalid", str(exc), field=exc.field) from None
    except UserError as exc:
        raise Refusal("config_invalid", str(exc)) from None
    if needs > lab.size:
        field = "fleet.size" if needs == (config.fleet.size or 0) else "testbed.min_devices"
        raise Refusal(
            "fleet_too_small",
            f"the run's data is cut for {needs} devices ({field}), and the lab has {lab.size} (its fleet.size):"
            f" it could never start here; make it for {lab.size} devices or fewer",
            field=field,
        )
    if config.fleet.stand_ins > 0:
        raise Refusal("unsupported", "fleet.stand_ins: stand-in devices exist in simulations only", field="fleet.stand_ins")
    return Submission(dataclasses.replace(config, source=None), needs, own_code=bool(own))


def _jobs(raw: dict[str, object]) -> list[tuple[int, dict[str, object]]]:
    jobs = raw.get("jobs")
    return [(i, job) for i, job in enumerate(jobs if isinstance(jobs, list) else []) if isinstance(job, dict)]


def _own_models(raw: dict[str, object], lab: LabConfig, *, admin: bool) -> dict[int, str]:
    """Each job whose model is the researcher's own (its index: the model file, relative to the config), once
    the lab's policy lets this researcher bring one.

    Checked before the config is parsed, which would look for (and, to hash it, read) the model's file.
    """
    own: dict[int, str] = {}
    for index, job in _jobs(raw):
        model = job.get("model")
        if not (isinstance(model, str) and FACTORY.match(model) and model not in MODEL_NAMES):
            continue
        field = f"jobs[{index}].model"
        if lab.custom_code == "off":
            raise Refusal(
                "custom_code_off",
                f"{field} {model!r} is a model of your own, and this lab runs zoo models only"
                f" ({', '.join(MODEL_NAMES)}; LAB.toml custom_code = \"off\"): check it with `mjfl models check`"
                " and run it with `mjfl testbed run` on your own machine, or ask the lab's admin",
                field=field,
            )
        if lab.custom_code == "admins" and not admin:
            raise Refusal(
                "custom_code_forbidden",
                f"{field} {model!r} is a model of your own, and this lab runs its admins' own models only"
                " (LAB.toml custom_code = \"admins\"): ask the lab's admin", status=403, field=field,
            )
        if not is_factory_file(model):
            raise Refusal(
                "config_invalid",
                f"{field} {model!r}: a lab runs a model of your own from a file sent with the run"
                " ('models.py:Net', beside the config), not a module of the lab's machine", field=field,
            )
        own[index] = PurePosixPath(model.rsplit(":", 1)[0]).as_posix()  # "./models.py" is "models.py"
    return own


def _sent_as_named(raw: dict[str, object], own: dict[int, str], code: Path | None) -> None:
    """The files sent are exactly the ones the config names as code: each job's model file and its ``files``."""
    named: dict[str, str] = {}
    for index, job in _jobs(raw):
        if index in own:
            named.setdefault(own[index], f"jobs[{index}].model")
            helpers = job.get("files", [])
            for k, name in enumerate(helpers if isinstance(helpers, list) else []):
                if isinstance(name, str):
                    named.setdefault(PurePosixPath(name).as_posix(), f"jobs[{index}].files[{k}]")
    sent = set() if code is None else {p.relative_to(code).as_posix() for p in code.rglob("*") if p.is_file()}
    missing = [(name, field) for name, field in named.items() if name not in sent]
    if missing:
        name, field = missing[0]
        raise Refusal(
            "files_invalid", f"{field} names {name}, which was not sent with the run (the request's `files`;"
            " `mjfl submit` sends each file the config names)", field="files",
        )
    extra = sorted(sent - set(named))
    if extra:
        raise Refusal("files_invalid", f"files: {extra[0]} was sent, and no job's model or files names it", field="files")


def code_files(files: object) -> dict[str, bytes]:
    """A submit request's ``files`` (each name, relative to the config, to its bytes, base64): checked and decoded.

    A name is a relative path of plain parts, at most ``MAX_FILES`` of them;
    anything else is ``request_invalid`` naming the file.
    """
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise Refusal("request_invalid", "files must be an object: each file's name to its content (base64)", field="files")
    if len(files) > MAX_FILES:
        raise Refusal("request_invalid", f"files: {len(files)} sent, at most {MAX_FILES}", field="files")
    decoded = {}
    for name, content in files.items():
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") or "\\" in p for p in parts):
            raise Refusal(
                "request_invalid", f"files: {name!r} is not a relative path of plain parts (a/b.py)", field="files",
            )
        if not isinstance(content, str):
            raise Refusal("request_invalid", f"files[{name!r}] must be a base64 string", field="files")
        try:
            decoded[name] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise Refusal("request_invalid", f"files[{name!r}] is not base64", field="files") from None
    return decoded


def keep_code(files: dict[str, bytes], folder: Path) -> None:
    """Write ``files`` under ``folder`` verbatim, and beside it their manifest (sha256, size): what a run was sent."""
    for name, data in files.items():
        path = folder / CODE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    manifest = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)} for name, data in sorted(files.items())}
    (folder / CODE_MANIFEST).write_text(json.dumps({"files": manifest}, indent=2) + "\n", encoding="utf-8")


def check_data(config: RunConfig) -> None:
    """Every job's data set can be read here: a run whose data is missing could never run (``data_missing``).

    Reads each data set as the run will (the bundled digits need no reading);
    seconds for a large one, so callers run it off the event loop.
    """
    for index, job in enumerate(config.jobs):
        if job.dataset == "digits":
            continue
        try:
            load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels, seed=config.seed)
        except UserError as exc:
            raise Refusal("data_missing", f"jobs[{index}] ({job.name}): {exc}", field=f"jobs[{index}].dataset") from None


def placed(submission: Submission, folder: Path) -> RunConfig:
    """The run's configuration as the lab runs it: its outputs in ``folder``, its devices the lab's."""
    return dataclasses.replace(submission.config, out_dir=folder, database=None)

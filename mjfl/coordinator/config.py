"""Run configuration: one TOML file describes a run (jobs, fleet, scheduler, seed, outputs).

Every field is validated on load; a bad one raises ConfigError naming it
(``jobs[1].lr: must be > 0, got -0.1``). Unknown keys are errors too, so a
typo never silently falls back to a default. See docs/config.md.

TOML has no null, so a limit or check that can be turned off is written 0
there (``heartbeat_interval_s = 0``); loading maps that 0 to ``None`` here,
once (``Fields.take_limit``), and everything past the config sees ``None``
for off, as the settings of the server, the remote fleet and the engine do.
Defaults are written once: the dataclasses' fields below, or the protocol's
constants they read.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from mjfl.addresses import DEVICE_PORT
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import Target
from mjfl.device.protocol.codec import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_MAX_MESSAGE_BYTES,
)
from mjfl.errors import ConfigError
from mjfl.ids import JobId
from mjfl.jobs.base import (
    FACTORY,
    MAX_BATCH,
    MODEL_NAMES,
    LocalTraining,
    ModelSpec,
    is_factory_file,
    model_args_json,
)
from mjfl.schedulers.base import CostWeights

PARTITIONS = ("iid", "noniid", "dirichlet")
RUNTIMES = ("executorch", "torch", "batched")  # batched: many devices in one computation (mjfl/jobs/batched.py)
SHARDS = ("size", "present")
OMEGAS = ("sqrt", "linear", "log")


@dataclass(frozen=True)
class JobConfig:
    """One FL job: what it trains, on what data, how, and when it is done."""

    name: JobId
    model: str  # a zoo name, or a factory ("/abs/path/file.py:Factory" once read, or "package.module:factory")
    model_args: str = ""  # the factory's keyword arguments, canonical JSON (jobs/base.py model_args_json)
    model_sha256: str = ""  # a file factory's source, as read when the config was
    files: tuple[Path, ...] = ()  # helper files the model's file imports (sent with it to a lab)
    dataset: str = "digits"
    data_dir: Path | None = None
    image_size: int | None = None  # resize inputs to image_size x image_size
    channels: int | None = None
    partition: str = "noniid"
    classes_per_device: int = 2
    dirichlet_alpha: float = 0.5
    training: LocalTraining = field(default_factory=LocalTraining)  # tau_m epochs, batch size, SGD settings
    fraction: float = 0.1  # C_m
    target_accuracy: float | None = None
    target_loss: float | None = None
    target_window: int = 1  # rounds whose mean accuracy (loss) must meet the target; 1: the round alone
    max_rounds: int = 50  # the cap on R_m
    deadline_s: float | None = None

    @property
    def target(self) -> Target:
        return Target(self.target_accuracy, self.target_loss, self.target_window)


@dataclass(frozen=True)
class FleetConfig:
    """The devices: how many, and their speed (a profile file, or the synthetic generator)."""

    size: int | None = None
    profiles: Path | None = None
    # Real time: cut each job's data for the fleet's size ("size": devices that join
    # later take the spare shards) or for the devices present at the start ("present").
    shards: str = "size"
    dropout: float = 0.0  # simulated: chance a device never returns a task
    stand_ins: float = 0.0  # simulated: share of devices (the fastest) that return the model unchanged with loss 0
    slow_fraction: float = 0.0  # the slow tail: this share of the devices (drawn by the seed) ...
    slow_factor: tuple[float, float] = (5.0, 10.0)  # ... is slower by a factor uniform on this range
    salt: int = 0  # mixed into the seed that draws the devices: configurations of one study meet different fleets
    runtime: str = "executorch"
    workers: int | None = None  # worker processes that train (default: one per core)


@dataclass(frozen=True)
class SchedulerConfig:
    """Which scheduler, and the cost model's weights (Formulas 2, 12-13)."""

    method: str = "meta-greedy"
    alpha: float = CostWeights.alpha
    beta: float = CostWeights.beta
    omega: str = CostWeights.omega
    utility: float = CostWeights.utility  # gamma: time per learning share^gamma (docs/cost-model.md); 0: the paper's
    members: tuple[str, ...] | None = None  # None: the method's own (schedulers/registry.py MEMBERS)
    min_plan: int = 1
    min_returns: int = 1
    max_update_norm_ratio: float | None = 10.0  # None: off
    profile_window: int = 0
    plan_busy: bool = True  # jobs may plan devices other jobs will release soon
    parallel: bool = True  # False: one job after another (single-job FL)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class TestbedConfig:
    """The real-time coordinator: where it listens and how long it waits for the fleet."""

    host: str = "127.0.0.1"
    port: int = DEVICE_PORT
    min_devices: int | None = None  # default: the fleet size, else 1
    wait_timeout_s: float = 120.0
    heartbeat_interval_s: float | None = DEFAULT_HEARTBEAT_INTERVAL_S  # None: no heartbeats
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S  # None: silence never ends a connection
    max_message_mb: float | None = DEFAULT_MAX_MESSAGE_BYTES / 2**20  # None: no limit
    task_timeout_s: float | None = None  # per task: the job's deadline, else none
    keys: Path | None = None  # enrolled devices; default: the user's key store when it exists
    token: str | None = None  # the shared lab token (a shortcut: docs/security.md)
    tls_cert: Path | None = None  # both given: wss://
    tls_key: Path | None = None
    handshake_timeout_s: float | None = DEFAULT_HANDSHAKE_TIMEOUT_S  # connect to hello; slow-loris bound
    max_connections_per_address: int | None = 1024  # None: no limit
    max_tasks_in_flight: int | None = 1024  # None: no limit


@dataclass(frozen=True)
class RunConfig:
    """A whole run."""

    jobs: tuple[JobConfig, ...]
    fleet: FleetConfig = field(default_factory=FleetConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    testbed: TestbedConfig = field(default_factory=TestbedConfig)
    seed: int = 0
    out_dir: Path = Path("runs/latest")
    database: Path | None = None  # default: database_path(out_dir) (storage.database)
    source: Path | None = None  # the file it came from

    @property
    def database_path(self) -> Path:
        return self.database or database_path(self.out_dir)


def load_config(path: Path | str) -> RunConfig:
    """Read and validate a run configuration file."""
    path = Path(path)
    return parse_config(read_toml(path), base=path.parent, source=path)


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's document; a ConfigError naming the file when it is missing or not TOML."""
    if not path.is_file():
        raise ConfigError(str(path), "no such file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from None


def parse_config(
    raw: dict[str, Any], *, base: Path = Path("."), source: Path | None = None, code_base: Path | None = None,
) -> RunConfig:
    """Validate a parsed TOML document.

    Relative input paths (data_dir, fleet.profiles) are taken from ``base`` (the
    config file's folder); relative output paths (out_dir, database) from the
    working directory. A job's model file and helper files are taken from
    ``code_base`` (default ``base``; a lab's run keeps the files it was sent
    in a folder of its own).
    """
    top = Fields(raw, "")
    jobs_raw = top.take("jobs", list, required=True)
    if not jobs_raw:
        raise ConfigError("jobs", "at least one [[jobs]] table is needed")
    jobs = tuple(_job(j, f"jobs[{i}]", base, code_base or base) for i, j in enumerate(jobs_raw))
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError("jobs", f"job names must be unique, got {names}")
    fleet = parse_fleet(top.take("fleet", dict, default={}), base)
    scheduler = _scheduler(top.take("scheduler", dict, default={}))
    testbed = parse_testbed(top.take("testbed", dict, default={}), base)
    d = defaults_of(RunConfig)
    seed = top.take("seed", int, default=d["seed"])
    # Inputs are found next to the config file; outputs land where mjfl runs.
    out_dir = _path(top.take("out_dir", str, default=str(d["out_dir"])), Path("."))
    database = top.take("database", str, default=None)
    top.done()
    if fleet.size is None and fleet.profiles is None:
        raise ConfigError("fleet.size", "give the fleet size or a profile file (fleet.profiles)")
    return RunConfig(
        jobs, fleet, scheduler, testbed, seed, out_dir,
        _path(database, Path(".")) if database else None, source,
    )


def _job(raw: Any, where: str, base: Path, code_base: Path) -> JobConfig:
    if not isinstance(raw, dict):
        raise ConfigError(where, "must be a table")
    f = Fields(raw, where)
    name = f.take("name", str, required=True)
    model, model_sha256 = resolve_model(f.take("model", str, required=True), f"{where}.model", code_base)
    model_args = f.take("model_args", dict, default={})
    if model_args and model in MODEL_NAMES:
        raise ConfigError(f"{where}.model_args", f"is for a model of your own (a factory); {model!r} takes none")
    files = tuple(_helper(v, f"{where}.files[{i}]", code_base) for i, v in enumerate(f.take("files", list, default=[])))
    data_dir = f.take("data_dir", str, default=None)
    d = defaults_of(JobConfig)
    t = defaults_of(LocalTraining)
    job = JobConfig(
        name=JobId(name),
        model=model,
        model_args=model_args_json(model_args),
        model_sha256=model_sha256,
        files=files,
        dataset=f.take("dataset", str, default=d["dataset"]),
        data_dir=_path(data_dir, base) if data_dir else None,
        image_size=f.take("image_size", int, default=d["image_size"], check=lambda v: 4 <= v <= 512, need="between 4 and 512"),
        channels=f.take("channels", int, default=d["channels"], check=lambda v: v in (1, 3), need="1 or 3"),
        partition=f.take("partition", str, default=d["partition"], check=lambda v: v in PARTITIONS, need=f"one of {PARTITIONS}"),
        classes_per_device=f.take("classes_per_device", int, default=d["classes_per_device"], check=lambda v: v >= 1, need=">= 1"),
        dirichlet_alpha=f.take("dirichlet_alpha", float, default=d["dirichlet_alpha"], check=lambda v: v > 0, need="> 0"),
        training=LocalTraining(
            epochs=f.take("epochs", int, default=t["epochs"], check=lambda v: v >= 1, need=">= 1"),
            batch_size=f.take("batch_size", int, default=t["batch_size"], check=lambda v: 1 <= v <= MAX_BATCH, need=f"in [1, {MAX_BATCH}]"),
            lr=f.take("lr", float, default=t["lr"], check=lambda v: v > 0, need="> 0"),
            momentum=f.take("momentum", float, default=t["momentum"], check=lambda v: 0 <= v < 1, need="in [0, 1)"),
            weight_decay=f.take("weight_decay", float, default=t["weight_decay"], check=lambda v: v >= 0, need=">= 0"),
        ),
        fraction=f.take("fraction", float, default=d["fraction"], check=lambda v: 0 < v <= 1, need="in (0, 1]"),
        target_accuracy=f.take("target_accuracy", float, default=d["target_accuracy"], check=lambda v: 0 < v <= 1, need="in (0, 1]"),
        target_loss=f.take("target_loss", float, default=d["target_loss"], check=lambda v: v > 0, need="> 0"),
        target_window=f.take("target_window", int, default=d["target_window"], check=lambda v: v >= 1, need="an integer >= 1"),
        max_rounds=f.take("max_rounds", int, default=d["max_rounds"], check=lambda v: v >= 1, need=">= 1"),
        deadline_s=f.take("deadline_s", float, default=d["deadline_s"], check=lambda v: v > 0, need="> 0"),
    )
    f.done()
    return job


def resolve_model(model: str, where: str, base: Path) -> tuple[str, str]:
    """A job's model string, with a file factory's path made absolute, and that file's sha256."""
    if model in MODEL_NAMES:
        return model, ""
    m = FACTORY.match(model)
    if m is None:
        raise ConfigError(
            where, f"unknown model {model!r}; choose from {', '.join(MODEL_NAMES)}, or give a factory of your own: "
            "'file.py:Factory' (a file beside the config) or 'package.module:factory'",
        )
    if not is_factory_file(model):
        return model, ""
    path = _path(m.group("where"), base)
    if not path.is_file():
        raise ConfigError(where, f"no such file {path}")
    from mjfl.jobs.base import file_sha256

    return f"{path.resolve()}:{m.group('attr')}", file_sha256(path)


def _helper(value: Any, where: str, base: Path) -> Path:
    if not isinstance(value, str):
        raise ConfigError(where, f"must be a string (a file beside the config), got {value!r}")
    path = _path(value, base)
    if not path.is_file():
        raise ConfigError(where, f"no such file {path}")
    return path.resolve()


def model_spec(job: JobConfig, input_shape: tuple[int, int, int], num_classes: int) -> ModelSpec:
    """The `ModelSpec` a job trains, on its data's inputs."""
    return ModelSpec(job.model, input_shape, num_classes, args=job.model_args, sha256=job.model_sha256)


def parse_fleet(raw: dict[str, Any], base: Path, where: str = "fleet") -> FleetConfig:
    """A ``[fleet]`` table (``where`` names it in errors)."""
    f = Fields(raw, where)
    profiles = f.take("profiles", str, default=None)
    d = defaults_of(FleetConfig)
    fleet = FleetConfig(
        size=f.take("size", int, default=d["size"], check=lambda v: v >= 1, need=">= 1"),
        profiles=_path(profiles, base) if profiles else None,
        shards=f.take("shards", str, default=d["shards"], check=lambda v: v in SHARDS, need=f"one of {SHARDS}"),
        dropout=f.take("dropout", float, default=d["dropout"], check=lambda v: 0 <= v < 1, need="in [0, 1)"),
        stand_ins=f.take("stand_ins", float, default=d["stand_ins"], check=lambda v: 0 <= v < 1, need="in [0, 1)"),
        slow_fraction=f.take("slow_fraction", float, default=d["slow_fraction"], check=lambda v: 0 <= v <= 1, need="in [0, 1]"),
        slow_factor=_range(f, "slow_factor", d["slow_factor"], low=1.0),
        salt=f.take("salt", int, default=d["salt"], check=lambda v: v >= 0, need=">= 0"),
        runtime=f.take("runtime", str, default=d["runtime"], check=lambda v: v in RUNTIMES, need=f"one of {RUNTIMES}"),
        workers=f.take("workers", int, default=d["workers"], check=lambda v: v >= 1, need=">= 1"),
    )
    f.done()
    return fleet


def _scheduler(raw: dict[str, Any]) -> SchedulerConfig:
    from mjfl.schedulers.registry import METHODS, SINGLE, make_scheduler

    f = Fields(raw, "scheduler")
    d = defaults_of(SchedulerConfig)
    members = f.take("members", list, default=None)
    for member in members or ():
        if member not in SINGLE:
            raise ConfigError("scheduler.members", f"unknown method {member!r}; choose from {', '.join(SINGLE)}")
    options = f.take("options", dict, default={})
    for name, value in options.items():
        if name not in METHODS or not isinstance(value, dict):
            raise ConfigError(f"scheduler.options.{name}", f"must be a table named after a method ({', '.join(METHODS)})")
    config = SchedulerConfig(
        method=f.take("method", str, default=d["method"], check=lambda v: v in METHODS, need=f"one of {', '.join(METHODS)}"),
        alpha=f.take("alpha", float, default=d["alpha"], check=lambda v: v >= 0, need=">= 0"),
        beta=f.take("beta", float, default=d["beta"], check=lambda v: v >= 0, need=">= 0"),
        omega=f.take("omega", str, default=d["omega"], check=lambda v: v in OMEGAS, need=f"one of {OMEGAS}"),
        utility=f.take("utility", float, default=d["utility"], check=lambda v: v >= 0, need=">= 0 (0 turns it off)"),
        members=None if members is None else tuple(members),
        min_plan=f.take("min_plan", int, default=d["min_plan"], check=lambda v: v >= 1, need=">= 1"),
        min_returns=f.take("min_returns", int, default=d["min_returns"], check=lambda v: v >= 1, need=">= 1"),
        max_update_norm_ratio=f.take_limit(
            "max_update_norm_ratio", float, default=d["max_update_norm_ratio"], check=lambda v: v >= 1, need=">= 1"
        ),
        profile_window=f.take("profile_window", int, default=d["profile_window"], check=lambda v: v >= 0, need=">= 0"),
        plan_busy=f.take("plan_busy", bool, default=d["plan_busy"]),
        parallel=f.take("parallel", bool, default=d["parallel"]),
        options=options,
    )
    f.done()
    for name in options:  # each option table is checked now, not when its method first plans
        make_scheduler(name, options=options, members=config.members)
    return config


def parse_testbed(raw: dict[str, Any], base: Path, where: str = "testbed") -> TestbedConfig:
    """A ``[testbed]`` table: where the coordinator listens and whom it admits (``where`` names it in errors)."""
    f = Fields(raw, where)
    d = defaults_of(TestbedConfig)
    config = TestbedConfig(
        host=f.take("host", str, default=d["host"]),
        port=f.take("port", int, default=d["port"], check=lambda v: 0 <= v < 65536, need="a TCP port"),
        min_devices=f.take("min_devices", int, default=d["min_devices"], check=lambda v: v >= 1, need=">= 1"),
        wait_timeout_s=f.take("wait_timeout_s", float, default=d["wait_timeout_s"], check=lambda v: v > 0, need="> 0"),
        heartbeat_interval_s=f.take_limit("heartbeat_interval_s", float, default=d["heartbeat_interval_s"]),
        heartbeat_timeout_s=f.take_limit("heartbeat_timeout_s", float, default=d["heartbeat_timeout_s"]),
        max_message_mb=f.take_limit("max_message_mb", float, default=d["max_message_mb"]),
        task_timeout_s=f.take_limit("task_timeout_s", float, default=d["task_timeout_s"]),
        keys=_path(f.take("keys", str, default=None), base),
        token=f.take("token", str, default=None, check=lambda v: 0 < len(v) <= 4096, need="1 to 4096 characters"),
        tls_cert=_path(f.take("tls_cert", str, default=None), base),
        tls_key=_path(f.take("tls_key", str, default=None), base),
        handshake_timeout_s=f.take_limit("handshake_timeout_s", float, default=d["handshake_timeout_s"]),
        max_connections_per_address=f.take_limit("max_connections_per_address", int, default=d["max_connections_per_address"]),
        max_tasks_in_flight=f.take_limit("max_tasks_in_flight", int, default=d["max_tasks_in_flight"]),
    )
    f.done()
    check_server_pairs(
        config.tls_cert, config.tls_key, config.heartbeat_interval_s, config.heartbeat_timeout_s,
        names=(f"{where}.tls_cert", f"{where}.tls_key", f"{where}.heartbeat_interval_s", f"{where}.heartbeat_timeout_s"),
    )
    return config


def check_server_pairs(
    tls_cert: object, tls_key: object, heartbeat_interval: float | None, heartbeat_timeout: float | None,
    *, names: tuple[str, str, str, str],
) -> None:
    """The rules between a server's settings, for the config and the server alike (``names``: the settings' names
    in the caller's terms, cert, key, interval, timeout): a certificate goes with its key, and silence ends a
    connection only after a heartbeat was due (the timeout longer than the interval)."""
    cert, key, interval, timeout = names
    if (tls_cert is None) != (tls_key is None):
        raise ConfigError(cert, f"{cert} and {key} go together")
    if heartbeat_interval is not None and heartbeat_timeout is not None and heartbeat_timeout <= heartbeat_interval:
        raise ConfigError(timeout, f"must be longer than {interval}")


def _range(f: Fields, key: str, default: tuple[float, float], *, low: float) -> tuple[float, float]:
    """A ``[from, to]`` pair of numbers, ``low <= from <= to`` (one number: that value alone)."""
    value = f.take(key, object, default=list(default))
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value, value]
    if (
        not isinstance(value, list) or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value)
        or not low <= value[0] <= value[1]
    ):
        raise ConfigError(f.name(key), f"must be a number >= {low:g} or a range [from, to] with {low:g} <= from <= to, got {value!r}")
    return float(value[0]), float(value[1])


def _path(value: str | None, base: Path) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


_MISSING = object()


def defaults_of(cls: type) -> dict[str, Any]:
    """The defaults of a config dataclass's fields: the one place they are written."""
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


class Fields:
    """Takes typed fields out of one TOML table, naming each in errors."""

    def __init__(self, raw: dict[str, Any], where: str) -> None:
        if not isinstance(raw, dict):
            raise ConfigError(where or "config", "must be a table")
        self.raw = dict(raw)
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def take(self, key: str, kind: type, *, default: Any = _MISSING, required: bool = False, check: Any = None, need: str = "") -> Any:
        if key not in self.raw:
            if required or default is _MISSING:
                raise ConfigError(self.name(key), "is required")
            return default
        value = self.raw.pop(key)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(self.name(key), f"must be {_KIND_NAMES.get(kind, kind.__name__)}, got {value!r}")
        if check is not None and not check(value):
            raise ConfigError(self.name(key), f"must be {need}, got {value!r}")
        return value

    def take_limit(
        self, key: str, kind: type, *, default: Any, check: Any = lambda v: v > 0, need: str = "> 0"
    ) -> Any:
        """A limit or check that can be turned off: 0 in TOML, ``None`` here; otherwise ``check`` holds."""
        value = self.take(key, kind, default=default, check=lambda v: v == 0 or check(v), need=f"0 (off) or {need}")
        return None if value == 0 else value

    def done(self) -> None:
        if self.raw:
            unknown = ", ".join(sorted(self.raw))
            raise ConfigError(self.name(next(iter(sorted(self.raw)))), f"unknown key(s): {unknown}")


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """A JSON-friendly view of a config (for the run record)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if hasattr(value, "__dataclass_fields__"):
            # A run record is no place for a credential.
            return {f.name: "(set)" if f.name == "token" and getattr(value, f.name) else plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(config)  # type: ignore[no-any-return]

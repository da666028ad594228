"""A lab's configuration (LAB.toml): its devices, where it serves them and the researchers, its limits and policy.

::

    out_dir = "lab"            # LAB_DIR: the lab's database and every run's folder (--out overrides)
    seed = 0                   # emulated devices' profiles and round times (--emulate)
    program_cache = "programs" # the runs' exported programs, kept between runs (default: LAB_DIR/programs)
    custom_code = "off"        # whose runs may bring a model of their own: "off", "admins", "researchers"
                               #   (docs/security.md, section 8)

    [fleet]                    # the lab's devices, as a run's [fleet] (docs/config.md)
    size = 8                   # how many the lab has: a run made for more can never run here

    [server]                   # where devices connect, whom it admits: a run's [testbed] keys
    port = 8765

    [api]                      # the researchers' HTTP API (docs/lab-api.yaml)
    host = "127.0.0.1"
    port = 8790

    [limits]
    max_request_kb = 256       # the largest request (a submitted config) the API reads
    max_queued_per_researcher = 20
    max_running = 4            # runs running at once
    code_check_s = 60          # a submitted model's code (custom_code): seconds its check at submission may take,
    code_wall_s = 900          #   seconds one call of its run may take (its preparation and export, an evaluation),
    code_cpu_s = 900           #   CPU seconds one call may use,
    code_memory_mb = 6144      #   and its process's address space (coordinator/lab/sandbox.py)

Every key is checked as a run's are (``coordinator/config.py``): a bad one
is named in the error. docs/lab.md explains each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mjfl.addresses import LAB_API_PORT
from mjfl.coordinator.config import (
    Fields,
    FleetConfig,
    TestbedConfig,
    defaults_of,
    parse_fleet,
    parse_testbed,
    read_toml,
)
from mjfl.coordinator.lab.sandbox import CodeLimits
from mjfl.errors import ConfigError

# The policy between running runs (docs/lab.md, "The policy between runs"): "equal", every device shared round by
# round, each running run's equal part while others are short; "reserved", each run holds its own devices (its
# fleet's size) for its life, as the reservations of other FL systems do (the baseline of `mjfl bench serve`).
SHARES = ("equal", "reserved")
# Whose runs may bring a model of their own (docs/security.md, section 8): nobody's ("off", the default), the lab's
# admins' only, or every researcher's. That code runs only in a bounded child process (sandbox.py), never here.
CUSTOM_CODE = ("off", "admins", "researchers")


@dataclass(frozen=True)
class ApiConfig:
    """Where the researchers' HTTP API (and the lab's dashboard) listens."""

    host: str = "127.0.0.1"
    port: int = LAB_API_PORT


@dataclass(frozen=True)
class LabLimits:
    """What the lab accepts and runs at once."""

    max_request_kb: int = 256
    max_queued_per_researcher: int = 20
    max_running: int = 4
    share: str = "equal"
    code_check_s: float = 60.0
    code_wall_s: float = 900.0
    code_cpu_s: float = 900.0
    code_memory_mb: int = 6144

    def code(self, *, checking: bool) -> CodeLimits:
        """What one call into a submitted model's child may take: its check at submission, or its run's."""
        if checking:
            return CodeLimits(self.code_check_s, self.code_cpu_s, self.code_memory_mb, "limits.code_check_s")
        return CodeLimits(self.code_wall_s, self.code_cpu_s, self.code_memory_mb)


@dataclass(frozen=True)
class LabConfig:
    """A whole lab."""

    fleet: FleetConfig
    server: TestbedConfig = field(default_factory=TestbedConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    limits: LabLimits = field(default_factory=LabLimits)
    out_dir: Path = Path("lab")
    seed: int = 0
    source: Path | None = None
    program_cache: Path | None = None  # None: LAB_DIR/programs, wherever the service's folder is
    custom_code: str = "off"  # CUSTOM_CODE

    def programs(self, out_dir: Path) -> Path:
        """Where the lab's runs keep their exported programs, the service's folder being ``out_dir``."""
        return self.program_cache if self.program_cache is not None else out_dir / "programs"

    @property
    def size(self) -> int:
        """How many devices the lab has (its fleet's size)."""
        assert self.fleet.size is not None
        return self.fleet.size


def load_lab_config(path: Path | str) -> LabConfig:
    """Read and check a lab's configuration file."""
    path = Path(path)
    return parse_lab_config(read_toml(path), base=path.parent, source=path)


def parse_lab_config(raw: dict[str, Any], *, base: Path = Path("."), source: Path | None = None) -> LabConfig:
    top = Fields(raw, "")
    fleet = parse_fleet(top.take("fleet", dict, required=True), base)
    if fleet.size is None:
        raise ConfigError("fleet.size", "give the number of devices the lab has")
    server = parse_testbed(top.take("server", dict, default={}), base, where="server")
    api = _api(top.take("api", dict, default={}))
    limits = _limits(top.take("limits", dict, default={}))
    d = defaults_of(LabConfig)
    out_dir = Path(top.take("out_dir", str, default=str(d["out_dir"]))).expanduser()
    seed = top.take("seed", int, default=d["seed"])
    cache = top.take("program_cache", str, default=None)
    custom_code = top.take("custom_code", str, default=d["custom_code"])
    top.done()
    if custom_code not in CUSTOM_CODE:
        raise ConfigError("custom_code", f"must be one of {', '.join(CUSTOM_CODE)}, got {custom_code!r}")
    if custom_code != "off" and fleet.runtime != "executorch":
        raise ConfigError(
            "fleet.runtime", f"{fleet.runtime!r} builds a model in the devices' processes, which would run a researcher's"
            " code outside its bounded child: with custom_code on, the lab's emulated devices run the exported program"
            " (runtime 'executorch')",
        )
    program_cache = None if cache is None else base / Path(cache).expanduser()
    return LabConfig(fleet, server, api, limits, out_dir, seed, source, program_cache, custom_code)


def _api(raw: dict[str, Any]) -> ApiConfig:
    f = Fields(raw, "api")
    d = defaults_of(ApiConfig)
    api = ApiConfig(
        host=f.take("host", str, default=d["host"]),
        port=f.take("port", int, default=d["port"], check=lambda v: 0 <= v < 65536, need="a TCP port"),
    )
    f.done()
    return api


def _limits(raw: dict[str, Any]) -> LabLimits:
    f = Fields(raw, "limits")
    d = defaults_of(LabLimits)
    limits = LabLimits(
        max_request_kb=f.take("max_request_kb", int, default=d["max_request_kb"], check=lambda v: 1 <= v <= 65536, need="1 to 65536"),
        max_queued_per_researcher=f.take(
            "max_queued_per_researcher", int, default=d["max_queued_per_researcher"], check=lambda v: v >= 1, need=">= 1"
        ),
        max_running=f.take("max_running", int, default=d["max_running"], check=lambda v: v >= 1, need=">= 1"),
        share=f.take("share", str, default=d["share"], check=lambda v: v in SHARES, need=f"one of {SHARES}"),
        code_check_s=f.take("code_check_s", float, default=d["code_check_s"], check=lambda v: v > 0, need="> 0"),
        code_wall_s=f.take("code_wall_s", float, default=d["code_wall_s"], check=lambda v: v > 0, need="> 0"),
        code_cpu_s=f.take("code_cpu_s", float, default=d["code_cpu_s"], check=lambda v: v >= 1, need=">= 1"),
        code_memory_mb=f.take("code_memory_mb", int, default=d["code_memory_mb"], check=lambda v: v >= 1024, need=">= 1024"),
    )
    f.done()
    return limits

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
* ``custom_code_off``: a job names a model of the researcher's own (a
  factory, docs/models.md) and the lab runs no submitted code
  (LAB.toml ``custom_code = "off"``, docs/security.md, section 8);
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

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mjfl.coordinator.config import RunConfig, parse_config
from mjfl.coordinator.lab.config import LabConfig
from mjfl.errors import ConfigError, Refusal, UserError
from mjfl.jobs.base import FACTORY, MODEL_NAMES
from mjfl.jobs.datasets import load_dataset
from mjfl.profiling.profiles import load_profiles


@dataclass(frozen=True)
class Submission:
    """A run the lab can take: its configuration and how many devices it needs connected to start."""

    config: RunConfig
    needs: int

    @property
    def method(self) -> str:
        return self.config.scheduler.method


def check(text: str, lab: LabConfig) -> Submission:
    """The run ``text`` describes, or a Refusal saying why the lab cannot take it."""
    base = lab.source.parent if lab.source is not None else Path(".")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Refusal("config_invalid", f"the config is not valid TOML: {exc}") from None
    _no_custom_code(raw, lab)
    try:
        config = parse_config(raw, base=base)
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
    return Submission(dataclasses.replace(config, source=None), needs)


def _no_custom_code(raw: dict[str, object], lab: LabConfig) -> None:
    """A job whose model is not the zoo's is code of the researcher's own: refused while the lab runs none.

    Checked before the config is parsed, which would look for (and, to hash it, read) the model's file.
    """
    jobs = raw.get("jobs")
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        model = job.get("model") if isinstance(job, dict) else None
        if isinstance(model, str) and FACTORY.match(model) and model not in MODEL_NAMES and lab.custom_code == "off":
            raise Refusal(
                "custom_code_off",
                f"jobs[{index}].model {model!r} is a model of your own, and this lab runs zoo models only"
                f" ({', '.join(MODEL_NAMES)}; LAB.toml custom_code = \"off\"): check it with `mjfl models check`"
                " and run it with `mjfl testbed run` on your own machine, or ask the lab's admin",
                field=f"jobs[{index}].model",
            )


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

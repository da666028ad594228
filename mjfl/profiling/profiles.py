"""Device profiles (fitted Formula 4 parameters) and the profile file format.

A ``DeviceProfile`` carries one device's shifted-exponential round-time model
(Formula 4: ``t = tau*a*D + Exp(rate = mu/(tau*D))``) with its intervals and
goodness of fit, optionally the separate computation and communication models,
and free-form hardware information. Profiles are stored as JSON::

    {"format": "mjfl-profiles/1", "created": "<ISO 8601>", "devices": [{...}, ...]}

(complete field list and an example in docs/profiles.md). Parsing and
rendering are pure (``profiles_from_document`` / ``profiles_to_document``);
``load_profiles`` and ``save_profiles`` are the thin file wrappers.

``draw_fleet`` turns a few real profiles into a larger emulated fleet.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np

from mjfl.errors import DataError, ProfileError
from mjfl.ids import DeviceId
from mjfl.profiling.fit import (
    COMBINED_UNIT,
    COMPUTE_UNIT,
    ComponentFits,
    ShiftedExponentialFit,
)

__all__ = [
    "FORMAT",
    "SOURCES",
    "DeviceProfile",
    "HardwareValue",
    "Source",
    "TimingModel",
    "draw_fleet",
    "load_profiles",
    "profiles_from_document",
    "profiles_to_document",
    "save_profiles",
]

FORMAT = "mjfl-profiles/1"

Source: TypeAlias = Literal["profiled", "synthetic", "refined", "drawn"]
#: Where a profile came from: a profiling session on a device, made up
#: (tests, what-if fleets), refitted from observed rounds, or drawn by
#: ``draw_fleet`` from a real profile.
SOURCES: tuple[str, ...] = ("profiled", "synthetic", "refined", "drawn")

HardwareValue: TypeAlias = str | int | float | bool | None
Interval: TypeAlias = tuple[float, float]


@dataclass(frozen=True)
class TimingModel:
    """A shifted exponential ``a + Exp(rate=mu)`` in a stated unit.

    Used for the separate computation model (unit ``"s/(epoch*sample)"``,
    Formula 4's normalisation) and communication model (``"s/round"`` or
    ``"s/MB"``) of a device. Intervals, KS statistic and ``n`` are those of the
    fit the model came from (``None``/0 when made up).
    """

    a: float
    mu: float
    unit: str
    a_ci: Interval | None = None
    mu_ci: Interval | None = None
    ks_statistic: float | None = None
    n: int = 0

    def __post_init__(self) -> None:
        _check_parameters(self.a, self.mu, self.a_ci, self.mu_ci, self.ks_statistic, self.n)
        if not isinstance(self.unit, str) or not self.unit:
            raise ProfileError("unit", f"must be a non-empty string, got {self.unit!r}")

    @classmethod
    def from_fit(cls, fit: ShiftedExponentialFit, unit: str) -> TimingModel:
        """The model of ``fit`` (``a`` projected onto ``a >= 0``, see ``DeviceProfile``)."""
        return cls(
            a=max(fit.a, 0.0),
            mu=fit.mu,
            unit=unit,
            a_ci=fit.a_ci,
            mu_ci=fit.mu_ci,
            ks_statistic=fit.ks_statistic,
            n=fit.n,
        )


@dataclass(frozen=True)
class DeviceProfile:
    """One device's round-time model, Formula 4, and where it came from.

    ``a`` (seconds per sample per epoch, >= 0) and ``mu`` (> 0) are the
    parameters schedulers and emulated devices use: a round of ``tau`` epochs
    over ``D`` samples takes ``tau*a*D + Exp(rate = mu/(tau*D))`` seconds.
    ``a_ci``/``mu_ci`` are the fit's confidence intervals, ``ks_statistic`` its
    Kolmogorov-Smirnov distance, ``n`` the number of rounds fitted (0 for a
    synthetic profile). ``compute``/``communication`` are the optional
    separate models, ``hardware`` free-form facts (model, SoC, RAM...) whose
    values are JSON scalars; treat it as read-only. ``power_w`` is the power the
    device draws while it trains, watts (> 0), for the modelled energy of
    emulated and simulated devices (``power_w x compute_s``); None: the device
    model's default, ``device.emulated.device_model.TRAINING_POWER_W``
    (3 W, docs/profiles.md).

    A fit's unbiased ``a`` can be negative when the floor is small next to the
    fluctuation (``a_hat = min - scale/n``); profiles made ``from_fit`` project
    it onto the parameter space (``max(a_hat, 0)``), which never increases the
    error since the true ``a`` is >= 0.
    """

    device_id: DeviceId
    a: float
    mu: float
    a_ci: Interval | None = None
    mu_ci: Interval | None = None
    ks_statistic: float | None = None
    n: int = 0
    compute: TimingModel | None = None
    communication: TimingModel | None = None
    hardware: Mapping[str, HardwareValue] = field(default_factory=dict, hash=False)
    source: Source = "synthetic"
    power_w: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device_id, str) or not self.device_id:
            raise ProfileError("device_id", f"must be a non-empty string, got {self.device_id!r}")
        _check_parameters(self.a, self.mu, self.a_ci, self.mu_ci, self.ks_statistic, self.n)
        if self.source not in SOURCES:
            raise ProfileError(
                "source", f"must be one of {', '.join(SOURCES)}, got {self.source!r}"
            )
        for name in ("compute", "communication"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, TimingModel):
                raise ProfileError(name, f"must be a TimingModel or None, got {value!r}")
        if not isinstance(self.hardware, Mapping):
            raise ProfileError("hardware", f"must be a mapping, got {self.hardware!r}")
        for key, value in self.hardware.items():
            if not isinstance(key, str):
                raise ProfileError("hardware", f"keys must be strings, got {key!r}")
            if not _is_json_scalar(value):
                raise ProfileError(f"hardware.{key}", f"must be a JSON scalar, got {value!r}")
        if self.power_w is not None and not (
            isinstance(self.power_w, int | float) and not isinstance(self.power_w, bool)
            and math.isfinite(self.power_w) and self.power_w > 0
        ):
            raise ProfileError("power_w", f"must be a positive number of watts or null, got {self.power_w!r}")
        # A private copy, so the caller's dict cannot change a frozen profile.
        object.__setattr__(self, "hardware", dict(self.hardware))

    @classmethod
    def from_fit(
        cls,
        device_id: DeviceId,
        fit: ShiftedExponentialFit | ComponentFits,
        *,
        source: Source = "profiled",
        hardware: Mapping[str, HardwareValue] | None = None,
    ) -> DeviceProfile:
        """A profile from a Formula 4 fit, or from compute/communication/combined fits."""
        if isinstance(fit, ComponentFits):
            combined = fit.combined
            compute: TimingModel | None = TimingModel.from_fit(fit.compute, COMPUTE_UNIT)
            communication = (
                None
                if fit.communication is None
                else TimingModel.from_fit(fit.communication, fit.communication_unit)
            )
        else:
            combined, compute, communication = fit, None, None
        return cls(
            device_id=device_id,
            a=max(combined.a, 0.0),
            mu=combined.mu,
            a_ci=combined.a_ci,
            mu_ci=combined.mu_ci,
            ks_statistic=combined.ks_statistic,
            n=combined.n,
            compute=compute,
            communication=communication,
            hardware=dict(hardware or {}),
            source=source,
        )

    def refined(self, fit: ShiftedExponentialFit) -> DeviceProfile:
        """This profile with ``a``, ``mu`` and their statistics replaced by ``fit``.

        For ``ProfileRefiner`` output: the source becomes ``"refined"``; the
        hardware information and the separate models are kept.
        """
        return dataclasses.replace(
            self,
            a=max(fit.a, 0.0),
            mu=fit.mu,
            a_ci=fit.a_ci,
            mu_ci=fit.mu_ci,
            ks_statistic=fit.ks_statistic,
            n=fit.n,
            source="refined",
        )


def draw_fleet(
    profiles: Sequence[DeviceProfile], n: int, rng: np.random.Generator
) -> list[DeviceProfile]:
    """Draw ``n`` emulated devices from a (smaller) set of real profiles.

    Method (docs/profiles.md, "draw_fleet"):

    1. Assignment: every real profile is used ``n // P`` times
       (``P = len(profiles)``); the ``n % P`` extra copies go to profiles
       chosen at random without replacement. The fleet therefore has the real
       fleet's mix of fast and slow phones.
    2. Copy ``k`` of a profile gets the id ``"<device_id>#<k>"``. Copy 0 keeps
       the measured parameters exactly (so ``n == P`` reproduces the real
       fleet); every later copy draws ``u_a, u_mu ~ U(0, 1)`` and sets
       ``a* = lo_a + u_a (hi_a - lo_a)`` (then ``max(a*, 0)``) and
       ``mu* = lo_mu + u_mu (hi_mu - lo_mu)`` inside the profile's confidence
       intervals: parameters the profiling data cannot reject, so copies
       differ by no more than what was measured allows. A parameter without
       an interval is copied unchanged.
    3. The separate compute/communication models are moved with the same
       ``u_a, u_mu`` inside their own intervals, so a copy slower overall is
       slower in its parts too. Drawn profiles have ``source="drawn"`` and
       keep the original intervals, KS statistic, ``n`` and hardware.

    Output order: copy 0 of every profile in input order, then copy 1, ...
    Deterministic for a given ``rng`` state; ids are unique.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ProfileError("n", f"must be a positive integer, got {n!r}")
    if not profiles:
        raise ProfileError("profiles", "need at least one profile to draw a fleet from")
    ids = [p.device_id for p in profiles]
    if len(set(ids)) != len(ids):
        raise ProfileError("profiles", "device ids must be unique")
    count = len(profiles)
    copies = np.full(count, n // count)
    extra = rng.choice(count, size=n % count, replace=False)
    copies[extra] += 1
    fleet: list[DeviceProfile] = []
    for k in range(int(copies.max())):
        for index, base in enumerate(profiles):
            if k >= copies[index]:
                continue
            fleet.append(_copy(base, k, rng))
    return fleet


def profiles_to_document(profiles: Sequence[DeviceProfile], *, created: str) -> dict[str, Any]:
    """The JSON document (plain dicts and lists) of ``profiles``; pure."""
    _check_created(created, "created")
    ids = [p.device_id for p in profiles]
    if len(set(ids)) != len(ids):
        raise ProfileError("devices", "device ids must be unique")
    return {"format": FORMAT, "created": created, "devices": [_device_to_json(p) for p in profiles]}


def profiles_from_document(document: Any, *, origin: str = "<document>") -> list[DeviceProfile]:
    """Parse a profile document; ``DataError`` naming ``origin`` and the bad field."""
    parser = _Parser(origin)
    return parser.document(document)


def load_profiles(path: str | os.PathLike[str]) -> list[DeviceProfile]:
    """Read a profile file; ``DataError`` naming the file and the bad field if malformed."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DataError(f"{file}: profile file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{file}: cannot read profile file: {exc}") from exc
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{file}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from exc
    except ValueError as exc:
        raise DataError(f"{file}: {exc}") from exc
    return profiles_from_document(document, origin=str(file))


def save_profiles(
    path: str | os.PathLike[str], profiles: Sequence[DeviceProfile], *, created: str
) -> None:
    """Write ``profiles`` to ``path`` (atomically: a temporary file, then rename).

    ``created`` is an ISO 8601 time string supplied by the caller (the core
    reads no clock).
    """
    text = json.dumps(profiles_to_document(profiles, created=created), indent=2, allow_nan=False)
    file = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(temporary, file)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# --- drawing ---------------------------------------------------------------


def _copy(base: DeviceProfile, k: int, rng: np.random.Generator) -> DeviceProfile:
    device_id = DeviceId(f"{base.device_id}#{k}")
    if k == 0:
        return dataclasses.replace(base, device_id=device_id, source="drawn")
    u_a, u_mu = (float(u) for u in rng.random(2))
    return dataclasses.replace(
        base,
        device_id=device_id,
        a=_within(base.a, base.a_ci, u_a, floor=0.0),
        mu=_within(base.mu, base.mu_ci, u_mu, floor=None),
        compute=_jitter_model(base.compute, u_a, u_mu),
        communication=_jitter_model(base.communication, u_a, u_mu),
        source="drawn",
    )


def _jitter_model(model: TimingModel | None, u_a: float, u_mu: float) -> TimingModel | None:
    if model is None:
        return None
    return dataclasses.replace(
        model,
        a=_within(model.a, model.a_ci, u_a, floor=0.0),
        mu=_within(model.mu, model.mu_ci, u_mu, floor=None),
    )


def _within(value: float, interval: Interval | None, u: float, *, floor: float | None) -> float:
    if interval is None:
        return value
    low, high = interval
    drawn = low + u * (high - low)
    return drawn if floor is None else max(drawn, floor)


# --- validation shared by the dataclasses and the parser -------------------


def _check_parameters(
    a: float,
    mu: float,
    a_ci: Interval | None,
    mu_ci: Interval | None,
    ks_statistic: float | None,
    n: int,
) -> None:
    if not _is_real(a) or not math.isfinite(a) or a < 0.0:
        raise ProfileError("a", f"must be a finite number >= 0, got {a!r}")
    if not _is_real(mu) or not math.isfinite(mu) or mu <= 0.0:
        raise ProfileError("mu", f"must be a finite number > 0, got {mu!r}")
    for name, interval in (("a_ci", a_ci), ("mu_ci", mu_ci)):
        if interval is None:
            continue
        if (
            not isinstance(interval, tuple)
            or len(interval) != 2
            or not all(_is_real(v) and math.isfinite(v) for v in interval)
            or interval[0] > interval[1]
        ):
            raise ProfileError(
                name, f"must be a pair of finite numbers low <= high, got {interval!r}"
            )
    if mu_ci is not None and mu_ci[0] <= 0.0:
        raise ProfileError("mu_ci", f"must be positive, got {mu_ci!r}")
    if ks_statistic is not None and (not _is_real(ks_statistic) or not 0.0 <= ks_statistic <= 1.0):
        raise ProfileError("ks_statistic", f"must be a number in [0, 1], got {ks_statistic!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ProfileError("n", f"must be an integer >= 0, got {n!r}")


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_json_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def _check_created(created: object, where: str) -> None:
    if not isinstance(created, str):
        raise ProfileError(where, f"must be an ISO 8601 time string, got {created!r}")
    try:
        datetime.fromisoformat(created)
    except ValueError as exc:
        raise ProfileError(where, f"must be an ISO 8601 time string, got {created!r}") from exc


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in a profile file")


# --- JSON rendering and parsing --------------------------------------------

_MODEL_KEYS = ("a", "mu", "unit", "a_ci", "mu_ci", "ks_statistic", "n")
_DEVICE_KEYS = (
    "device_id",
    "a",
    "mu",
    "a_ci",
    "mu_ci",
    "ks_statistic",
    "n",
    "compute",
    "communication",
    "hardware",
    "source",
    "power_w",
)


def _model_to_json(model: TimingModel | None) -> dict[str, Any] | None:
    if model is None:
        return None
    return {
        "a": model.a,
        "mu": model.mu,
        "unit": model.unit,
        "a_ci": _interval_to_json(model.a_ci),
        "mu_ci": _interval_to_json(model.mu_ci),
        "ks_statistic": model.ks_statistic,
        "n": model.n,
    }


def _device_to_json(profile: DeviceProfile) -> dict[str, Any]:
    return {
        "device_id": profile.device_id,
        "a": profile.a,
        "mu": profile.mu,
        "unit": COMBINED_UNIT,
        "a_ci": _interval_to_json(profile.a_ci),
        "mu_ci": _interval_to_json(profile.mu_ci),
        "ks_statistic": profile.ks_statistic,
        "n": profile.n,
        "compute": _model_to_json(profile.compute),
        "communication": _model_to_json(profile.communication),
        "hardware": dict(profile.hardware),
        "source": profile.source,
        # Written only when known, so that files without it stay as they were.
        **({"power_w": profile.power_w} if profile.power_w is not None else {}),
    }


def _interval_to_json(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [interval[0], interval[1]]


class _Parser:
    """Turns a decoded JSON document into profiles, naming the bad field on error."""

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def fail(self, where: str, problem: str) -> DataError:
        return DataError(f"{self._origin}: field '{where}': {problem}")

    def document(self, document: Any) -> list[DeviceProfile]:
        if not isinstance(document, dict):
            raise DataError(f"{self._origin}: a profile file must hold a JSON object")
        self.keys(document, ("format", "created", "devices"), required=3, where="")
        if document["format"] != FORMAT:
            raise self.fail("format", f"expected {FORMAT!r}, got {document['format']!r}")
        try:
            _check_created(document["created"], "created")
        except ProfileError as exc:
            raise self.fail("created", exc.problem) from exc
        devices = document["devices"]
        if not isinstance(devices, list):
            raise self.fail("devices", "must be a list")
        profiles = [self.device(entry, f"devices[{i}]") for i, entry in enumerate(devices)]
        seen: dict[str, int] = {}
        for i, profile in enumerate(profiles):
            if profile.device_id in seen:
                raise self.fail(
                    f"devices[{i}].device_id",
                    f"{profile.device_id!r} already used by devices[{seen[profile.device_id]}]",
                )
            seen[profile.device_id] = i
        return profiles

    def keys(
        self, entry: dict[str, Any], allowed: Sequence[str], *, required: int, where: str
    ) -> None:
        prefix = f"{where}." if where else ""
        for key in allowed[:required]:
            if key not in entry:
                raise self.fail(f"{prefix}{key}", "missing")
        for key in entry:
            if key not in allowed:
                raise self.fail(f"{prefix}{key}", "unknown field")

    def device(self, entry: Any, where: str) -> DeviceProfile:
        if not isinstance(entry, dict):
            raise self.fail(where, "must be a JSON object")
        # "unit" is written for readers; the combined model's unit is fixed.
        self.keys(entry, (*_DEVICE_KEYS[:3], "unit", *_DEVICE_KEYS[3:]), required=3, where=where)
        if "unit" in entry and entry["unit"] != COMBINED_UNIT:
            raise self.fail(f"{where}.unit", f"must be {COMBINED_UNIT!r}, got {entry['unit']!r}")
        hardware = entry.get("hardware") or {}
        if not isinstance(hardware, dict):
            raise self.fail(f"{where}.hardware", "must be a JSON object")
        try:
            return DeviceProfile(
                device_id=DeviceId(entry["device_id"]),
                a=entry["a"],
                mu=entry["mu"],
                a_ci=self.interval(entry.get("a_ci"), f"{where}.a_ci"),
                mu_ci=self.interval(entry.get("mu_ci"), f"{where}.mu_ci"),
                ks_statistic=entry.get("ks_statistic"),
                n=entry.get("n", 0),
                compute=self.model(entry.get("compute"), f"{where}.compute"),
                communication=self.model(entry.get("communication"), f"{where}.communication"),
                hardware=hardware,
                source=entry.get("source", "profiled"),
                power_w=entry.get("power_w"),
            )
        except ProfileError as exc:
            raise self.fail(f"{where}.{exc.field}", exc.problem) from exc

    def model(self, entry: Any, where: str) -> TimingModel | None:
        if entry is None:
            return None
        if not isinstance(entry, dict):
            raise self.fail(where, "must be a JSON object or null")
        self.keys(entry, _MODEL_KEYS, required=3, where=where)
        try:
            return TimingModel(
                a=entry["a"],
                mu=entry["mu"],
                unit=entry["unit"],
                a_ci=self.interval(entry.get("a_ci"), f"{where}.a_ci"),
                mu_ci=self.interval(entry.get("mu_ci"), f"{where}.mu_ci"),
                ks_statistic=entry.get("ks_statistic"),
                n=entry.get("n", 0),
            )
        except ProfileError as exc:
            raise self.fail(f"{where}.{exc.field}", exc.problem) from exc

    def interval(self, value: Any, where: str) -> Interval | None:
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 2:
            raise self.fail(where, f"must be [low, high] or null, got {value!r}")
        return (value[0], value[1])

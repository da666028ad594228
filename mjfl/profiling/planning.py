"""The Formula 4 parameters a device is planned with, measured or not.

Schedulers need an ``a`` and a ``mu`` for every device they may plan, and a
device that connects to the testbed may never have been profiled. In order of
preference a device is planned with:

1. ``"profiles"``: the lab's measured profile of that device id (a profile
   file, ``fleet.profiles``);
2. ``"hello"``: the ``a`` / ``mu`` its hello announces in ``hardware``
   (docs/protocol.md 5.1; emulated devices impersonating a profile send theirs);
3. ``"default"``: a neutral profile: the median of the lab's profiles, or
   ``DEFAULT_A`` / ``DEFAULT_MU`` when none is known.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from mjfl.profiling.profiles import DeviceProfile

__all__ = ["DEFAULT_A", "DEFAULT_MU", "PlanningProfiles", "ProfileSource"]

DEFAULT_A = 0.005
DEFAULT_MU = 500.0
"""The neutral profile of a device nobody profiled (when no profile is known at all).

a = 5 ms per sample and epoch with a mean fluctuation of 2 ms (1/mu): the
middle of the synthetic fleet's ranges (mjfl/schedulers/synthetic.py), so an
unknown device is planned as an average phone, neither favoured nor shunned.
When some profiles are known, unknown devices get their median instead.
"""

ProfileSource: TypeAlias = Literal["profiles", "hello", "default"]


class PlanningProfiles:
    """The lab's measured profiles, and the rule for devices they do not cover."""

    def __init__(self, profiles: Mapping[str, DeviceProfile] | Sequence[DeviceProfile] = ()) -> None:
        if not isinstance(profiles, Mapping):
            profiles = {p.device_id: p for p in profiles}
        self.measured: Mapping[str, DeviceProfile] = dict(profiles)
        if self.measured:
            self.default = (
                float(statistics.median(p.a for p in self.measured.values())),
                float(statistics.median(p.mu for p in self.measured.values())),
            )
        else:
            self.default = (DEFAULT_A, DEFAULT_MU)

    def for_device(self, device: str, hardware: Mapping[str, Any]) -> tuple[float, float, ProfileSource]:
        """``(a, mu, source)`` for ``device``, whose hello announced ``hardware``."""
        known = self.measured.get(device)
        if known is not None:
            return known.a, known.mu, "profiles"
        a, mu = _number(hardware.get("a")), _number(hardware.get("mu"))
        if a is not None and mu is not None and a >= 0 and mu > 0:
            return a, mu, "hello"
        return *self.default, "default"


def _number(value: object) -> float | None:
    """A finite JSON number as a float, else None (booleans are not numbers)."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    return None

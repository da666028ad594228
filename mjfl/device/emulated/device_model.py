"""One device model: how a device takes a round, for simulated and emulated devices alike.

A device's round time (Formula 4's t_k^m), its chance of dropping out, what a
deadline does to a round, and the trainers it keeps loaded are decided here
and nowhere else. The virtual-time fleet (``coordinator/run/simulated.py``) and
the emulated devices (``emulator/``) both ask this module, so a simulated
device and an emulated device impersonating the same profile behave alike:
one waits on the virtual clock, the other on the wall clock.

Round time. A device with a profile takes ``t = tau*a*D + Exp(rate =
mu/(tau*D))`` for a task of ``tau`` epochs over its ``D`` samples (Formula 4),
however long the training really took on this machine; one without a profile
takes as long as its training does.

Drop-outs and deadlines. The fate of a round is drawn before it is trained,
so a device's random stream never depends on how training went. A device that
drops out never answers: the coordinator learns it at the task's deadline,
or, with no deadline, when the round would have ended. A device slower than
the deadline is given up at the deadline.

Energy. A phone measures each task's energy from its battery (protocol.md
5.5); an emulated or simulated device reports a modelled one,
``modelled_energy``: ``power_w x compute_s``, the power its profile gives
(``DeviceProfile.power_w``, else ``TRAINING_POWER_W``) over the round's
compute time (the drawn round time when it impersonates a profile). Both
answer in the result's ``device_state`` (``energy_j``, ``energy_source``), so
the coordinator records every device's energy alike.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mjfl.jobs.base import LocalTraining, Trainer, TrainResult
from mjfl.schedulers import round_time

__all__ = [
    "TRAINING_POWER_W",
    "DeviceModel",
    "ModelName",
    "RoundDraw",
    "TrainerCache",
    "TrainerFactory",
    "default_trainer_factory",
    "modelled_energy",
]

#: The power a device without its own ``power_w`` draws while it trains, watts. A modelling
#: assumption: a phone sheds at most about 3 W of heat, so sustained load (training) is held
#: near it (Tarkoma et al., "Smartphone Energy Consumption", Cambridge University Press, 2014,
#: as summarised at https://petewarden.com/2015/10/08/smartphone-energy-consumption/).
TRAINING_POWER_W = 3.0


def modelled_energy(power_w: float | None, compute_s: float) -> dict[str, float | str]:
    """A result's ``device_state`` energy for a device that cannot measure it: power x time.

    ``power_w`` None means ``TRAINING_POWER_W``. Radio and idle power are left out: the
    model prices training only, as the phone's battery reading (taken around training) does.
    """
    watts = TRAINING_POWER_W if power_w is None else power_w
    return {"energy_j": watts * max(compute_s, 0.0), "energy_source": "modelled"}


@dataclass(frozen=True)
class RoundDraw:
    """One round's fate: how long the device takes, and whether it drops out."""

    duration_s: float | None  # None: as long as training takes here (no profile)
    drops: bool = False

    def failure(self, deadline_s: float | None) -> tuple[float, str] | None:
        """``(after_s, reason)`` when the coordinator learns that this round failed, else None."""
        if self.drops:
            # A lost device is noticed only when its deadline passes.
            after = deadline_s if deadline_s is not None else self.duration_s or 0.0
            return after, "dropped out"
        if deadline_s is not None and self.duration_s is not None and self.duration_s > deadline_s:
            return deadline_s, f"missed the {deadline_s:.1f} s deadline"
        return None


class DeviceModel:
    """Formula 4 round times and drop-outs of one device, drawn from its own random stream.

    ``a``/``mu`` are the device's profile (None: it takes as long as it
    trains); ``dropout`` the chance that a round never comes back.
    """

    def __init__(self, a: float | None, mu: float | None, *, dropout: float = 0.0, rng: np.random.Generator) -> None:
        if (a is None) != (mu is None):
            raise ValueError("give both a and mu, or neither")
        if a is not None and mu is not None and not (a >= 0 and mu > 0):
            raise ValueError(f"Formula 4 needs a >= 0 and mu > 0, got a={a}, mu={mu}")
        if not 0 <= dropout <= 1:
            raise ValueError(f"dropout must lie in [0, 1], got {dropout}")
        self.a, self.mu, self.dropout, self.rng = a, mu, dropout, rng

    def draw(self, epochs: int, samples: int) -> RoundDraw:
        """The fate of a round of ``epochs`` local epochs over ``samples`` samples."""
        duration = None
        if self.a is not None and self.mu is not None:
            shift, rate = round_time.shift_and_rate(self.a, self.mu, epochs, samples)
            duration = float(round_time.sample(self.rng, shift, rate))
        return RoundDraw(duration, bool(self.rng.random() < self.dropout))


# -- trainers -----------------------------------------------------------------


class ModelName(Protocol):
    """A job's network as either side names it: the zoo's ModelSpec or the wire's."""

    @property
    def name(self) -> str: ...

    @property
    def input_shape(self) -> tuple[int, ...]: ...

    @property
    def num_classes(self) -> int: ...


TrainerFactory = Callable[[str, ModelName, bytes], Trainer]
"""``(runtime, model, program bytes) -> Trainer``; runs where the trainer will train.

Must pickle to reach worker processes: a module-level function, or a
``functools.partial`` of one.
"""


def default_trainer_factory(runtime: str, model: ModelName, program: bytes) -> Trainer:
    """The trainers of ``mjfl.jobs.trainers`` (imports torch, where it is called)."""
    from mjfl.jobs.base import ModelSpec
    from mjfl.jobs.trainers import make_trainer

    if isinstance(model, ModelSpec):
        return make_trainer(runtime, model, program)
    if runtime == "executorch":
        # As a phone does: the program and the provision's model spec, no model code.
        return make_trainer(runtime, model, program, batch_norm_pixels=tuple(getattr(model, "batch_norm_pixels", ())))
    spec = ModelSpec(model.name, tuple(model.input_shape), model.num_classes)  # type: ignore[arg-type]
    return make_trainer(runtime, spec, program)


class TrainerCache:
    """Loaded trainers by (runtime, program sha256, model), least recently used dropped past ``size``.

    A job's program is loaded once per cache, i.e. once per worker process of
    the simulated fleet and once per training lane of emulated devices.
    ``torch_threads`` sets torch's intra-op threads once torch is in (1 where
    several processes share the cores).
    """

    def __init__(
        self, make_trainer: TrainerFactory | None = None, *, size: int = 8, torch_threads: int | None = None
    ) -> None:
        self._make_trainer = make_trainer or default_trainer_factory
        self._trainers: OrderedDict[tuple[str, str, ModelName], Trainer] = OrderedDict()
        self._size = size
        self._torch_threads = torch_threads

    def train(
        self,
        runtime: str,
        model: ModelName,
        program_sha256: str,
        program: Callable[[], bytes],
        weights: Mapping[str, np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        training: LocalTraining,
        *,
        seed: int = 0,
    ) -> tuple[TrainResult, float]:
        """Train with the cached trainer (loading it from ``program()`` first if needed).

        Returns the result and the seconds spent loading the trainer (0 when cached).
        """
        started = time.perf_counter()
        trainer = self._trainer(runtime, model, program_sha256, program)
        loaded = time.perf_counter() - started
        # Writable copies: weights received off the wire are read-only views.
        weights = {name: np.array(value) for name, value in weights.items()}
        result = trainer.train(weights, x, y, training, seed=seed)
        return result, loaded

    def _trainer(self, runtime: str, model: ModelName, sha256: str, program: Callable[[], bytes]) -> Trainer:
        key = (runtime, sha256, model)
        trainer = self._trainers.get(key)
        if trainer is None:
            # Before the trainer's first op when torch is already in (a process
            # forked from one that ran torch must not start its inherited thread
            # pool: it can deadlock), else once a trainer that needs torch
            # imported it (a lightweight trainer does not pay for importing it).
            self._limit_torch_threads()
            trainer = self._make_trainer(runtime, model, program())
            self._limit_torch_threads()
            self._trainers[key] = trainer
            while len(self._trainers) > self._size:
                self._trainers.popitem(last=False)
        self._trainers.move_to_end(key)
        return trainer

    def _limit_torch_threads(self) -> None:
        if self._torch_threads is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(self._torch_threads)
            self._torch_threads = None

"""Partitioning of a job's training set across the K devices of the fleet.

Each device k holds its own local data set D_k^m for job m (System Model,
Section 3). :func:`partition` decides which training samples those are; it is
pure: labels and a ``numpy.random.Generator`` in, one index array per device
out, the same generator seed always giving the same split.

Schemes (docs/data.md explains them with worked numbers):

- ``"iid"``: a uniform random split into near-equal parts (sizes differ by at
  most one);
- ``"noniid"``: the paper's scheme (Section 5, "each category is divided into
  20 parts; each device randomly selects two categories and then one part from
  each"), generalised to any K so that every sample is used;
- ``"dirichlet"``: per-class Dirichlet(alpha) proportions over the devices,
  the usual label-skew benchmark; smaller alpha means more skew.

Every scheme returns disjoint, sorted ``int64`` index arrays that together hold
every index of ``labels`` exactly once, and no device is left empty.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from mjfl.errors import ConfigError, UserError

SCHEMES = ("iid", "noniid", "dirichlet")

IndexArray = NDArray[np.int64]


def partition(
    labels: np.ndarray,
    num_devices: int,
    scheme: str,
    rng: np.random.Generator,
    *,
    classes_per_device: int = 2,
    shards_per_class: int | None = None,
    alpha: float = 0.5,
) -> list[IndexArray]:
    """Split the indices of ``labels`` across ``num_devices`` devices.

    Args:
        labels: 1-D integer class labels of the training set (any class ids).
        num_devices: K, the number of devices; at most ``len(labels)``.
        scheme: ``"iid"``, ``"noniid"`` or ``"dirichlet"``.
        rng: the only source of randomness.
        classes_per_device: ``"noniid"`` only: distinct classes per device
            (the paper's 2).
        shards_per_class: ``"noniid"`` only: shards each class is cut into;
            default ``ceil(K * classes_per_device / num_classes)`` (the paper's
            20 for K=100, 10 classes).
        alpha: ``"dirichlet"`` only: concentration, > 0.

    Returns:
        ``num_devices`` sorted ``int64`` index arrays, disjoint, non-empty and
        covering every index exactly once.

    Raises:
        ConfigError: an impossible request (naming the offending argument).
        UserError: ``labels`` is not a non-empty 1-D integer array.
    """
    labels = _check_labels(labels)
    if isinstance(num_devices, bool) or not isinstance(num_devices, int | np.integer):
        raise ConfigError("num_devices", f"must be an integer, got {num_devices!r}")
    if num_devices < 1:
        raise ConfigError("num_devices", f"must be at least 1, got {num_devices}")
    if num_devices > labels.size:
        raise ConfigError(
            "num_devices",
            f"{num_devices} devices but only {labels.size} training samples: "
            "every device needs at least one sample",
        )
    if scheme == "iid":
        parts = _iid(labels.size, int(num_devices), rng)
    elif scheme == "noniid":
        parts = _noniid(labels, int(num_devices), rng, classes_per_device, shards_per_class)
    elif scheme == "dirichlet":
        parts = _dirichlet(labels, int(num_devices), rng, alpha)
    else:
        raise ConfigError("scheme", f"unknown partition scheme {scheme!r}; use one of {SCHEMES}")
    return [np.sort(p).astype(np.int64, copy=False) for p in parts]


def _check_labels(labels: np.ndarray) -> NDArray[np.int64]:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise UserError(f"labels must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise UserError(f"labels must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _iid(num_samples: int, num_devices: int, rng: np.random.Generator) -> list[IndexArray]:
    return list(np.array_split(rng.permutation(num_samples), num_devices))


def _noniid(
    labels: NDArray[np.int64],
    num_devices: int,
    rng: np.random.Generator,
    classes_per_device: int,
    shards_per_class: int | None,
) -> list[IndexArray]:
    """The paper's shard scheme, generalised to any K (docs/data.md).

    Class j is taken by d_j devices, the d_j as equal as possible
    (floor or ceil of K*c/n) with sum d_j = K*c, so each device holds exactly c
    distinct classes. Class j is cut into S equal shards (S >= d_j); each taker
    gets one shard and the S - d_j spare shards go, one each, to randomly chosen
    takers of that same class, so every sample is used and no device gains a
    class. When K*c < n there are fewer slots than classes: each class then goes
    whole to one device and devices hold floor(n/K) or ceil(n/K) classes.
    """
    classes, inverse = np.unique(labels, return_inverse=True)
    num_classes = classes.size
    c = classes_per_device
    if isinstance(c, bool) or not isinstance(c, int | np.integer) or c < 1:
        raise ConfigError("classes_per_device", f"must be a positive integer, got {c!r}")
    if c > num_classes:
        raise ConfigError(
            "classes_per_device",
            f"{c} distinct classes per device but the labels hold only {num_classes} classes",
        )
    slots = num_devices * c
    if slots >= num_classes:
        base, extra = divmod(slots, num_classes)
        takers = np.full(num_classes, base, dtype=np.int64)
        takers[rng.choice(num_classes, size=extra, replace=False)] += 1
        needed = base + (extra > 0)
        device_classes = _assign_classes(takers, num_devices, c, rng)
    else:
        # Fewer slots than classes: hand out whole classes, none left unused.
        takers = np.ones(num_classes, dtype=np.int64)
        needed = 1
        device_classes = list(np.array_split(rng.permutation(num_classes), num_devices))

    shards = needed if shards_per_class is None else shards_per_class
    if isinstance(shards, bool) or not isinstance(shards, int | np.integer) or shards < 1:
        raise ConfigError("shards_per_class", f"must be a positive integer, got {shards!r}")
    if shards < needed:
        raise ConfigError(
            "shards_per_class",
            f"{shards} shards per class x {num_classes} classes cannot give {num_devices} "
            f"devices {c} distinct classes each; need at least {needed} shards per class",
        )
    counts = np.bincount(inverse, minlength=num_classes)
    if counts.min() < shards:
        j = int(np.argmin(counts))
        raise ConfigError(
            "shards_per_class" if shards_per_class is not None else "num_devices",
            f"class {classes[j]} has {counts[j]} samples, fewer than the {shards} shards it "
            f"must be cut into for {num_devices} devices x {c} classes; use fewer devices, "
            "fewer shards, or the 'iid' or 'dirichlet' scheme",
        )

    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for device, held in enumerate(device_classes):
        for j in held:
            holders[int(j)].append(device)
    assert all(len(h) == t for h, t in zip(holders, takers, strict=True))

    parts: list[list[IndexArray]] = [[] for _ in range(num_devices)]
    for j in range(num_classes):
        members = rng.permutation(np.flatnonzero(inverse == j))
        order = rng.permutation(np.asarray(holders[j], dtype=np.int64))
        for s, shard in enumerate(np.array_split(members, shards)):
            # Shard s goes to taker s mod d_j: every taker gets one, spares are
            # dealt to the (randomly ordered) first takers.
            parts[int(order[s % order.size])].append(shard)
    return [np.concatenate(p) for p in parts]


def _assign_classes(
    takers: NDArray[np.int64], num_devices: int, c: int, rng: np.random.Generator
) -> list[IndexArray]:
    """Give each device ``c`` distinct classes so that class j goes to takers[j] devices.

    Devices are filled one at a time in random order, picking classes with
    probability proportional to their remaining capacity. The invariant
    "r devices left, sum(capacity) = r*c, every capacity <= r" keeps the rest
    feasible: a class whose capacity equals r must be taken by every remaining
    device, so it is forced now, and at least c classes always have capacity.
    """
    capacity = takers.copy()
    assigned: list[IndexArray] = [np.empty(0, dtype=np.int64)] * num_devices
    for left, device in zip(range(num_devices, 0, -1), rng.permutation(num_devices), strict=True):
        forced = np.flatnonzero(capacity == left)
        free = np.flatnonzero((capacity > 0) & (capacity < left))
        weights = capacity[free] / capacity[free].sum() if free.size else None
        chosen = rng.choice(free, size=c - forced.size, replace=False, p=weights)
        held = np.concatenate([forced, chosen]).astype(np.int64)
        capacity[held] -= 1
        assigned[int(device)] = held
    assert not capacity.any()
    return assigned


def _dirichlet(
    labels: NDArray[np.int64], num_devices: int, rng: np.random.Generator, alpha: float
) -> list[IndexArray]:
    """Per class j, draw p ~ Dirichlet(alpha * 1_K) and deal its samples by Multinomial(p).

    A device left empty then receives one random sample from the currently
    largest device, repeated until none is empty (possible since K <= N); this
    is deterministic given the generator, unlike redrawing until no device is
    empty, which may never end for a tiny alpha.
    """
    if not (isinstance(alpha, int | float | np.floating) and math.isfinite(alpha) and alpha > 0):
        raise ConfigError(
            "alpha", f"Dirichlet concentration must be a finite number > 0, got {alpha!r}"
        )
    classes, inverse = np.unique(labels, return_inverse=True)
    parts: list[list[IndexArray]] = [[] for _ in range(num_devices)]
    for j in range(classes.size):
        members = rng.permutation(np.flatnonzero(inverse == j))
        p = rng.dirichlet(np.full(num_devices, float(alpha)))
        p = np.nan_to_num(p, nan=0.0)
        p = p / p.sum() if p.sum() > 0 else np.full(num_devices, 1.0 / num_devices)
        counts = rng.multinomial(members.size, p)
        for device, chunk in enumerate(np.split(members, np.cumsum(counts)[:-1])):
            if chunk.size:
                parts[device].append(chunk)
    out = [np.concatenate(p) if p else np.empty(0, dtype=np.int64) for p in parts]
    for device in range(num_devices):
        if out[device].size == 0:
            donor = int(np.argmax([p.size for p in out]))
            pick = int(rng.integers(out[donor].size))
            out[device] = out[donor][pick : pick + 1]
            out[donor] = np.delete(out[donor], pick)
    return out

"""FedAvg (McMahan et al. 2017): the sample-weighted mean of the devices' models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

Weights = Mapping[str, NDArray[np.float32]]


def fedavg(updates: Sequence[tuple[Weights, int]]) -> dict[str, NDArray[np.float32]]:
    """``w = sum_k n_k w_k / sum_k n_k`` over ``(weights, samples)`` pairs (Step 6).

    Accumulates in float64 so the order of devices does not change the result
    beyond float32 rounding; every update must have the same names and shapes.
    """
    if not updates:
        raise ValueError("FedAvg needs at least one update")
    total = sum(samples for _, samples in updates)
    if total <= 0 or any(samples < 0 for _, samples in updates):
        raise ValueError("sample counts must be non-negative with a positive sum")
    names = list(updates[0][0])
    out: dict[str, NDArray[np.float32]] = {}
    for name in names:
        acc = np.zeros(np.shape(updates[0][0][name]), dtype=np.float64)
        for weights, samples in updates:
            acc += (samples / total) * np.asarray(weights[name], dtype=np.float64)
        out[name] = acc.astype(np.float32)
    return out


def check_update(reference: Weights, update: Weights) -> str | None:
    """Why ``update`` is not a valid update of ``reference`` (names, shapes, dtype, finite), or None."""
    if list(update) != list(reference):
        missing = [k for k in reference if k not in update]
        extra = [k for k in update if k not in reference]
        return f"tensor names differ (missing {missing[:3]}, unexpected {extra[:3]})"
    for name, ref in reference.items():
        got = np.asarray(update[name])
        if got.shape != np.shape(ref):
            return f"tensor {name!r} has shape {got.shape}, expected {np.shape(ref)}"
        if got.dtype != np.float32:
            return f"tensor {name!r} has dtype {got.dtype}, expected float32"
        if not np.all(np.isfinite(got)):
            return f"tensor {name!r} has non-finite values"
    return None


def update_sizes(reference: Weights, updates: Sequence[Weights]) -> NDArray[np.float64]:
    """Each update's size ``||w_k - w||``: the L2 norm over all its tensors of its change from ``w``."""
    return np.array([
        np.sqrt(sum(
            float(np.sum(np.square(np.asarray(u[name], np.float64) - np.asarray(ref, np.float64))))
            for name, ref in reference.items()
        ))
        for u in updates
    ], dtype=np.float64)


def model_norm(weights: Weights) -> float:
    """``||w||``: the L2 norm over all of a model's tensors."""
    return float(np.sqrt(sum(float(np.sum(np.square(np.asarray(w, np.float64)))) for w in weights.values())))


def norm_outliers(
    sizes: Sequence[float], *, max_ratio: float | None = 10.0, typical: float | None = None, still: float = 0.0
) -> list[int]:
    """Indices of updates (by ``update_sizes``) that moved the model more than ``max_ratio`` x a typical update.

    One device sending a huge update (broken or malicious) would otherwise
    drag the average wherever it likes: FedAvg weighs it by its sample count
    whatever its size. Honest devices of one round, starting from the same
    model with the same epochs and learning rate, move it by sizes of one order.

    Updates of size ``still`` or less barely moved the model (devices that do
    not learn, such as stand-in clients): they cannot drag the average, are
    never outliers, and say nothing of an honest update's size. The typical
    size is the median of the round's other updates, or ``typical`` (the
    median of the updates this job's recent rounds accepted) when that is
    larger. The round's median needs an honest majority to mean anything, so
    it counts from three such updates on; with fewer and no ``typical`` (or
    ``max_ratio`` None) nothing is an outlier. Updates must already have
    passed ``check_update``.
    """
    if max_ratio is None:
        return []
    moving = [size for size in sizes if size > still]
    if len(moving) < 3 and typical is None:
        return []
    median = float(np.median(moving)) if len(moving) >= 3 else 0.0
    reference = max(median, typical or 0.0)
    return [k for k, size in enumerate(sizes) if size > still and size > max_ratio * reference]

"""scikit-learn's bundled digits as the training tests use them: (N, 1, size, size) float32 in [0, 1]."""

from __future__ import annotations

import numpy as np


def digits(size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8x8 digits scaled to [0, 1], each pixel repeated to ``size`` x ``size`` (a multiple of 8)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.astype(np.float32) / 16.0
    if size != 8:
        x = np.kron(x, np.ones((size // 8, size // 8), np.float32))
    return np.ascontiguousarray(x[:, None, :, :]), d.target.astype(np.int64)

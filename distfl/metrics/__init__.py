"""Metrics: per-client balanced accuracy and its federation mean; clustering quality

(WAS, WADB, Rand index, ARI) in :mod:`distfl.metrics.clustering`."""

from __future__ import annotations

import numpy as np


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over the classes present in ``y_true`` of the recall of that class."""
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if y_true.size == 0:
        return float("nan")
    _, cls = np.unique(y_true, return_inverse=True)
    # per class present: hits / count (the hits are summed exactly, as 0.0 and 1.0)
    recalls = np.bincount(cls, weights=(y_pred == y_true)) / np.bincount(cls)
    return float(np.mean(recalls))


def last_finite(values) -> float:
    """The last finite value of ``values`` (a metric over rounds, NaN where not measured);
    NaN when there is none. The accuracy a run reports is its accuracy column's."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if len(finite) else float("nan")


def federation_mean(values: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Mean of per-client values over the clients that have one (NaN = no test data)."""
    values = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(values)
    if not ok.any():
        return float("nan")
    if weights is None:
        return float(values[ok].mean())
    w = np.asarray(weights, dtype=np.float64)[ok]
    return float((values[ok] * w).sum() / w.sum())


from distfl.metrics.clustering import (  # noqa: E402
    adjusted_rand_index,
    rand_index,
    sorted_frequencies,
    wadb,
    was,
)

__all__ = [
    "adjusted_rand_index",
    "balanced_accuracy",
    "federation_mean",
    "last_finite",
    "rand_index",
    "sorted_frequencies",
    "was",
    "wadb",
]

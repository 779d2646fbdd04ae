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


def at_last_evaluation(accuracy, values) -> float:
    """The value of ``values`` (a column of /metrics or /metrics/evaluation) in the row of
    the last finite ``accuracy`` (the same table's mean accuracy: the last evaluation
    :func:`last_finite` reports); NaN when there is none, or where ``values`` is NaN there
    (a file written before its column)."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    at = np.flatnonzero(np.isfinite(accuracy))
    return float(values[at[-1]]) if len(at) and len(values) == len(accuracy) else float("nan")


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


#: the percentile of the per-client balanced accuracies recorded beside the worst one
LOW_PERCENTILE = 10


def low_tail(values: np.ndarray) -> tuple[float, float]:
    """The worst (minimum) and the :data:`LOW_PERCENTILE`-th percentile of per-client
    values, unweighted, over the clients that have one (a finite value; NaN = no test
    data), as (worst, percentile); (NaN, NaN) when none has.

    The percentile is numpy's default one (``np.percentile``'s "linear" method, type 7 of
    Hyndman and Fan): of the n sorted values v_0 <= ... <= v_{n-1}, at the position
    h = p/100 (n - 1), v_i + (h - i)(v_{i+1} - v_i) with i = floor(h); for one client
    its own value. Computed here from the sorted values (h split exactly into i and
    h - i), so that its bits depend on no numpy version."""
    values = np.asarray(values, dtype=np.float64)
    v = np.sort(values[np.isfinite(values)])
    n = len(v)
    if n == 0:
        return float("nan"), float("nan")
    i, rest = divmod(LOW_PERCENTILE * (n - 1), 100)  # h = i + rest / 100, exactly
    low = v[i] if rest == 0 else v[i] + rest / 100 * (v[i + 1] - v[i])
    return float(v[0]), float(low)


from distfl.metrics.clustering import (  # noqa: E402
    adjusted_rand_index,
    rand_index,
    sorted_frequencies,
    wadb,
    was,
)

__all__ = [
    "at_last_evaluation",
    "adjusted_rand_index",
    "balanced_accuracy",
    "federation_mean",
    "last_finite",
    "low_tail",
    "rand_index",
    "sorted_frequencies",
    "was",
    "wadb",
]

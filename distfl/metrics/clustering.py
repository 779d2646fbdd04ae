"""Clustering-quality metrics: WAS, WADB (FedGWC, ICML 2025) and the Rand indices.

WAS and WADB measure how well a clustering of federated clients groups them by the
*heterogeneity level* of their label distributions, not by which classes they hold: each
client is represented by its class frequencies sorted in decreasing order, so two clients whose
distributions are permutations of each other are at distance 0. The Euclidean distance between
sorted frequency vectors is (up to the constant factor 1/C used in the paper, which neither
score depends on) the 2-Wasserstein distance between the two empirical class-frequency measures.

The Rand index and the adjusted Rand index compare a clustering with a reference labelling.
Labels may be any hashable values (ints, strings such as ``"0.1"``, ...).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
from numpy.typing import ArrayLike

# scikit-learn is imported where a score needs it: importing it costs each process 0.8 s
# (it pulls in scipy.stats), and the ranks of a run need none of it

__all__ = [
    "adjusted_rand_index",
    "rand_index",
    "sorted_frequencies",
    "wadb",
    "was",
]


def _encode(labels: Iterable[Hashable] | np.ndarray) -> np.ndarray:
    """Map arbitrary hashable labels to ints 0..m-1, in order of first appearance."""
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
        items = labels.tolist()
    else:
        items = list(labels)
    ids: dict[Hashable, int] = {}
    return np.array([ids.setdefault(x, len(ids)) for x in items], dtype=np.int64)


def sorted_frequencies(class_counts: ArrayLike) -> np.ndarray:
    """Per-client class frequencies sorted in decreasing order, the client representation of
    WAS/WADB (FedGWC, Licciardi et al., ICML 2025, section 6 and appendix B): ``class_counts``
    is a ``[K, C]`` array of per-client class counts (or any non-negative weights); each row is
    divided by its sum (a client with no samples gives a zero row) and then sorted in decreasing
    order, so that clients whose class distributions are permutations of each other get identical
    rows. Returns a float64 array of shape ``[K, C]``."""
    counts = np.asarray(class_counts, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError(f"class_counts must be a [K, C] array, got shape {counts.shape}")
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("class_counts must be finite and non-negative")
    totals = counts.sum(axis=1, keepdims=True)
    freqs = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    return -np.sort(-freqs, axis=1)


def _prepare(class_counts: ArrayLike, labels) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted frequencies and integer labels, or None when the scores are undefined."""
    x = sorted_frequencies(class_counts)
    y = _encode(labels)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{x.shape[0]} clients but {y.shape[0]} labels")
    n_clusters = int(y.max()) + 1 if y.size else 0
    if not 2 <= n_clusters <= x.shape[0] - 1:
        return None
    return x, y


def was(class_counts: ArrayLike, labels) -> float | None:
    """Wasserstein Adjusted Silhouette (WAS) of a clustering of clients, as defined in FedGWC
    (Licciardi et al., ICML 2025, section 6 and appendix B): the mean silhouette coefficient
    of the clustering ``labels`` (one hashable label per client) computed on the clients' sorted
    class-frequency vectors (:func:`sorted_frequencies` of the ``[K, C]`` ``class_counts``) with
    Euclidean distance, i.e. (up to a constant scale) the 2-Wasserstein distance between the
    clients' empirical label distributions. Values lie in [-1, 1], higher is better; a singleton
    cluster contributes 0. Returns None when the score is undefined, i.e. unless the number of
    distinct labels is between 2 and K - 1 (one cluster, or every cluster a singleton)."""
    prepared = _prepare(class_counts, labels)
    if prepared is None:
        return None
    x, y = prepared
    # Exact pairwise distances (sklearn's Euclidean shortcut is only accurate to ~1e-8).
    from scipy.spatial.distance import pdist, squareform  # imported when scored

    dist = squareform(pdist(x, metric="euclidean"))
    from sklearn.metrics import silhouette_score

    return float(silhouette_score(dist, y, metric="precomputed"))


def wadb(class_counts: ArrayLike, labels) -> float | None:
    """Wasserstein Adjusted Davies-Bouldin index (WADB) of a clustering of clients, as defined in
    FedGWC (Licciardi et al., ICML 2025, section 6 and appendix B): the Davies-Bouldin index of
    the clustering ``labels`` (one hashable label per client) computed on the clients' sorted
    class-frequency vectors (:func:`sorted_frequencies` of the ``[K, C]`` ``class_counts``) with
    Euclidean distance, i.e. the mean over clusters of the largest ratio (S_i + S_j) / M_ij of
    summed mean centroid distances to centroid separation. Values are >= 0, lower is better; the
    result equals ``sklearn.metrics.davies_bouldin_score`` on the same vectors, with its
    conventions for coinciding centroids. Returns None when the score is undefined, i.e. unless
    the number of distinct labels is between 2 and K - 1."""
    prepared = _prepare(class_counts, labels)
    if prepared is None:
        return None
    x, y = prepared
    n_clusters = int(y.max()) + 1
    centroids = np.stack([x[y == k].mean(axis=0) for k in range(n_clusters)])
    intra = np.array(
        [np.linalg.norm(x[y == k] - centroids[k], axis=1).mean() for k in range(n_clusters)]
    )
    from scipy.spatial.distance import cdist

    sep = cdist(centroids, centroids, metric="euclidean")
    # sklearn's conventions: 0 when all spreads or all separations vanish; a pair of clusters
    # with coinciding centroids (and the diagonal) contributes a ratio of 0.
    if np.allclose(intra, 0) or np.allclose(sep, 0):
        return 0.0
    sep[sep == 0] = np.inf
    ratios = (intra[:, None] + intra[None, :]) / sep
    return float(ratios.max(axis=1).mean())


def _pairs(m: np.ndarray) -> int:
    """Sum over the entries of C(m, 2), in exact integer arithmetic."""
    m = m.astype(np.int64)
    return int((m * (m - 1) // 2).sum())


def rand_index(labels_true, labels_pred) -> float:
    """Rand index (Rand, 1971) between two labellings of the same K items: the fraction of the
    K(K - 1)/2 pairs of items that both labellings treat alike, i.e. that are either in the same
    cluster in both or in different clusters in both. It lies in [0, 1], equals 1 for identical
    partitions whatever the label names, and is 1.0 by convention when K < 2 (no pairs). Labels
    may be any hashable values; the count is done exactly from the contingency table."""
    a = _encode(labels_true)
    b = _encode(labels_pred)
    if a.shape != b.shape:
        raise ValueError(f"labellings of different lengths: {a.size} and {b.size}")
    n = a.size
    total = n * (n - 1) // 2
    if total == 0:
        return 1.0
    table = np.zeros((int(a.max()) + 1, int(b.max()) + 1), dtype=np.int64)
    np.add.at(table, (a, b), 1)
    same_both = _pairs(table)
    same_a = _pairs(table.sum(axis=1))
    same_b = _pairs(table.sum(axis=0))
    agree = total + 2 * same_both - same_a - same_b  # same in both + different in both
    return agree / total


def adjusted_rand_index(labels_true, labels_pred) -> float:
    """Adjusted Rand index (Hubert & Arabie, 1985) between two labellings of the same K items:
    the Rand index corrected for chance, (RI - E[RI]) / (max RI - E[RI]) under the hypergeometric
    model of random labellings with the same cluster sizes, computed with
    ``sklearn.metrics.adjusted_rand_score`` after mapping the (any hashable) labels to integers.
    It is 1.0 for identical partitions whatever the label names, close to 0 for independent
    labellings, and can be negative."""
    a = _encode(labels_true)
    b = _encode(labels_pred)
    if a.shape != b.shape:
        raise ValueError(f"labellings of different lengths: {a.size} and {b.size}")
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(a, b))

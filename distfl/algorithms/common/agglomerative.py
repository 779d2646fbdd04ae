"""Agglomerative (hierarchical) clustering of a distance matrix, cut by a threshold or into a
number of clusters, and the nearest cluster of a client first seen later: the clustering
step that PACFL and FedClust share (:mod:`distfl.algorithms.pacfl`,
:mod:`distfl.algorithms.fedclust`).

The merge tree comes from :func:`scipy.cluster.hierarchy.linkage` on the condensed matrix
(the nearest-neighbour chain, O(n²) time and memory); every linkage offered here is
monotone, so merging while the least cluster distance is at most the threshold (PACFL's
public code stops at the first merge above it) gives the clusters of the merges of height
at most the threshold, and a number of clusters k the clusters of the first n − k merges.
A distance that is missing (NaN, infinite: a client whose row held no result) counts as
farther than every measured one and than the threshold: it never joins two clusters under
a threshold, and with a number of clusters it is merged last.
"""

from __future__ import annotations

import numpy as np

#: the linkages (scipy's names): ``average`` the mean distance between the two clusters'
#: members (UPGMA); ``weighted`` the mean of the two merged clusters' distances (WPGMA: what
#: PACFL's public code calls "average"); ``complete`` the largest; ``single`` the smallest
LINKAGES = ("average", "weighted", "complete", "single")


def finite_distances(distances: np.ndarray, above: float = 0.0) -> np.ndarray:
    """A symmetric float64 copy with a zero diagonal, each missing (non-finite) entry
    replaced by one value above every finite one and above ``above`` (2·max + 1)."""
    d = np.array(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distances must be a square matrix, not {d.shape}")
    d = np.maximum(d, d.T)  # NaN-propagating: a missing entry either way is missing
    finite = np.isfinite(d)
    top = float(d[finite].max()) if finite.any() else 0.0
    d[~finite] = 2 * max(top, above, 0.0) + 1.0
    np.fill_diagonal(d, 0.0)
    return d


def merge_tree(distances: np.ndarray, linkage: str, above: float = 0.0) -> np.ndarray:
    """scipy's linkage matrix [n − 1, 4] of the square ``distances`` (missing entries above
    every finite one and ``above``: :func:`finite_distances`)."""
    from scipy.cluster.hierarchy import linkage as scipy_linkage
    from scipy.spatial.distance import squareform

    if linkage not in LINKAGES:
        raise ValueError(f"linkage must be one of {', '.join(LINKAGES)}, not {linkage!r}")
    d = finite_distances(distances, above)
    if len(d) < 2:
        return np.zeros((0, 4))
    return scipy_linkage(squareform(d, checks=False), method=linkage)


def cut(merges: np.ndarray, num_items: int, *, threshold: float | None = None,
        num_clusters: int | None = None) -> np.ndarray:  # fmt: skip
    """Labels [n] from a merge tree: the clusters after the merges of height at most
    ``threshold``, or (``num_clusters`` = k ≥ 1, which wins over a threshold) after the
    first n − k merges. Clusters are numbered in order of their first item."""
    n = int(num_items)
    parent = np.arange(2 * max(n, 1) - 1)
    if num_clusters is not None and num_clusters >= 1:
        if num_clusters > max(n, 1):
            raise ValueError(f"{num_clusters} clusters of {n} items")
        count = n - int(num_clusters)
    elif threshold is not None:
        count = int(np.count_nonzero(merges[:, 2] <= threshold)) if len(merges) else 0
        # the heights are non-decreasing for these linkages: the first `count` merges
    else:
        raise ValueError("cut needs a threshold or a number of clusters")

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for step in range(count):
        a, b = int(merges[step, 0]), int(merges[step, 1])
        parent[root(a)] = n + step
        parent[root(b)] = n + step
    roots = np.array([root(i) for i in range(n)], dtype=np.int64)
    index: dict[int, int] = {}
    return np.array([index.setdefault(int(r), len(index)) for r in roots], dtype=np.int64)


def agglomerate(distances: np.ndarray, *, linkage: str, threshold: float,
                num_clusters: int = -1) -> np.ndarray:  # fmt: skip
    """Cluster labels [n] of a square distance matrix: ``num_clusters`` ≥ 1 clusters when
    given (at most n), else the cut at ``threshold``."""
    d = np.asarray(distances)
    merges = merge_tree(d, linkage, above=threshold if np.isfinite(threshold) else 0.0)
    k = min(num_clusters, len(d)) if num_clusters >= 1 else None
    return cut(merges, len(d), threshold=threshold, num_clusters=k)


def nearest_cluster(distances: np.ndarray, labels: np.ndarray, *, linkage: str) -> np.ndarray:
    """[m] the cluster each of m newcomers joins: ``distances[i, j]`` from newcomer i to
    clustered item j, whose cluster is ``labels[j]``; a cluster's distance is the linkage's
    (the mean over its members for ``average`` and ``weighted``, the largest for
    ``complete``, the smallest for ``single``). Missing distances count as infinite; ties,
    and a newcomer without any distance, go to the lowest cluster."""
    d = np.asarray(distances, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if d.ndim != 2 or d.shape[1] != len(labels):
        raise ValueError(f"distances [m, {len(labels)}] needed, not {d.shape}")
    d = np.where(np.isfinite(d), d, np.inf)
    k = int(labels.max()) + 1 if len(labels) else 0
    if k == 0:
        raise ValueError("no clustered item to join")
    order = np.argsort(labels, kind="stable")
    grouped = d[:, order]
    starts = np.searchsorted(labels[order], np.arange(k))
    if np.unique(labels).size != k:
        raise ValueError("labels must number the clusters 0..k-1, each with a member")
    if linkage == "single":
        per = np.minimum.reduceat(grouped, starts, axis=1)
    elif linkage == "complete":
        per = np.maximum.reduceat(grouped, starts, axis=1)
    else:
        per = np.add.reduceat(grouped, starts, axis=1) / np.bincount(labels, minlength=k)
    return np.argmin(per, axis=1).astype(np.int64)


__all__ = [
    "LINKAGES",
    "agglomerate",
    "cut",
    "finite_distances",
    "merge_tree",
    "nearest_cluster",
]

"""k-means on client models, seeded k-means++ style: the start from client models that
FeSEM's and IFCA's ``init = "kmeans++"`` use (docs/algorithms.md).

Arthur and Vassilvitskii's seeding ("k-means++: the advantages of careful seeding", SODA
2007): the first centre is a model drawn uniformly, each next one a model drawn with
probability proportional to its squared distance to the nearest centre chosen so far. Then
Lloyd's iterations (assign each model to its nearest centre, move each centre to the
weighted mean of its models) until no assignment changes. Distances are L2 between
flattened models, as FeSEM's."""

from __future__ import annotations

import dataclasses

import numpy as np

from distfl.settings import require, setting

#: Lloyd's iterations at most (a handful suffice for the few models of one round)
MAX_ITERATIONS = 100
#: who gives a method the true number of clusters, said by ``num_clusters = 0``
PAPERS_GIVE = "the papers give these methods the true number of clusters"
EMDCFL_GIVES = "what EMD-CFL gives it"


def cluster_count_setting(default: int, what: str, given: str = PAPERS_GIVE):
    """The ``num_clusters`` key of a method with a fixed number of cluster models: ``what``
    it counts, and 0 for one per ground-truth data group (``given``: who gives the method
    that number; :func:`with_group_count` puts it in)."""
    return setting(default, "0..K", f"{what}; 0: one per ground-truth data group ({given})")


def check_cluster_count(params, config) -> None:
    """``num_clusters`` of ``params`` is 0 (the number of data groups) or 1 to
    ``data.num_clients`` (ConfigError naming the key otherwise)."""
    K = config.data.num_clients
    require(0 <= params.num_clusters <= K, "num_clusters", params.num_clusters,
            f"0 (the number of data groups) or 1 to data.num_clients ({K})")  # fmt: skip


def with_group_count(params, federation):
    """``params`` with ``num_clusters`` 0 replaced by the number of the federation's
    ground-truth groups: what the papers give IFCA and FeSEM (the true number of clusters)."""
    if params.num_clusters != 0:
        return params
    if federation.groups is None:
        raise ValueError("num_clusters = 0 needs the clients' ground-truth groups")
    count = len(np.unique(np.asarray(federation.groups)))
    return dataclasses.replace(params, num_clusters=count)


def sq_distances(models: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """D[i, m] = ||models[i] - centres[m]||², [n, M] float64, from the differences."""
    X = np.asarray(models, dtype=np.float64)
    C = np.asarray(centres, dtype=np.float64)
    out = np.empty((X.shape[0], C.shape[0]))
    for m in range(C.shape[0]):
        diff = X - C[m]
        out[:, m] = np.einsum("ij,ij->i", diff, diff)
    return out


def kmeanspp_seeds(models: np.ndarray, num_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``num_clusters`` distinct rows of ``models`` chosen by k-means++ seeding.
    Where every remaining row coincides with a chosen one (all distances 0), the next seed
    is drawn uniformly from the rows not yet chosen."""
    X = np.asarray(models, dtype=np.float64)
    n = X.shape[0]
    if not 1 <= num_clusters <= n:
        raise ValueError(f"k-means++ needs 1 <= num_clusters <= {n} models, not {num_clusters}")
    seeds = [int(rng.integers(n))]
    nearest = sq_distances(X, X[seeds])[:, 0]
    while len(seeds) < num_clusters:
        weights = nearest.copy()
        weights[seeds] = 0.0
        total = weights.sum()
        if total > 0:
            choice = int(rng.choice(n, p=weights / total))
        else:
            rest = np.setdiff1d(np.arange(n), seeds)
            choice = int(rng.choice(rest))
        seeds.append(choice)
        nearest = np.minimum(nearest, sq_distances(X, X[[choice]])[:, 0])
    return np.asarray(seeds, dtype=np.int64)


def kmeans(
    models: np.ndarray, weights: np.ndarray, num_clusters: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(labels [n] int64, centres [M, P] float64): k-means++ seeds, then Lloyd's iterations
    with sample-weighted means; a centre that loses every model keeps its place. Ties go to
    the lowest centre index."""
    X = np.asarray(models, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if X.ndim != 2 or w.shape != (X.shape[0],):
        raise ValueError(f"models [n, P] and weights [n] needed, not {X.shape}, {w.shape}")
    centres = X[kmeanspp_seeds(X, num_clusters, rng)].copy()
    labels = np.argmin(sq_distances(X, centres), axis=1)
    for _ in range(MAX_ITERATIONS):
        for m in range(num_clusters):
            mask = labels == m
            if mask.any() and w[mask].sum() > 0:
                centres[m] = (w[mask] / w[mask].sum()) @ X[mask]
        new = np.argmin(sq_distances(X, centres), axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels.astype(np.int64), centres


__all__ = [
    "EMDCFL_GIVES",
    "PAPERS_GIVE",
    "check_cluster_count",
    "cluster_count_setting",
    "kmeans",
    "kmeanspp_seeds",
    "sq_distances",
    "with_group_count",
]

"""Where distfl's agglomerative step (PACFL, FedClust) and PACFL's public code part ways:
only at exactly tied distances. The code merges, in a loop, the first least distance in
row-major order of the upper triangle (WPGMA: the merged row the mean of the two rows);
distfl takes scipy's linkage (the nearest-neighbour chain), which may merge another of
equal pairs first. :func:`first_minimum` is that loop, written from its description
(docs/algorithms.md, PACFL)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import adjusted_rand_score

from distfl.algorithms.common.agglomerative import agglomerate


def first_minimum(distances: np.ndarray, threshold: float) -> np.ndarray:
    """Labels of the loop: merge the first least entry (row-major, i < j) while it is at most
    ``threshold``; the merged cluster keeps the lower row, its distances the mean of the
    two rows'."""
    d = np.array(distances, dtype=float)
    members = [[i] for i in range(len(d))]
    alive = list(range(len(d)))
    while len(alive) > 1:
        sub = d[np.ix_(alive, alive)]
        sub[np.tril_indices(len(alive))] = np.inf
        a, b = divmod(int(np.argmin(sub)), len(alive))
        if sub[a, b] > threshold:
            break
        i, j = alive[a], alive[b]
        d[i, :] = d[:, i] = (d[i] + d[j]) / 2
        d[i, i] = 0.0
        members[i] += members[j]
        alive.remove(j)
    labels = np.empty(len(d), dtype=np.int64)
    for c, i in enumerate(alive):
        labels[members[i]] = c
    return labels


def _symmetric(a: np.ndarray) -> np.ndarray:
    upper = np.triu(a, 1)
    return upper + upper.T


def test_without_ties_the_partitions_are_the_codes():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(5, 16))
        d = _symmetric(rng.uniform(0.0, 6.0, size=(n, n)))
        ours = agglomerate(d, linkage="weighted", threshold=3.0)
        assert adjusted_rand_score(first_minimum(d, 3.0), ours) == 1.0


def test_a_tie_the_code_breaks_by_row_order_is_broken_otherwise_here():
    # 0 and 2 merge at 0; then {0,2}-3 = (1 + 1) / 2 = 1 ties with 1-3 = 1. The code takes
    # {0,2}-3 (its row comes first), after which {0,2,3}-1 = (2.5 + 1) / 2 = 1.75 stops it;
    # scipy's chain takes 1-3, after which {0,2}-{1,3} = 1.75 stops it.
    d = np.array([[0, 2, 0, 1], [2, 0, 3, 1], [0, 3, 0, 1], [1, 1, 1, 0]], dtype=float)
    assert first_minimum(d, 1.5).tolist() == [0, 1, 0, 0]
    assert agglomerate(d, linkage="weighted", threshold=1.5).tolist() == [0, 1, 0, 1]


def test_how_often_ties_part_the_two_on_small_integer_distances():
    """The count docs/algorithms.md quotes: 200 matrices of 5-15 clients with integer
    distances 0-5, cut at 3."""
    rng = np.random.default_rng(0)
    partitions = counts = 0
    for _ in range(200):
        n = int(rng.integers(5, 16))
        d = _symmetric(rng.integers(0, 6, size=(n, n)).astype(float))
        x, y = first_minimum(d, 3.0), agglomerate(d, linkage="weighted", threshold=3.0)
        partitions += adjusted_rand_score(x, y) < 1.0
        counts += len(set(x.tolist())) != len(set(y.tolist()))
    assert (partitions, counts) == (61, 29)

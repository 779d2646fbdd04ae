"""k-means with k-means++ seeds (FeSEM's and IFCA's start from client models): the seeding's
probabilities by hand, and the clustering against scikit-learn's KMeans from the same seeds."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from sklearn.cluster import KMeans

from distfl.algorithms.common.kmeans import kmeans, kmeanspp_seeds, sq_distances


def blobs(sizes=(4, 5, 3), dim=6, spread=0.1, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=20.0, size=(len(sizes), dim))
    X = np.concatenate(
        [c + spread * rng.normal(size=(n, dim)) for c, n in zip(centres, sizes, strict=True)]
    )
    truth = np.repeat(np.arange(len(sizes)), sizes)
    return X, truth


def test_sq_distances_by_hand():
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    C = np.array([[0.0, 0.0], [6.0, 8.0]])
    assert sq_distances(X, C).tolist() == [[0.0, 100.0], [25.0, 25.0]]


def test_seeding_draws_by_squared_distance():
    """Points 0, 1 and 3 on a line, two seeds: the first uniform (1/3 each), the second with
    probability D²/ΣD². By hand: P(0 then 1) = 1/3 · 1/10, P(0 then 2) = 1/3 · 9/10,
    P(1 then 0) = 1/3 · 1/5, P(1 then 2) = 1/3 · 4/5, P(2 then 0) = 1/3 · 9/13,
    P(2 then 1) = 1/3 · 4/13."""
    X = np.array([[0.0], [1.0], [3.0]])
    n = 6000
    counts = Counter(
        tuple(kmeanspp_seeds(X, 2, np.random.default_rng(s)).tolist()) for s in range(n)
    )
    expect = {
        (0, 1): 1 / 30, (0, 2): 9 / 30, (1, 0): 1 / 15, (1, 2): 4 / 15,
        (2, 0): 9 / 39, (2, 1): 4 / 39,
    }  # fmt: skip
    assert set(counts) == set(expect)
    for pair, p in expect.items():
        sd = np.sqrt(p * (1 - p) / n)
        assert abs(counts[pair] / n - p) < 5 * sd, (pair, counts[pair] / n, p)


def test_seeds_are_distinct_even_when_models_coincide():
    X = np.zeros((5, 3))
    for s in range(20):
        seeds = kmeanspp_seeds(X, 4, np.random.default_rng(s))
        assert len(set(seeds.tolist())) == 4
    with pytest.raises(ValueError, match="num_clusters"):
        kmeanspp_seeds(X, 6, np.random.default_rng(0))


def test_separated_groups_get_one_seed_each():
    X, truth = blobs()
    for s in range(30):
        seeds = kmeanspp_seeds(X, 3, np.random.default_rng(s))
        assert sorted(truth[seeds].tolist()) == [0, 1, 2]


def test_kmeans_recovers_the_groups_with_weighted_means():
    X, truth = blobs()
    w = np.arange(1, len(X) + 1, dtype=float)
    labels, centres = kmeans(X, w, 3, np.random.default_rng(1))
    # the same partition as the truth, up to the names of the clusters
    pairs = set(zip(truth.tolist(), labels.tolist(), strict=True))
    assert len(pairs) == 3 and len({b for _, b in pairs}) == 3
    for g, m in pairs:
        mask = truth == g
        assert np.allclose(centres[m], (w[mask] / w[mask].sum()) @ X[mask], rtol=0, atol=1e-12)


def test_kmeans_against_scikit_learn_from_the_same_seeds():
    """Overlapping groups, where Lloyd's iterations move points: scikit-learn's KMeans,
    started from the same seeds with the same weights, ends with the same labels and
    centres."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 5))
    w = rng.integers(1, 20, size=40).astype(float)
    for s in range(5):
        labels, centres = kmeans(X, w, 4, np.random.default_rng(s))
        seeds = kmeanspp_seeds(X, 4, np.random.default_rng(s))
        ref = KMeans(4, init=X[seeds], n_init=1, tol=0.0, max_iter=300, algorithm="lloyd")
        ref.fit(X, sample_weight=w)
        assert labels.tolist() == ref.labels_.tolist()
        assert np.allclose(centres, ref.cluster_centers_, rtol=0, atol=1e-10)


def test_kmeans_rejects_mismatched_weights():
    with pytest.raises(ValueError, match="weights"):
        kmeans(np.zeros((3, 2)), np.ones(2), 2, np.random.default_rng(0))


def test_the_seeding_round_takes_everyone_up_to_its_cap():
    from distfl.algorithms.common.seeded import (
        SEED_BYTES,
        SEED_CLIENTS,
        seeding_clients,
        seeding_size,
    )

    assert seeding_size(0, 4) == SEED_CLIENTS  # model size unknown
    assert seeding_size(4810, 4) == SEED_CLIENTS  # the digits MLP: 2,048 models are 39 MB
    assert seeding_size(1_384_586, 4) == SEED_BYTES // (4 * 1_384_586) == 193  # the CNN
    assert seeding_size(10**9, 3) == 3  # never fewer models than clusters
    assert seeding_clients(7, np.random.default_rng(0), 9).tolist() == list(range(7))
    assert seeding_clients(9, np.random.default_rng(0), 9).tolist() == list(range(9))
    big = seeding_clients(3000, np.random.default_rng(1), 193)
    assert len(big) == 193 == len(set(big.tolist()))
    assert (np.diff(big) > 0).all() and big.max() < 3000
    assert big.tolist() == seeding_clients(3000, np.random.default_rng(1), 193).tolist()

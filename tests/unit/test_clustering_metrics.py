"""Clustering metrics: sorted frequencies, WAS / WADB (FedGWC) and the Rand indices.

Expected values are computed independently: by hand, or by brute-force reimplementations
(pairwise distances and loops; pair enumeration) written here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from sklearn.metrics import davies_bouldin_score, silhouette_score

from distfl.metrics.clustering import (
    adjusted_rand_index,
    rand_index,
    sorted_frequencies,
    wadb,
    was,
)

# ------------------------------------------------------------------ brute-force references


def _dist(u, v) -> float:
    return math.sqrt(sum((float(a) - float(b)) ** 2 for a, b in zip(u, v, strict=True)))


def _silhouette(points, labels) -> float:
    """Mean silhouette, straight from the definition (a singleton's s(i) is 0)."""
    n = len(points)
    scores = []
    for i in range(n):
        own = [j for j in range(n) if labels[j] == labels[i] and j != i]
        if not own:
            scores.append(0.0)
            continue
        a = sum(_dist(points[i], points[j]) for j in own) / len(own)
        b = min(
            sum(_dist(points[i], points[j]) for j in range(n) if labels[j] == other)
            / sum(1 for j in range(n) if labels[j] == other)
            for other in set(labels) - {labels[i]}
        )
        scores.append((b - a) / max(a, b) if max(a, b) > 0 else 0.0)
    return sum(scores) / n


def _davies_bouldin(points, labels) -> float:
    """Davies-Bouldin index from the definition: centroids, mean distance to centroid, max ratio."""
    clusters = sorted(set(labels), key=str)
    cent, spread = {}, {}
    for c in clusters:
        members = [np.asarray(points[i], dtype=float) for i in range(len(points)) if labels[i] == c]
        cent[c] = sum(members) / len(members)
        spread[c] = sum(_dist(m, cent[c]) for m in members) / len(members)
    worst = [
        max((spread[c] + spread[d]) / _dist(cent[c], cent[d]) for d in clusters if d != c)
        for c in clusters
    ]
    return sum(worst) / len(worst)


def _pair_counts(x, y):
    """(same in both, same in x only, same in y only, different in both) over all pairs."""
    ss = sd = ds = dd = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        sx, sy = x[i] == x[j], y[i] == y[j]
        ss += sx and sy
        sd += sx and not sy
        ds += sy and not sx
        dd += not sx and not sy
    return ss, sd, ds, dd


def _rand_brute(x, y) -> float:
    ss, sd, ds, dd = _pair_counts(x, y)
    return (ss + dd) / (ss + sd + ds + dd)


def _ari_brute(x, y) -> float:
    """ARI in its pair-counting form: 2(ad - bc) / ((a+b)(b+d) + (a+c)(c+d))."""
    a, b, c, d = _pair_counts(x, y)
    return 2 * (a * d - b * c) / ((a + b) * (b + d) + (a + c) * (c + d))


# -------------------------------------------------------------------- sorted_frequencies


def test_sorted_frequencies_hand_example():
    counts = np.array(
        [
            [1, 3, 0, 0],
            [0, 0, 3, 1],  # a permutation of client 0's distribution
            [0, 2, 6, 0],  # same distribution as client 0, other classes, other size
            [2, 2, 2, 2],
            [0, 0, 0, 0],  # no samples
            [0, 0, 0, 7],
        ]
    )
    got = sorted_frequencies(counts)
    expected = np.array(
        [
            [0.75, 0.25, 0.0, 0.0],
            [0.75, 0.25, 0.0, 0.0],
            [0.75, 0.25, 0.0, 0.0],
            [0.25, 0.25, 0.25, 0.25],
            [0.0, 0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0, 0.0],
        ]
    )
    assert got.shape == (6, 4)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    # Permuted distributions collapse to the very same point: distance exactly 0.
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])
    assert np.linalg.norm(got[0] - got[1]) == 0.0
    # ... whereas the unsorted frequencies of clients 0 and 1 are far apart.
    assert np.linalg.norm(counts[0] / 4 - counts[1] / 4) > 1.0


def test_sorted_frequencies_rows_sum_to_one_and_decrease():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 20, size=(30, 7))
    counts[3] = 0
    got = sorted_frequencies(counts)
    sums = got.sum(axis=1)
    np.testing.assert_allclose(np.delete(sums, 3), 1.0, atol=1e-12)
    assert sums[3] == 0.0
    assert (np.diff(got, axis=1) <= 0).all()
    # Each row is a rearrangement of that client's own frequencies.
    for k in np.flatnonzero(counts.sum(axis=1)):
        np.testing.assert_allclose(
            np.sort(got[k]), np.sort(counts[k] / counts[k].sum()), atol=1e-15
        )


@pytest.mark.parametrize("bad", [np.ones(5), np.ones((2, 3, 4)), [[1, -1, 3]], [[1, np.nan]]])
def test_sorted_frequencies_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        sorted_frequencies(bad)


# ---------------------------------------------------------------------------------- WAS


# Two classes, so the sorted vector is (p, 1 - p): the distance between clients is
# sqrt(2)|p - q|, and the silhouette (scale-free) is the one-dimensional silhouette of p.
# p = 1.0, 0.9 in cluster "0.1"; p = 0.5, 0.6 in cluster "0.2".
TWO_CLASS_COUNTS = np.array([[10, 0], [1, 9], [5, 5], [4, 6]])
TWO_CLASS_LABELS = ["0.1", "0.1", "0.2", "0.2"]


def test_was_hand_computed():
    # p=1.0: a=.1, b=(.5+.4)/2=.45 -> 7/9;  p=.9: a=.1, b=(.4+.3)/2=.35 -> 5/7;
    # p=.5: a=.1, b=.45 -> 7/9;  p=.6: a=.1, b=.35 -> 5/7.  Mean = (7/9 + 5/7)/2 = 47/63.
    assert was(TWO_CLASS_COUNTS, TWO_CLASS_LABELS) == pytest.approx(47 / 63, abs=1e-12)


def _six_clients():
    """Three one-class clients (different classes), three near-uniform clients, C = 4."""
    return np.array(
        [
            [50, 0, 0, 0],
            [0, 40, 0, 0],
            [0, 0, 0, 60],
            [25, 25, 24, 26],
            [20, 22, 18, 20],
            [30, 28, 31, 33],
        ]
    )


def test_was_matches_brute_force_silhouette():
    counts = _six_clients()
    points = sorted_frequencies(counts)
    for labels in ([0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 2, 2], ["a", "b", "b", "a", "a", "c"]):
        assert was(counts, labels) == pytest.approx(_silhouette(points, labels), abs=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(20):
        counts = rng.integers(0, 30, size=(9, 5))
        labels = rng.integers(0, 3, size=9).tolist()
        if len(set(labels)) < 2:
            continue
        expected = _silhouette(sorted_frequencies(counts), labels)
        assert was(counts, labels) == pytest.approx(expected, abs=1e-12)
        # ... and sklearn's own silhouette on the sorted vectors agrees (its Euclidean
        # shortcut is accurate to ~1e-8 only).
        sk = silhouette_score(sorted_frequencies(counts), labels)
        assert was(counts, labels) == pytest.approx(sk, abs=1e-6)


def test_was_groups_by_heterogeneity_not_by_class():
    counts = _six_clients()
    by_level = [0, 0, 0, 1, 1, 1]
    good = was(counts, by_level)
    # The one-class clients coincide after sorting (a(i) = 0, s(i) = 1) although they hold
    # different classes; the near-uniform ones are tight.  So WAS is close to 1.
    assert good > 0.9
    # Unsorted frequencies would not see that structure at all.
    raw = counts / counts.sum(axis=1, keepdims=True)
    assert silhouette_score(raw, by_level) < 0.5
    # Every other split into two groups of three scores strictly lower.
    for first in itertools.combinations(range(6), 3):
        labels = [0 if k in first else 1 for k in range(6)]
        if set(first) in ({0, 1, 2}, {3, 4, 5}):
            continue
        assert was(counts, labels) < good - 0.5
    # And so do random labellings.
    rng = np.random.default_rng(2)
    for _ in range(20):
        labels = rng.integers(0, 3, size=6)
        if 2 <= len(set(labels.tolist())) <= 5:
            assert was(counts, labels) < good


def test_was_invariant_to_permuting_classes_within_clients():
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 30, size=(8, 6))
    labels = [0, 1, 2, 0, 1, 2, 0, 1]
    shuffled = np.stack([row[rng.permutation(6)] for row in counts])
    assert was(shuffled, labels) == pytest.approx(was(counts, labels), abs=1e-12)
    assert wadb(shuffled, labels) == pytest.approx(wadb(counts, labels), abs=1e-12)


# --------------------------------------------------------------------------------- WADB


def test_wadb_hand_computed():
    # In p units: centroids .95 and .55, mean distances to centroid .05 and .05, separation .4;
    # the sqrt(2) scale cancels.  Both ratios are (.05 + .05)/.4 = .25, so DB = .25.
    assert wadb(TWO_CLASS_COUNTS, TWO_CLASS_LABELS) == pytest.approx(0.25, abs=1e-12)


def test_wadb_matches_brute_force():
    counts = _six_clients()
    points = sorted_frequencies(counts)
    for labels in ([0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 2, 2], ["x", "y", "y", "x", "x", "z"]):
        assert wadb(counts, labels) == pytest.approx(_davies_bouldin(points, labels), abs=1e-12)
    rng = np.random.default_rng(4)
    for _ in range(20):
        counts = rng.integers(1, 30, size=(10, 4))
        labels = rng.integers(0, 4, size=10).tolist()
        if not 2 <= len(set(labels)) <= 9:
            continue
        expected = _davies_bouldin(sorted_frequencies(counts), labels)
        assert wadb(counts, labels) == pytest.approx(expected, rel=1e-12)
        sk = davies_bouldin_score(sorted_frequencies(counts), labels)
        assert wadb(counts, labels) == pytest.approx(sk, rel=1e-6)


def test_wadb_prefers_grouping_by_heterogeneity():
    counts = _six_clients()
    good = wadb(counts, [0, 0, 0, 1, 1, 1])
    assert good < 0.1
    assert wadb(counts, [0, 1, 0, 1, 0, 1]) > 1.0


# ----------------------------------------------------------------------- undefined cases


@pytest.mark.parametrize("metric", [was, wadb])
def test_undefined_cases_return_none(metric):
    counts = _six_clients()
    assert metric(counts, [0] * 6) is None  # one cluster
    assert metric(counts, ["c"] * 6) is None
    assert metric(counts, list(range(6))) is None  # all singletons
    assert metric(counts, ["a", "b", "c", "d", "e", "f"]) is None
    assert metric(counts[:2], [0, 1]) is None  # K = 2: two clusters are two singletons
    assert metric(counts[:1], [0]) is None
    assert metric(np.zeros((0, 4)), []) is None
    # Defined as soon as some cluster has two members and there are two clusters.
    assert metric(counts, [0, 1, 2, 3, 4, 4]) is not None


@pytest.mark.parametrize("metric", [was, wadb])
def test_length_mismatch_raises(metric):
    with pytest.raises(ValueError):
        metric(_six_clients(), [0, 1, 0, 1, 0])


# --------------------------------------------------------------------------- Rand index


def test_rand_index_known_values():
    a = [0, 0, 1, 1, 2, 2, 2]
    assert rand_index(a, a) == 1.0
    assert rand_index(a, ["z", "z", "y", "y", "0.1", "0.1", "0.1"]) == 1.0  # relabelled
    assert rand_index([], []) == 1.0
    assert rand_index([3], ["q"]) == 1.0
    # Pairs of 4 items: (01) same/same, (02) diff/same, (03) diff/diff, (12) diff/same,
    # (13) diff/diff, (23) same/diff -> 3 of 6 agree.
    assert rand_index([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(0.5, abs=1e-15)
    # All in one cluster vs all singletons: every pair disagrees.
    assert rand_index([0] * 5, list(range(5))) == 0.0
    # 15 pairs; same/same: (01), (45); same/diff: (02), (12), (34), (35);
    # diff/same: (23); the remaining 8 are diff/diff -> 10/15.
    assert rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) == pytest.approx(2 / 3, abs=1e-15)


def test_rand_index_matches_pair_count():
    rng = np.random.default_rng(5)
    for n in (2, 3, 7, 20, 41):
        for _ in range(5):
            x = rng.integers(0, rng.integers(1, 6), size=n)
            y = rng.integers(0, rng.integers(1, 6), size=n)
            expected = _rand_brute(x.tolist(), y.tolist())
            assert rand_index(x, y) == pytest.approx(expected, abs=1e-14)
            # Same value with string labels of the form "cluster.sub".
            xs = [f"{v}.{v % 2}" for v in x]
            assert rand_index(xs, y.tolist()) == pytest.approx(expected, abs=1e-14)


def test_rand_index_is_symmetric_and_bounded():
    rng = np.random.default_rng(6)
    for _ in range(10):
        x, y = rng.integers(0, 4, size=15), rng.integers(0, 3, size=15)
        r = rand_index(x, y)
        assert 0.0 <= r <= 1.0
        assert r == pytest.approx(rand_index(y, x), abs=1e-15)


# ------------------------------------------------------------------ adjusted Rand index


def test_adjusted_rand_index_known_values():
    a = [0, 0, 1, 1, 2, 2, 2]
    assert adjusted_rand_index(a, a) == pytest.approx(1.0, abs=1e-15)
    assert adjusted_rand_index(a, ["b", "b", "a", "a", "1.0", "1.0", "1.0"]) == pytest.approx(
        1.0, abs=1e-15
    )
    # Contingency [[2, 0], [1, 1]]: sum C(n_ij, 2) = 1, row sums (2, 2) -> sum C(a_i, 2) = 2,
    # column sums (3, 1) -> sum C(b_j, 2) = 3, C(4, 2) = 6; expected = 2*3/6 = 1, max = 2.5,
    # so ARI = (1 - 1)/(2.5 - 1) = 0.
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(0.0, abs=1e-15)
    # Contingency [[2, 1, 0], [0, 1, 2]]: index 2, row term 6, column term 3, C(6, 2) = 15;
    # expected 6*3/15 = 1.2, max 4.5 -> ARI = (2 - 1.2)/(4.5 - 1.2) = 8/33.
    got = adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2])
    assert got == pytest.approx(8 / 33, abs=1e-14)
    # Worse than chance is negative. Contingency [[1, 1], [1, 1]]: index 0, row term 2,
    # column term 2, C(4, 2) = 6; expected 2*2/6 = 2/3, max 2 -> ARI = (0 - 2/3)/(2 - 2/3).
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5, abs=1e-15)


def test_adjusted_rand_index_matches_pair_count():
    rng = np.random.default_rng(7)
    checked = 0
    for n in (5, 9, 20, 33):
        for _ in range(6):
            x = rng.integers(0, 4, size=n).tolist()
            y = rng.integers(0, 3, size=n).tolist()
            if len(set(x)) in (1, n) or len(set(y)) in (1, n):
                continue
            expected = _ari_brute(x, y)
            assert adjusted_rand_index(x, y) == pytest.approx(expected, abs=1e-12)
            assert adjusted_rand_index([str(v) for v in x], y) == pytest.approx(expected, abs=1e-12)
            checked += 1
    assert checked >= 15


def test_rand_length_mismatch_raises():
    with pytest.raises(ValueError):
        rand_index([0, 1, 2], [0, 1])
    with pytest.raises(ValueError):
        adjusted_rand_index([0, 1, 2], [0, 1])

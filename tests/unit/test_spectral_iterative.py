"""The spectral embedding above spectral.DENSE_EIGEN_UP_TO points (ARPACK on the affinity)
against the dense eigensolver below it: the same partitions and Davies–Bouldin scores on
planted affinities, the same bits on a second call, and degenerate affinities that propose
nothing (or fail as a recorded test, in FedGWC) rather than crash."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import paper_fedgwc
from sklearn.metrics import adjusted_rand_score

from distfl.algorithms.fedgwc import affinity, spectral
from distfl.algorithms.fedgwc.spectral import DegenerateAffinity, choose_split, spectral_embedding


def _planted_p(sizes: list[int], seed: int, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """A P whose rows fall into groups (each group its own level of reward), shuffled."""
    rng = np.random.default_rng(seed)
    truth = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    level = np.linspace(0.2, 0.8, len(sizes))[truth]
    return level[None, :] * 0.5 + level[:, None] + rng.normal(0.0, noise, (len(truth),) * 2), truth


def _both_paths(monkeypatch, W: np.ndarray, n_max: int = 5):
    """choose_split of W through the dense eigensolver and through ARPACK."""
    K = W.shape[0]
    monkeypatch.setattr(spectral, "DENSE_EIGEN_UP_TO", K)
    dense = choose_split(W, n_max, 7, min_size=3)
    monkeypatch.setattr(spectral, "DENSE_EIGEN_UP_TO", K - 1)
    iterative = choose_split(W, n_max, 7, min_size=3)
    return dense, iterative


@pytest.mark.parametrize(
    ("sizes", "seed"), [([20, 25], 0), ([12, 30, 18], 1), ([300, 250, 150], 2)]
)
def test_iterative_and_dense_paths_give_the_same_split(monkeypatch, sizes, seed):
    P, truth = _planted_p(sizes, seed)
    W = affinity(P, 0.5)
    (n_d, lab_d, sc_d), (n_i, lab_i, sc_i) = _both_paths(monkeypatch, W)
    assert n_d == n_i == len(sizes)
    np.testing.assert_array_equal(lab_i, lab_d)
    assert adjusted_rand_score(truth, lab_i) == 1.0
    # the scores are Davies–Bouldin on W's rows: the same labels give the same bits
    np.testing.assert_array_equal(sc_i, sc_d)


def test_the_default_threshold_sends_a_medium_cluster_to_arpack(monkeypatch):
    """At the default DENSE_EIGEN_UP_TO a cluster of 600 goes the iterative way. Where the
    n-th eigenvalue is separated from the next, its first n columns span the dense ones'
    subspace: the same distances between rows (k-means sees only those; a rotation or
    reflection of the columns leaves them), to ARPACK's accuracy."""
    assert spectral.DENSE_EIGEN_UP_TO < 600 <= spectral.SMALL_K
    P, _ = _planted_p([350, 250], 3)
    W = affinity(P, 0.5)
    got, det = spectral_embedding(W, 3, 5, gaps=True)
    monkeypatch.setattr(spectral, "DENSE_EIGEN_UP_TO", 600)
    ref, det_ref = spectral_embedding(W, 3, 5, gaps=True)
    assert det.tolist() == det_ref.tolist()
    ns = [n for n in (2, 3) if det[n - 1]]
    assert ns
    for n in ns:
        g_got, g_ref = got[:, :n] @ got[:, :n].T, ref[:, :n] @ ref[:, :n].T
        np.testing.assert_allclose(g_got, g_ref, rtol=0, atol=1e-6 * np.abs(g_ref).max())


def test_iterative_path_gives_the_same_bits_twice():
    P, _ = _planted_p([330, 270], 4)
    W = affinity(P, 0.5)
    a = spectral_embedding(W, 4, 11)
    b = spectral_embedding(W.copy(), 4, 11)
    assert a.tobytes() == b.tobytes()
    n1, l1, s1 = choose_split(W, 5, 11, min_size=3)
    n2, l2, s2 = choose_split(W, 5, 11, min_size=3)
    assert n1 == n2 and l1.tobytes() == l2.tobytes() and s1.tobytes() == s2.tobytes()


def test_a_constant_affinity_on_the_iterative_path_proposes_nothing():
    K = spectral.DENSE_EIGEN_UP_TO + 88
    _, determined = spectral_embedding(np.ones((K, K)), 4, 0, gaps=True)
    assert determined.tolist() == [True, False, False, False]
    n, labels, scores = choose_split(np.ones((K, K)), 4, 0)
    assert n == 1 and not labels.any() and np.isinf(scores).all()


def test_a_rank_deficient_affinity_on_the_iterative_path_offers_only_its_blocks():
    half = (spectral.DENSE_EIGEN_UP_TO + 100) // 2
    W = np.kron(np.array([[1.0, 0.1], [0.1, 1.0]]), np.ones((half, half)))
    _, determined = spectral_embedding(W, 4, 0, gaps=True)
    assert determined.tolist() == [True, True, False, False]
    n, labels, _ = choose_split(W, 4, 0)
    assert n == 2 and sorted(np.bincount(labels)) == [half, half]


def test_a_nan_affinity_on_the_iterative_path_raises_degenerate():
    P, _ = _planted_p([300, 300], 5)
    W = affinity(P, 0.5)
    W[4, 9] = W[9, 4] = np.nan
    with pytest.raises(DegenerateAffinity):
        choose_split(W, 5, 0)


@pytest.mark.parametrize("kind", ["constant", "nan"])
def test_fedgwc_records_a_degenerate_medium_cluster_as_no_result(kind):
    """A cluster of 600 (ARPACK's side) whose P is constant proposes nothing; one holding
    NaN is a failed test in the round's stats; neither raises."""
    K = 600
    alg = paper_fedgwc(num_clients=K, clients_per_round=60, seed=0, reference_draws=2)
    P = np.full((K, K), 0.3)
    if kind == "nan":
        P[5, 6] = np.nan
    alg.state["0"].P = P
    stats: dict[str, float] = {}
    assert alg._try_split("0", alg.state["0"], 5, stats=stats) is None
    assert alg.state["0"].proposal is None
    if kind == "nan":
        assert stats["test_failed"] == 1.0 and "db" not in stats
    else:
        assert "test_failed" not in stats


def test_references_above_the_bound_use_a_float32_affinity_with_the_same_median(monkeypatch):
    """The Gaussian references of a cluster of 600 are clustered on a float32 affinity: the
    median of their best scores is the float64 one's to float32 rounding, and the same bits
    on a second call."""
    from distfl.algorithms.fedgwc import reference

    assert reference.REFERENCE_FLOAT32_ABOVE < 600
    P, _ = _planted_p([320, 280], 6)
    kw = dict(beta=0.5, n_max=4, seed=3, min_size=3, draws=3)
    got = reference.reference_score(P, rng=np.random.default_rng(9), **kw)
    again = reference.reference_score(P, rng=np.random.default_rng(9), **kw)
    assert np.float64(got).tobytes() == np.float64(again).tobytes()
    monkeypatch.setattr(reference, "REFERENCE_FLOAT32_ABOVE", 600)
    exact = reference.reference_score(P, rng=np.random.default_rng(9), **kw)
    assert np.isfinite(exact) and got != exact
    assert got == pytest.approx(exact, rel=1e-4)

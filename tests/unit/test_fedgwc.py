"""FedGWC (Licciardi et al., ICML 2025): the pure functions and, lightly, the FedGWC class.

Expected values come from hand computations or from straightforward loop implementations of
the paper's equations written here (python floats, ``math.exp``), never from the module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from algostate import paper_fedgwc, restore, snapshot
from sklearn.metrics import adjusted_rand_score, davies_bouldin_score

from distfl.algorithms import fedgwc
from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.fedgwc import (
    FedGWC,
    affinity,
    best_split_score,
    block_contrast,
    gaussian_reference,
    gaussian_rewards,
    interaction_mse,
    participants,
    perception_distances,
    priority_sample,
    reference_score,
    spectral,
    update_interaction,
)
from distfl.algorithms.fedgwc.spectral import choose_split, davies_bouldin_rows, spectral_embedding

# ------------------------------------------------------------------ brute-force references


def _rewards_loop(losses) -> list[float]:
    """Eq. 1 by loops: unbiased variance per step, factor 2, σ² = 0 rewards 1, mean over s."""
    n = len(losses)
    S = len(losses[0])
    out = []
    for k in range(n):
        total = 0.0
        for s in range(S):
            col = [float(losses[i][s]) for i in range(n)]
            m = sum(col) / n
            var = sum((x - m) ** 2 for x in col) / (n - 1)
            if var == 0.0:
                total += 1.0
            else:
                total += math.exp(-((col[k] - m) ** 2) / (2.0 * var))
        out.append(total / S)
    return out


def _affinity_loop(P, beta: float) -> np.ndarray:
    """Eq. 4 by loops: W[k, j] = exp(-β ||v_k^j - v_j^k||²), entries k and j removed."""
    P = np.asarray(P, dtype=np.float64)
    K = P.shape[0]
    W = np.empty((K, K))
    for k in range(K):
        for j in range(K):
            d2 = 0.0
            for i in range(K):
                if i in (k, j):
                    continue
                d2 += (float(P[k, i]) - float(P[j, i])) ** 2
            W[k, j] = math.exp(-beta * d2)
    return W


def _distances_loop(P) -> np.ndarray:
    P = np.asarray(P, dtype=np.float64)
    K = P.shape[0]
    D = np.zeros((K, K))
    for k in range(K):
        for j in range(K):
            keep = [i for i in range(K) if i not in (k, j)]
            D[k, j] = sum((float(P[k, i]) - float(P[j, i])) ** 2 for i in keep)
    return D


def _block_affinity(sizes, seed, *, within=0.9, between=0.05, noise=0.02, shuffle=False):
    """A W of clear blocks plus small symmetric noise, ones on the diagonal; (W, truth)."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(len(sizes)), sizes)
    if shuffle:
        truth = rng.permutation(truth)
    K = len(truth)
    W = np.where(truth[:, None] == truth[None, :], within, between)
    E = rng.uniform(-noise, noise, (K, K))
    W = W + (E + E.T) / 2.0
    np.fill_diagonal(W, 1.0)
    return W, truth


def _noise_affinity(K, seed):
    rng = np.random.default_rng(seed)
    A = rng.uniform(0.0, 1.0, (K, K))
    W = np.triu(A) + np.triu(A, 1).T
    np.fill_diagonal(W, 1.0)
    return W


def _partition(labels) -> set[frozenset[int]]:
    labels = np.asarray(labels)
    return {frozenset(np.flatnonzero(labels == c).tolist()) for c in np.unique(labels)}


# ------------------------------------------------------------------ gaussian_rewards


def test_rewards_match_loop_reference():
    rng = np.random.default_rng(0)
    for n, S in [(2, 1), (3, 4), (5, 7), (10, 3)]:
        losses = rng.gamma(2.0, 0.5, size=(n, S))
        got = gaussian_rewards(losses)
        assert got.shape == (n,)
        np.testing.assert_allclose(got, _rewards_loop(losses.tolist()), rtol=1e-12, atol=0)


def test_rewards_two_clients_are_exp_minus_quarter():
    # n = 2: each client is |a-b|/2 from the mean, σ² (ddof=1) = (a-b)²/2, so
    # (l - m)² / (2σ²) = ((a-b)²/4) / (a-b)² = 1/4 for both clients, at every step.
    for a, b in [(0.3, 1.7), (5.0, -2.0), (1e-3, 2e-3)]:
        got = gaussian_rewards(np.array([[a, a + 1.0], [b, b - 4.0]]))
        np.testing.assert_allclose(got, [math.exp(-0.25)] * 2, rtol=1e-12)


def test_rewards_three_clients_by_hand():
    # one step, losses 0, 1, 2: m = 1, σ² = (1 + 0 + 1) / 2 = 1 -> exp(-1/2), 1, exp(-1/2)
    got = gaussian_rewards(np.array([[0.0], [1.0], [2.0]]))
    e = math.exp(-0.5)
    np.testing.assert_allclose(got, [e, 1.0, e], rtol=1e-12)


def test_rewards_all_equal_losses_give_ones():
    got = gaussian_rewards(np.full((4, 6), 0.7))
    np.testing.assert_array_equal(got, np.ones(4))
    assert np.all(np.isfinite(got))


def test_rewards_constant_step_contributes_one():
    # step 0 as in the hand example, step 1 constant (σ² = 0 -> reward 1 for everybody)
    losses = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0]])
    e = math.exp(-0.5)
    np.testing.assert_allclose(gaussian_rewards(losses), [(e + 1) / 2, 1.0, (e + 1) / 2])


def test_rewards_single_client_is_one():
    np.testing.assert_array_equal(gaussian_rewards(np.array([[0.3, 9.0]])), [1.0])


def test_rewards_furthest_client_gets_smallest_reward():
    rng = np.random.default_rng(1)
    for _ in range(20):
        losses = rng.normal(size=(6, 1))
        dist = np.abs(losses[:, 0] - losses[:, 0].mean())
        assert int(np.argmin(gaussian_rewards(losses))) == int(np.argmax(dist))
    # over several steps: one client is an outlier at every step
    losses = 1.0 + 0.05 * rng.normal(size=(5, 8))
    losses[3] += 2.0
    w = gaussian_rewards(losses)
    assert int(np.argmin(w)) == 3
    assert w[3] < np.delete(w, 3).min()


def test_rewards_invariant_to_per_step_shift_and_scale():
    rng = np.random.default_rng(2)
    losses = rng.normal(size=(5, 6))
    shift = rng.normal(scale=10.0, size=(1, 6))
    scale = rng.uniform(0.1, 10.0, size=(1, 6))
    base = gaussian_rewards(losses)
    np.testing.assert_allclose(gaussian_rewards(losses + shift), base, rtol=1e-9)
    np.testing.assert_allclose(gaussian_rewards(losses * scale), base, rtol=1e-9)


def test_rewards_in_unit_interval():
    rng = np.random.default_rng(3)
    w = gaussian_rewards(rng.exponential(size=(8, 5)))
    assert np.all(w > 0) and np.all(w <= 1)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
def test_rewards_shape_errors(shape):
    with pytest.raises(ValueError):
        gaussian_rewards(np.zeros(shape))


# ------------------------------------------------------------------ update_interaction


def test_update_interaction_matches_double_loop():
    rng = np.random.default_rng(4)
    P = rng.uniform(size=(7, 7))
    P_before = P.copy()
    sampled = np.array([4, 1, 5])  # unsorted on purpose: rewards align with this order
    rewards = np.array([0.2, 0.9, 0.5])
    alpha = 0.3
    got = update_interaction(P, sampled, rewards, alpha)

    expected = P_before.copy()
    for a, k in enumerate(sampled):
        for j in sampled:
            expected[k, j] = (1 - alpha) * P_before[k, j] + alpha * rewards[a]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    # the input is untouched and the result is a new array
    np.testing.assert_array_equal(P, P_before)
    assert got is not P and not np.shares_memory(got, P)
    # entries outside the sampled block are unchanged
    outside = np.ones((7, 7), dtype=bool)
    outside[np.ix_(sampled, sampled)] = False
    np.testing.assert_array_equal(got[outside], P_before[outside])


def test_update_interaction_uses_row_reward():
    P = np.zeros((3, 3))
    got = update_interaction(P, np.array([0, 2]), np.array([0.4, 0.8]), 1.0)
    # alpha = 1: row 0 of the block becomes ω_0, row 2 becomes ω_2 (not the column's ω)
    expected = np.array([[0.4, 0.0, 0.4], [0.0, 0.0, 0.0], [0.8, 0.0, 0.8]])
    np.testing.assert_array_equal(got, expected)


def test_update_interaction_alpha_zero_is_identity():
    P = np.random.default_rng(5).uniform(size=(4, 4))
    np.testing.assert_array_equal(update_interaction(P, [0, 1, 3], [0.1, 0.2, 0.3], 0.0), P)


def test_interaction_mse_is_the_mean_over_p_of_the_squared_change():
    rng = np.random.default_rng(6)
    P = rng.uniform(size=(9, 9))
    sampled = np.array([7, 2, 3])
    rewards = np.array([0.1, 0.6, 0.3])
    new = update_interaction(P, sampled, rewards, 0.4)
    block = np.ix_(sampled, sampled)
    got = interaction_mse(new[block] - P[block], block, P.shape)
    # up to FULL_MSE_MAX entries: the bits of the mean over the K×K change
    assert got == float(np.mean((new - P) ** 2))
    by_hand = sum((new[i, j] - P[i, j]) ** 2 for i in range(9) for j in range(9)) / 81
    assert got == pytest.approx(by_hand, rel=1e-14)


def test_interaction_mse_of_a_large_p_allocates_no_p():
    K = 4096  # above FULL_MSE_MAX entries: the block's sum over K², no K×K array
    assert K * K > fedgwc.FULL_MSE_MAX
    sampled = np.array([5, 4000, 17])
    change = np.array([[0.5, -0.25, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -2.0]])
    got = interaction_mse(change, np.ix_(sampled, sampled), (K, K))
    assert got == (0.25 + 0.0625 + 1.0 + 4.0) / K**2


# ------------------------------------------------------------------ affinity


@pytest.mark.parametrize("K", [1, 2, 3, 7])
def test_affinity_matches_triple_loop(K):
    rng = np.random.default_rng(10 + K)
    P = rng.uniform(size=(K, K))  # not symmetric
    for beta in (0.5, 2.0):
        np.testing.assert_allclose(affinity(P, beta), _affinity_loop(P, beta), atol=1e-12)


def test_affinity_small_edge_cases():
    np.testing.assert_array_equal(affinity(np.array([[0.3]]), 0.5), [[1.0]])
    # K = 2: removing entries k and j leaves nothing, so every distance is 0
    np.testing.assert_allclose(affinity(np.array([[0.1, 0.9], [0.5, 0.2]]), 3.0), np.ones((2, 2)))


def test_affinity_properties():
    rng = np.random.default_rng(6)
    P = rng.uniform(size=(9, 9))
    W = affinity(P, 0.5)
    np.testing.assert_allclose(W, W.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(W), np.ones(9), atol=0)
    assert np.all(W > 0) and np.all(W <= 1)
    off = ~np.eye(9, dtype=bool)
    assert np.all(W[off] < 1)  # random rows differ
    W_big = affinity(P, 2.0)
    assert np.all(W_big[off] < W[off])
    np.testing.assert_allclose(np.diag(W_big), np.ones(9))


def test_affinity_ignores_entries_k_and_j():
    # rows 0 and 1 agree except in columns 0 and 1, which are removed for the pair (0, 1)
    P = np.array(
        [
            [9.0, -4.0, 0.2, 0.3],
            [3.0, 7.0, 0.2, 0.3],
            [0.0, 0.0, 0.0, 0.0],
            [1.0, 1.0, 1.0, 1.0],
        ]
    )
    W = affinity(P, 1.0)
    assert W[0, 1] == pytest.approx(1.0, abs=1e-12)
    assert W[1, 0] == pytest.approx(1.0, abs=1e-12)
    assert W[0, 2] < 1.0


@pytest.mark.parametrize("K", [7, 40])
def test_perception_distances_block_sizes_agree(K):
    rng = np.random.default_rng(7 + K)
    P = rng.uniform(size=(K, K))
    ref = _distances_loop(P)
    results = [perception_distances(P, block_rows=b) for b in (1, 3, K - 1, K, 4096)]
    for D in results:
        np.testing.assert_allclose(D, ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(D, results[0], rtol=0, atol=1e-12)
        assert np.all(D >= 0)
        np.testing.assert_array_equal(np.diag(D), np.zeros(K))


def test_identical_rows_give_zero_distance_never_negative():
    # rows 2i and 2i+1 are equal: their distance is 0, and rounding must not push it (or any
    # other distance) below 0, nor the affinity above 1
    rng = np.random.default_rng(9)
    P = np.repeat(rng.uniform(size=(15, 30)), 2, axis=0)
    D = perception_distances(P, block_rows=4)
    assert np.all(D >= 0)
    for i in range(0, 30, 2):
        assert D[i, i + 1] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(D, _distances_loop(P), rtol=0, atol=1e-12)
    W = affinity(P, 0.5)
    assert np.all(W <= 1.0)


def test_perception_distances_rejects_non_square():
    with pytest.raises(ValueError):
        perception_distances(np.zeros((3, 4)))


# ------------------------------------------------------------------ choose_split


@pytest.mark.parametrize("seed", [0, 1])
def test_choose_split_recovers_three_blocks(seed):
    W, truth = _block_affinity([8, 12, 10], seed, shuffle=seed > 0)
    n, labels, scores = choose_split(W, 5, seed)
    assert n == 3
    assert labels.shape == (30,)
    assert adjusted_rand_score(truth, labels) == pytest.approx(1.0)
    assert _partition(labels) == _partition(truth)
    assert scores.shape == (4,)
    assert scores[1] < 1.0
    assert scores[1] == pytest.approx(np.min(scores))
    # the reported score is the Davies–Bouldin index of the labelling on the rows of W
    assert scores[1] == pytest.approx(davies_bouldin_score(W, labels), rel=1e-12)


def test_choose_split_two_blocks():
    W, truth = _block_affinity([9, 11], 3, shuffle=True)
    n, labels, scores = choose_split(W, 5, 0)
    assert n == 2
    assert _partition(labels) == _partition(truth)
    assert scores[0] < 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_choose_split_does_not_split_noise(seed):
    W = _noise_affinity(30, seed)
    n, labels, scores = choose_split(W, 5, seed)
    assert n == 1
    np.testing.assert_array_equal(labels, np.zeros(30, dtype=np.int64))
    finite = scores[np.isfinite(scores)]
    assert finite.size > 0
    assert np.all(finite >= 1.0)


def test_choose_split_reported_score_is_davies_bouldin_on_rows():
    W, truth = _block_affinity([5, 5, 5, 5], 11, shuffle=True)
    n, labels, scores = choose_split(W, 5, 0)
    assert n == 4
    assert _partition(labels) == _partition(truth)
    assert scores[n - 2] == pytest.approx(davies_bouldin_score(W, labels), rel=1e-12)


def test_choose_split_threshold():
    # noise does not split under the paper's threshold 1; a threshold just above its best
    # score makes it split into argmin_n DB_n clusters, a threshold equal to it does not
    W = _noise_affinity(20, 8)
    n, _, scores = choose_split(W, 3, 8)
    assert n == 1
    best = float(np.min(scores))
    assert 1.0 <= best < np.inf
    n, labels, scores2 = choose_split(W, 3, 8, threshold=float(np.nextafter(best, np.inf)))
    np.testing.assert_array_equal(scores2, scores)
    assert n == int(np.argmin(scores)) + 2
    assert len(np.unique(labels)) == n
    n, labels, _ = choose_split(W, 3, 8, threshold=best)
    assert n == 1 and not labels.any()


def test_choose_split_is_deterministic_per_seed():
    W = _noise_affinity(25, 4)
    a = choose_split(W, 3, 123)
    b = choose_split(W, 3, 123)
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    assert np.isfinite(a[2]).all()


def test_choose_split_min_size_refuses_small_cluster():
    W, truth = _block_affinity([2, 20], 5)
    # without the floor the 2-client block is split off
    n, labels, scores = choose_split(W, 5, 0)
    assert n == 2
    assert _partition(labels) == _partition(truth)
    assert np.isfinite(scores[0]) and scores[0] < 1.0
    # with min_size = 3 that labelling is refused (its score is inf)
    n, labels, scores = choose_split(W, 5, 0, min_size=3)
    assert np.isinf(scores[0])
    if n > 1:
        assert np.bincount(labels).min() >= 3
    assert _partition(labels) != _partition(truth)


@pytest.mark.parametrize("K", [1, 2, 3])
def test_choose_split_tiny_clusters_do_not_crash(K):
    rng = np.random.default_rng(K)
    A = rng.uniform(0.2, 0.8, (K, K))
    W = (A + A.T) / 2
    np.fill_diagonal(W, 1.0)
    n, labels, scores = choose_split(W, 5, 0)
    assert scores.shape == (4,)
    assert labels.shape == (K,)
    assert 1 <= n <= max(1, K - 1)
    # n >= K is impossible: those scores are inf
    for i in range(4):
        if i + 2 >= K:
            assert np.isinf(scores[i])
    if n == 1:
        np.testing.assert_array_equal(labels, np.zeros(K, dtype=np.int64))


def test_choose_split_scores_inf_for_n_at_least_k():
    W, _ = _block_affinity([2, 2], 0)
    n, labels, scores = choose_split(W, 6, 0)
    assert scores.shape == (5,)
    assert np.all(np.isinf(scores[2:]))  # n = 4, 5, 6 >= K = 4
    assert np.isfinite(scores[0])


# ------------------------------------------------------------------ large-K machinery
# Above spectral.SMALL_K clients the affinity is float32 and the Gram product runs in row strips;
# above spectral.DENSE_EIGEN_UP_TO the embedding comes from ARPACK; these tests force those
# paths at small K.


def _grouped_P(K, seed, groups=3, noise=0.1):
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.0, 1.0, groups)[rng.integers(0, groups, K)]
    return level[:, None] + rng.normal(0.0, noise, (K, K))


@pytest.mark.parametrize(("gram_rows", "rank"), [(1, 1), (3, 16), (5, 7), (4096, 39)])
def test_perception_distances_strips_and_deflation_rank_agree(monkeypatch, gram_rows, rank):
    # the Gram strips and the dimension of the subspace taken out of the Gram product only
    # change rounding: every combination matches the loop reference
    P = _grouped_P(40, 1)
    ref = _distances_loop(P)
    monkeypatch.setattr(fedgwc.perception, "_GRAM_ROWS", gram_rows)
    monkeypatch.setattr(fedgwc.perception, "_DEFLATE_RANK", rank)
    D = perception_distances(P, block_rows=6)
    np.testing.assert_allclose(D, ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), np.zeros(40))


def test_affinity_float32_matches_float64():
    P = _grouped_P(300, 2, noise=0.05)
    W64 = affinity(P, 0.5)
    W32 = affinity(P, 0.5, dtype=np.float32)
    assert W64.dtype == np.float64 and W32.dtype == np.float32
    np.testing.assert_allclose(W32, W64, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(W32, W32.T)  # exactly symmetric (mirrored, not recomputed)
    np.testing.assert_array_equal(np.diag(W32), np.ones(300, dtype=np.float32))
    # float32 P is accepted as it is (no float64 copy needed) and agrees too
    np.testing.assert_allclose(
        affinity(P.astype(np.float32), 0.5, dtype=np.float32),
        affinity(P.astype(np.float32).astype(np.float64), 0.5),
        rtol=2e-6,
        atol=1e-7,
    )


def test_affinity_dtype_follows_small_k(monkeypatch):
    P = _grouped_P(30, 3)
    assert affinity(P, 0.5).dtype == np.float64
    monkeypatch.setattr(spectral, "SMALL_K", 29)
    W = affinity(P, 0.5)
    assert W.dtype == np.float32
    np.testing.assert_allclose(W, _affinity_loop(P, 0.5), rtol=1e-6, atol=1e-7)


def test_affinity_large_k_symmetric_and_exact_entries():
    # K above the mirroring tile (512), the Gram strip (2048 rows) and SMALL_K (2048)
    P = _grouped_P(2100, 4, noise=0.02)
    W32 = affinity(P, 0.05)
    assert W32.dtype == np.float32
    W64 = affinity(P, 0.05, dtype=np.float64)
    for W in (W32, W64):
        np.testing.assert_array_equal(W, W.T)
        np.testing.assert_array_equal(np.diag(W), np.ones(2100))
    rng = np.random.default_rng(0)
    for k, j in rng.integers(0, 2100, (8, 2)):
        keep = np.ones(2100, dtype=bool)
        keep[[k, j]] = False
        expected = math.exp(-0.05 * float(np.sum((P[k, keep] - P[j, keep]) ** 2)))
        assert float(W64[k, j]) == pytest.approx(expected, rel=1e-10, abs=1e-300)
        assert float(W32[k, j]) == pytest.approx(expected, rel=1e-6, abs=1e-300)


def _random_labelings(K, rng):
    out = []
    for n in (2, 3, 4, 6):
        lab = np.concatenate([np.arange(n), rng.integers(0, n, K - n)])  # every label used
        out.append(rng.permutation(lab))
    return out


@pytest.mark.parametrize("block_rows", [None, 1, 7])
def test_davies_bouldin_rows_matches_sklearn(block_rows):
    rng = np.random.default_rng(5)
    for W in (_noise_affinity(40, 1), _block_affinity([10, 15, 12], 2, shuffle=True)[0]):
        labelings = _random_labelings(len(W), rng)
        got = davies_bouldin_rows(W, labelings, block_rows=block_rows)
        expected = [davies_bouldin_score(W, lab) for lab in labelings]
        np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_davies_bouldin_rows_float32_is_exact_on_its_values():
    # a float32 W is read in float64 blocks: the value is sklearn's on the same numbers
    rng = np.random.default_rng(6)
    W = _block_affinity([20, 25], 3, shuffle=True)[0].astype(np.float32)
    labelings = _random_labelings(45, rng)
    got = davies_bouldin_rows(W, labelings)
    expected = [davies_bouldin_score(W.astype(np.float64), lab) for lab in labelings]
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_davies_bouldin_rows_degenerate_clusters_score_zero():
    # identical rows within each cluster: every intra distance is 0 (sklearn returns 0)
    W = np.repeat(np.eye(3), [4, 5, 6], axis=0)
    W = np.repeat(W, [4, 5, 6], axis=1)
    lab = np.repeat(np.arange(3), [4, 5, 6])
    assert davies_bouldin_rows(W, [lab]) == [0.0]
    assert davies_bouldin_score(W, lab) == 0.0


@pytest.mark.parametrize("arpack", [False, True])
def test_spectral_embedding_matches_sklearn(monkeypatch, arpack):
    from sklearn.manifold import spectral_embedding as sk_embedding

    if arpack:
        monkeypatch.setattr(spectral, "DENSE_EIGEN_UP_TO", 0)
    for W in (_noise_affinity(60, 7), _block_affinity([9, 14, 22], 8, shuffle=True)[0]):
        ref = sk_embedding(W, n_components=4, drop_first=False, random_state=3)
        got = spectral_embedding(W, 4, 3, tol=1e-12)
        # same eigenvectors, scaled by D^-1/2 and signed alike
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-7 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_choose_split_large_k_path(monkeypatch, dtype):
    W, truth = _block_affinity([30, 45, 25], 9, shuffle=True)
    n_ref, labels_ref, scores_ref = choose_split(W, 5, 0, min_size=3)
    monkeypatch.setattr(spectral, "DENSE_EIGEN_UP_TO", 0)  # ARPACK embedding
    n, labels, scores = choose_split(W.astype(dtype), 5, 0, min_size=3)
    assert n == n_ref == 3
    assert _partition(labels) == _partition(truth)
    np.testing.assert_array_equal(labels, labels_ref)
    assert scores[1] == pytest.approx(scores_ref[1], rel=1e-6)
    assert scores[1] == pytest.approx(
        davies_bouldin_score(W.astype(dtype).astype(np.float64), labels), rel=1e-9
    )


def test_choose_split_labels_in_order_of_first_member():
    W, truth = _block_affinity([6, 7, 8, 5], 12, shuffle=True)
    n, labels, _ = choose_split(W, 5, 0)
    assert n == 4
    _, first = np.unique(labels, return_index=True)
    assert labels[0] == 0
    assert np.all(np.diff(first) > 0)  # cluster c's first member comes before c + 1's


# ------------------------------------------------------------------ sampling helpers


@pytest.mark.parametrize(
    ("size", "rate", "min_clients", "expected"),
    [
        (12, 1 / 3, 3, 4),
        (6, 1 / 3, 3, 3),  # round(2) < 3: the privacy floor
        (100, 0.1, 3, 10),
        (40, 0.25, 3, 10),
        (7, 0.1, 3, 3),
        (2, 0.5, 3, 2),  # at most |C|
        (3, 0.01, 3, 3),
        (30, 0.3, 3, 9),
        (50, 0.18, 5, 9),
        (10, 1.0, 3, 10),
    ],
)
def test_participants_hand_examples(size, rate, min_clients, expected):
    assert participants(size, rate, min_clients) == expected


def test_priority_sample_distinct_sorted():
    rng = np.random.default_rng(0)
    counts = np.array([3, 0, 1, 7, 2, 2, 0, 5])
    for n in (1, 3, 8):
        pos = priority_sample(counts, n, rng)
        assert pos.shape == (n,)
        assert len(set(pos.tolist())) == n
        assert np.all(np.diff(pos) > 0)
        assert pos.min() >= 0 and pos.max() < len(counts)


def test_priority_sample_favours_rarely_sampled():
    rng = np.random.default_rng(1)
    draws = 4000
    freq = np.zeros(4)
    for _ in range(draws):
        freq[priority_sample(np.array([0, 0, 5, 5]), 2, rng)] += 1
    freq /= draws
    assert freq.sum() == pytest.approx(2.0)
    assert min(freq[0], freq[1]) > 2.0 * max(freq[2], freq[3])


def test_priority_sample_equal_counts_near_uniform():
    rng = np.random.default_rng(2)
    draws = 4000
    freq = np.zeros(5)
    for _ in range(draws):
        freq[priority_sample(np.array([4, 4, 4, 4, 4]), 2, rng)] += 1
    freq /= draws
    # each position is drawn with probability 2/5; sd of the estimate is ~0.008
    np.testing.assert_allclose(freq, np.full(5, 0.4), atol=0.04)


# ------------------------------------------------------------------ the FedGWC class


def _make(seed: int = 0) -> FedGWC:
    return paper_fedgwc(num_clients=12, clients_per_round=4, seed=seed, epsilon=1e9, patience=1)


def _reports(plan, rng) -> ClientReports:
    ids = np.array(sorted(plan.train), dtype=np.int64)
    base = np.where(ids < 6, 0.1, 2.0)
    losses = base[:, None] + rng.normal(0.0, 0.01, size=(len(ids), 5))
    return ClientReports(
        clients=ids, losses=losses, num_samples=np.full(len(ids), 10, dtype=np.int64)
    )


def _check_plan(alg: FedGWC, plan) -> None:
    clusters = alg.clusters()
    members = np.concatenate(list(clusters.values()))
    assert sorted(members.tolist()) == list(range(12))  # the leaves partition the clients
    for cid, mem in clusters.items():
        chosen = [k for k, c in plan.train.items() if c == cid]
        expected = min(len(mem), max(3, round(alg.rate * len(mem))))
        assert len(chosen) == expected
        assert set(chosen) <= set(mem.tolist())
    assert set(plan.train.values()) == set(clusters)


@pytest.mark.parametrize("seed", [0, 1])
def test_fedgwc_plans_and_hierarchical_splits(seed):
    alg = _make(seed)
    rng = np.random.default_rng(100 + seed)
    splits = []
    for r in range(4):
        plan = alg.plan(r)
        _check_plan(alg, plan)
        if r == 0:
            assert len(plan.train) == 4  # max(3, round(12 / 3))
        parents = alg.clusters()
        for split in alg.update(r, plan, _reports(plan, rng)).splits:
            splits.append(split)
            assert split.parent in parents
            n = len(split.children)
            assert n >= 2
            assert sorted(split.children) == [f"{split.parent}.{c}" for c in range(n)]
            joined = np.concatenate(list(split.children.values()))
            assert sorted(joined.tolist()) == parents[split.parent].tolist()
            for child in split.children.values():
                assert len(child) >= 3  # min_clients
            after = alg.clusters()
            assert split.parent not in after
            for cid, mem in split.children.items():
                if cid in after:  # a child may already have split further
                    np.testing.assert_array_equal(after[cid], mem)
    # epsilon = 1e9 makes every update test a split, so some split happens
    assert splits
    assert alg.split_tests >= 1
    assert splits[0].parent == "0"
    assert sorted(splits[0].children)[:2] == ["0.0", "0.1"]
    for cid in alg.clusters():
        parts = cid.split(".")
        assert parts[0] == "0" and all(p.isdigit() for p in parts)


def test_fedgwc_state_dict_round_trip():
    alg = _make(0)
    rng = np.random.default_rng(7)
    for r in range(2):
        plan = alg.plan(r)
        alg.update(r, plan, _reports(plan, rng))
    state = snapshot(alg)
    snapshot_clusters = {k: v.copy() for k, v in alg.clusters().items()}

    # the original plans and trains further: the snapshot must not follow it
    plan_orig = alg.plan(2)
    reports = _reports(plan_orig, rng)
    splits_orig = alg.update(2, plan_orig, reports).splits
    plan_orig_3 = alg.plan(3)

    copy = _make(0)
    restore(copy, state)
    assert set(copy.clusters()) == set(snapshot_clusters)
    for cid, mem in snapshot_clusters.items():
        np.testing.assert_array_equal(copy.clusters()[cid], mem)
    plan_copy = copy.plan(2)
    assert plan_copy.train == plan_orig.train
    splits_copy = copy.update(2, plan_copy, reports).splits
    assert [s.parent for s in splits_copy] == [s.parent for s in splits_orig]
    assert copy.plan(3).train == plan_orig_3.train
    assert set(copy.clusters()) == set(alg.clusters())
    np.testing.assert_array_equal(copy.gamma, alg.gamma)
    np.testing.assert_array_equal(copy.times_sampled, alg.times_sampled)
    for cid, st in alg.state.items():
        np.testing.assert_array_equal(copy.state[cid].P, st.P)


def test_fedgwc_first_update_tracks_rewards():
    alg = paper_fedgwc(num_clients=12, clients_per_round=4, seed=0)  # default ε: no split
    plan = alg.plan(0)
    ids = np.array(sorted(plan.train), dtype=np.int64)
    losses = np.array([[0.0], [1.0], [2.0], [3.0]])
    reports = ClientReports(clients=ids, losses=losses, num_samples=np.ones(4, dtype=np.int64))
    update = alg.update(0, plan, reports)
    assert update.splits == []
    omega = np.array(_rewards_loop(losses.tolist()))
    alpha = 4 / 12  # α defaults to the participation rate
    np.testing.assert_allclose(alg.gamma[ids], alpha * omega, rtol=1e-12)
    others = np.setdiff1d(np.arange(12), ids)
    np.testing.assert_array_equal(alg.gamma[others], 0.0)
    np.testing.assert_array_equal(alg.times_sampled[ids], 1)
    P = alg.state["0"].P
    for a, k in enumerate(ids):
        for j in ids:
            assert P[k, j] == pytest.approx(alpha * omega[a], rel=1e-12)
    assert P[np.ix_(others, others)].sum() == 0.0
    expected_mse = sum(4 * (alpha * w) ** 2 for w in omega) / 144
    assert update.stats["0"]["mse"] == pytest.approx(expected_mse, rel=1e-12)


# ------------------------------------------------------------------ the calibrated split test


def _continuum_p(K: int, seed: int) -> np.ndarray:
    """P of clients that differ along one continuum: row k is client k's level (uniform in
    [0.3, 0.9]: how hard its data are) plus independent noise. No groups."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.3, 0.9, K)
    return level[:, None] + rng.normal(0.0, 0.02, (K, K))


def _two_group_p(K: int, minority: int, seed: int) -> np.ndarray:
    """P of a majority at level 0.8 and a minority at 0.4, the same noise."""
    rng = np.random.default_rng(seed)
    level = np.where(np.arange(K) < K - minority, 0.8, 0.4)
    return level[:, None] + rng.normal(0.0, 0.02, (K, K))


def test_gaussian_reference_has_the_rows_mean_and_covariance():
    rng = np.random.default_rng(0)
    P = rng.uniform(0.0, 1.0, (5, 5)) @ np.diag([1.0, 0.5, 0.2, 0.1, 0.05])
    X = P - P.mean(axis=0)
    cov = X.T @ X / 4  # the sample covariance of P's 5 rows
    draws = np.concatenate([gaussian_reference(P, rng) for _ in range(40_000)])
    np.testing.assert_allclose(draws.mean(axis=0), P.mean(axis=0), atol=0.01)
    np.testing.assert_allclose(np.cov(draws, rowvar=False), cov, atol=0.01)
    # a draw is the same for the same generator state
    a = gaussian_reference(P, np.random.default_rng(3))
    np.testing.assert_array_equal(a, gaussian_reference(P, np.random.default_rng(3)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_score_far_below_their_reference_and_a_continuum_does_not(seed):
    args = dict(beta=0.5, n_max=5, seed=seed, min_size=3, draws=9)
    groups = _two_group_p(40, 10, seed)
    continuum = _continuum_p(40, seed)
    g_best = best_split_score(affinity(groups, 0.5), 5, seed, 3)
    c_best = best_split_score(affinity(continuum, 0.5), 5, seed, 3)
    g_ref = reference_score(groups, rng=np.random.default_rng(seed), **args)
    c_ref = reference_score(continuum, rng=np.random.default_rng(seed), **args)
    # both pass the paper's test (DB below 1): the continuum splits somewhere too
    assert g_best < 1.0 and c_best < 1.0
    # only the groups stand below half of what one Gaussian cloud of their rows gives
    assert g_best < 0.5 * g_ref
    assert c_best > 0.5 * c_ref


def _splitter(**keys) -> FedGWC:
    alg = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0, **keys)
    alg.state["0"].P = _two_group_p(40, 10, 0)
    return alg


def test_stable_tests_wait_for_the_same_partition_twice():
    once, twice = _splitter(), _splitter(stable_tests=2)
    assert once._try_split("0", once.state["0"], 5) is not None  # the paper: one test
    st = twice.state["0"]
    stats: dict[str, float] = {}
    assert twice._try_split("0", st, 5, stats=stats) is None
    assert st.repeats == 1 and sorted(np.bincount(st.proposal)) == [10, 30]
    assert stats["db"] < 1.0 and "db_reference" not in stats
    split = twice._try_split("0", st, 6)
    assert split is not None
    assert sorted(len(m) for m in split.children.values()) == [10, 30]


def test_a_changed_proposal_starts_the_count_again():
    alg = _splitter(stable_tests=2)
    st = alg.state["0"]
    assert alg._try_split("0", st, 5) is None
    st.proposal = 1 - st.proposal  # the same partition named otherwise is another proposal
    assert alg._try_split("0", st, 6) is None and st.repeats == 1
    assert alg._try_split("0", st, 7) is not None


def test_a_test_without_a_proposal_forgets_the_last_one():
    alg = _splitter(stable_tests=2, db_threshold=1.0)
    st = alg.state["0"]
    assert alg._try_split("0", st, 5) is None and st.proposal is not None
    good = st.P.copy()
    st.P = np.full((40, 40), 0.5)  # every row alike: nothing below the threshold
    assert alg._try_split("0", st, 6) is None and st.proposal is None and st.repeats == 0
    st.P = good
    assert alg._try_split("0", st, 7) is None  # counting from one again
    assert alg._try_split("0", st, 8) is not None


def test_the_reference_refuses_a_continuum_the_paper_would_split():
    paper = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0)
    calibrated = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0, reference_draws=9)
    for alg in (paper, calibrated):
        alg.state["0"].P = _continuum_p(40, 0)
    assert paper._try_split("0", paper.state["0"], 5) is not None
    stats: dict[str, float] = {}
    assert calibrated._try_split("0", calibrated.state["0"], 5, stats=stats) is None
    assert stats["db"] >= 0.5 * stats["db_reference"]
    groups = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0, reference_draws=9)
    groups.state["0"].P = _two_group_p(40, 10, 0)
    stats = {}
    assert groups._try_split("0", groups.state["0"], 5, stats=stats) is not None
    assert stats["db"] < 0.5 * stats["db_reference"]


def test_a_pending_proposal_survives_the_state_dict():
    alg = _splitter(stable_tests=2)
    assert alg._try_split("0", alg.state["0"], 5) is None
    copy = _splitter(stable_tests=2)
    restore(copy, snapshot(alg))
    np.testing.assert_array_equal(copy.state["0"].proposal, alg.state["0"].proposal)
    assert copy.state["0"].repeats == 1
    assert copy._try_split("0", copy.state["0"], 6) is not None
    # a state written before proposals were kept has none pending
    old = alg.state_dict()
    for c in old["clusters"].values():
        c.pop("proposal"), c.pop("repeats")
    fresh = _splitter(stable_tests=2)
    fresh.load_state_dict(old)
    assert fresh.state["0"].proposal is None and fresh.state["0"].repeats == 0


# ------------------------------------------------------------------ block contrast


def test_block_contrast_by_hand():
    # groups [0, 0, 1]: same-group pairs (0,1), (1,0); cross pairs (0,2), (1,2), (2,0), (2,1)
    M = np.array([[9.0, 1.0, 2.0], [3.0, 9.0, 4.0], [5.0, 6.0, 9.0]])
    within, cross, spread = block_contrast(M, np.array([0, 0, 1]))
    assert within == 2.0  # (1 + 3) / 2
    assert cross == 4.25  # (2 + 4 + 5 + 6) / 4
    assert math.isnan(spread)  # no row has two same-group peers
    # one group: no cross pair
    w1, c1, s1 = block_contrast(M, np.array([4, 4, 4]))
    assert w1 == pytest.approx((1 + 2 + 3 + 4 + 5 + 6) / 6) and math.isnan(c1)
    # row spreads: row 0 over {1, 2}: std(1, 2) = 0.5; row 1 over {0, 2}: std(3, 4) = 0.5;
    # row 2 over {0, 1}: std(5, 6) = 0.5
    assert s1 == pytest.approx(0.5)


def test_block_contrast_against_loops():
    rng = np.random.default_rng(3)
    K = 11
    M = rng.random((K, K))
    g = rng.integers(0, 3, size=K)
    same, other, spreads = [], [], []
    for k in range(K):
        row = []
        for j in range(K):
            if j == k:
                continue
            (same if g[j] == g[k] else other).append(M[k, j])
            if g[j] == g[k]:
                row.append(M[k, j])
        if len(row) >= 2:
            spreads.append(float(np.std(row)))
    within, cross, spread = block_contrast(M, g)
    assert within == pytest.approx(np.mean(same), rel=1e-12)
    assert cross == pytest.approx(np.mean(other), rel=1e-12)
    assert spread == pytest.approx(np.mean(spreads), rel=1e-12)
    # a few rows at a time, and from float32 entries, the same numbers
    assert block_contrast(M, g, rows_per_block=4) == pytest.approx((within, cross, spread))
    m32 = M.astype(np.float32)
    assert block_contrast(m32, g) == pytest.approx((within, cross, spread), rel=1e-6)


def test_fedgwc_records_the_block_contrast_where_it_knows_the_groups():
    """Clients of group 1 lose far more than group 0: after a few rounds P's same-group
    entries of the root differ from its cross-group ones, and every number is recorded."""
    from distfl.algorithms.api.base import Federation

    K = 12
    groups = np.array([0] * 8 + [1] * 4)
    alg = paper_fedgwc(num_clients=K, clients_per_round=6, seed=0, min_clients=3)
    alg.federation = Federation(K, 6, 0, groups=groups)
    for t in range(1, 6):
        plan = alg.plan(t)
        clients = np.array(sorted(plan.train))
        losses = np.where(groups[clients, None] == 1, 3.0, 1.0) + 0.01 * np.arange(4)[None, :]
        reports = ClientReports(clients=clients, losses=losses, num_samples=np.ones(len(clients)))
        stats = alg.update(t, plan, reports).stats["0"]
    keys = ("p_within", "p_cross", "p_spread", "w_within", "w_cross", "w_spread")
    assert set(keys) <= set(stats)
    assert all(np.isfinite(stats[k]) for k in keys)
    P = alg.state["0"].P
    assert stats["p_within"] == pytest.approx(block_contrast(P, groups)[0], rel=1e-12)
    assert stats["w_cross"] == pytest.approx(block_contrast(affinity(P, 0.5), groups)[1])
    # without the groups (an algorithm built outside a run): only the MSE
    bare = paper_fedgwc(num_clients=K, clients_per_round=6, seed=0)
    plan = bare.plan(1)
    clients = np.array(sorted(plan.train))
    reports = ClientReports(clients=clients, losses=np.ones((len(clients), 4)),
                            num_samples=np.ones(len(clients)))  # fmt: skip
    assert set(bare.update(1, plan, reports).stats["0"]) == {"mse"}

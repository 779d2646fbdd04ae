"""CFL-GP (Kim, Kim, de Veciana, ICML 2024): the profile's cumulative average, the spectral
coordinates, the label matching and the clustering of planted profiles against values
computed by hand or independently (numpy's SVD), and the class driven by synthetic probe
rows: degenerate rows give no result, and its state restores to the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from

from distfl.algorithms.api.registry import algorithm_class
from distfl.algorithms.cflgp import (
    CFLGP,
    accumulate,
    cluster_profiles,
    clustering_rounds,
    imputed_profiles,
    match_labels,
    spectral_coordinates,
)
from distfl.metrics import adjusted_rand_index


def test_accumulate_is_the_running_mean_by_hand():
    profile = np.zeros((2, 3))
    counts = np.zeros(2, dtype=np.int64)
    g1 = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]])
    g2 = np.array([[3.0, 0.0, 1.0], [2.0, 4.0, 0.0]])
    g3 = np.array([[2.0, 1.0, 5.0], [1.0, 2.0, 3.0]])
    accumulate(profile, counts, g1)
    assert profile.tolist() == g1.tolist() and counts.tolist() == [1, 1]
    accumulate(profile, counts, g2)
    assert profile.tolist() == [[2.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    accumulate(profile, counts, g3)
    # (1+3+2)/3, (2+0+1)/3, (3+1+5)/3; (0+2+1)/3, (0+4+2)/3, (6+0+3)/3
    assert np.allclose(profile, [[2.0, 1.0, 3.0], [1.0, 2.0, 3.0]], rtol=0, atol=1e-15)
    assert counts.tolist() == [3, 3]


def test_a_missing_block_is_the_mean_of_the_clients_that_have_it():
    # 3 clients, 2 blocks of 2: client 2 lacks block 0, client 0 lacks block 1, none block 2
    profile = np.array(
        [
            [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]],
            [[3.0, 6.0], [5.0, 1.0], [0.0, 0.0]],
            [[0.0, 0.0], [7.0, 3.0], [0.0, 0.0]],
        ]
    )
    counts = np.array([[1, 0, 0], [2, 1, 0], [0, 1, 0]])
    want = [
        [1.0, 2.0, 6.0, 2.0, 0.0, 0.0],  # block 1: mean of (5, 1) and (7, 3)
        [3.0, 6.0, 5.0, 1.0, 0.0, 0.0],
        [2.0, 4.0, 7.0, 3.0, 0.0, 0.0],  # block 0: mean of (1, 2) and (3, 6)
    ]
    assert imputed_profiles(profile, counts).tolist() == want
    assert profile[2, 0].tolist() == [0.0, 0.0]  # the stored profile is left alone


@pytest.mark.parametrize("shape", [(6, 10), (10, 4)])  # the two Gram matrices
def test_spectral_coordinates_match_numpy_svd(shape):
    rng = np.random.default_rng(3)
    X = rng.normal(size=shape)
    k = 3
    got = spectral_coordinates(X, k)
    U, s, _ = np.linalg.svd(X, full_matrices=False)
    want = U[:, :k] * s[:k]
    # a direction's sign is free: compare column by column up to it
    for j in range(k):
        sign = np.sign(got[:, j] @ want[:, j])
        assert np.allclose(sign * got[:, j], want[:, j], atol=1e-10)


def test_spectral_coordinates_of_a_hand_matrix():
    # rows (3, 0) and (0, 4): singular values 4 and 3, coordinates ±(0, 3) and ±(4, 0)
    got = np.abs(spectral_coordinates(np.array([[3.0, 0.0], [0.0, 4.0]]), 2))
    assert np.allclose(got, [[0.0, 3.0], [4.0, 0.0]], atol=1e-12)


def test_match_labels_keeps_most_clients_in_place():
    previous = np.array([2, 2, 2, 0, 0, 1, 1, -1])
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    # 0 -> 2 (three kept), 1 -> 0 (two), 2 -> 1 (two)
    assert match_labels(labels, previous, 3).tolist() == [2, 2, 2, 0, 0, 1, 1, 1]
    # no previous cluster: the names stay a permutation
    fresh = match_labels(labels, np.full(8, -1), 3)
    assert adjusted_rand_index(fresh, labels) == 1.0


def test_a_planted_profile_matrix_is_clustered_into_its_groups():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 40)) * 5
    truth = np.repeat(np.arange(3), 7)
    X = centres[truth] + rng.normal(size=(21, 40)) * 0.3
    labels = cluster_profiles(X, 3, np.random.default_rng(1))
    assert adjusted_rand_index(truth, labels) == 1.0
    assert adjusted_rand_index(truth, cluster_profiles(X, 3, np.random.default_rng(1), 5)) == 1.0


def test_restarts_keep_the_run_of_least_within_cluster_sum_of_squares():
    # four blobs on a line, two close pairs far apart: a k-means++ start with two seeds in
    # one pair ends in a local optimum that splits a blob
    truth = np.repeat(np.arange(4), 5)
    centres = np.array([[0.0, 0.0], [1.5, 0.0], [10.0, 0.0], [11.5, 0.0]])
    X = centres[truth] + np.random.default_rng(0).normal(size=(20, 2)) * 0.2

    def misses(restarts):
        return sum(
            adjusted_rand_index(truth, cluster_profiles(X, 4, np.random.default_rng(s), restarts))
            < 1.0
            for s in range(40)
        )

    assert misses(1) > 0  # one run does get stuck on this federation
    assert misses(10) == 0


@pytest.mark.parametrize(
    "X",
    [
        np.zeros((6, 5)),  # zero gradients
        np.tile([1.0, 2.0, 3.0], (6, 1)),  # identical profiles
        np.where(np.eye(6, 5) > 0, np.nan, 1.0),  # not finite
        np.eye(2, 5),  # fewer clients than clusters
    ],
)
def test_degenerate_profiles_give_no_result(X):
    assert cluster_profiles(X, 3, np.random.default_rng(0)) is None


def test_clustering_rounds_counted_by_hand():
    assert clustering_rounds(2, 10, 20) == 5  # 1, 3, 5, 7, 9
    assert clustering_rounds(2, 10, 4) == 2  # 1, 3
    assert clustering_rounds(3, 1, 9) == 1
    assert clustering_rounds(1, 10, 0) == 0


# -- the class, driven by synthetic gradients ---------------------------------------------


def make(K=12, n=12, **kw):
    algo = CFLGP(num_clients=K, clients_per_round=n, seed=5, num_clusters=3, **kw)
    algo.federation = type(algo.federation)(K, n, 5, num_params=8)
    return algo


def gradients(clients, round_index):
    """Client k's gradient: the direction of its group k % 3 plus a little noise."""
    rng = np.random.default_rng(round_index)
    base = np.eye(3, 8) * 4.0
    return base[clients % 3] + rng.normal(size=(len(clients), 8)) * 0.1


def drive(algo, rounds, rows=gradients):
    for t in range(1, rounds + 1):
        req = algo.plan_probe(t)
        if req is not None:
            assert req.op == "gradient" and req.width == 8
            assert req.clusters == [algo.ids[algo.criterion(t)]]
            algo.update_probe(t, req, rows(req.clients, t))
        algo.plan(t)


def test_groups_found_from_gradient_profiles_and_the_state_restores():
    algo = make(period=2)
    drive(algo, 3)
    _, assign = algo.assignment()
    assert adjusted_rand_index(np.arange(12) % 3, assign) == 1.0
    # round 1 filled block 0, round 3 block 1 (criterion models in turn)
    assert algo.counts.sum(axis=0).tolist() == [12, 12, 0]
    twin = make(period=2)
    restore_from(twin, algo)
    for t in (4, 5):  # both continue alike
        for a in (algo, twin):
            req = a.plan_probe(t)
            if req is not None:
                a.update_probe(t, req, gradients(req.clients, t))
            a.plan(t)
    assert np.array_equal(algo.profile, twin.profile)
    assert np.array_equal(algo.assignment()[1], twin.assignment()[1])
    assert algo.rng.bit_generator.state == twin.rng.bit_generator.state


def test_partial_participation_keeps_unprofiled_clients_in_cluster_0():
    algo = make(K=30, n=9, period=1)
    drive(algo, 1)
    _, assign = algo.assignment()
    unseen = np.setdiff1d(np.arange(30), algo.profiled)
    assert len(algo.profiled) == 9 and (assign[unseen] == 0).all()
    assert adjusted_rand_index(algo.profiled % 3, assign[algo.profiled]) == 1.0


def test_nan_and_zero_gradients_give_no_result_and_no_crash():
    algo = make(period=1)
    drive(algo, 2, rows=lambda c, t: np.zeros((len(c), 8)))
    assert (algo.assignment()[1] == 0).all() and not algo._clustered
    out = algo.update(2, algo.plan(2), None)
    assert out.stats["0"]["clustered"] == 0.0
    nan = make(period=1)
    drive(nan, 1, rows=lambda c, t: np.full((len(c), 8), np.nan))
    assert nan._skipped == 12 and len(nan.profiled) == 0 and not nan._clustered


def test_profile_dim_keeps_a_fixed_subset_of_coordinates():
    algo = make(profile_dim=5)
    req = algo.plan_probe(1)
    algo.update_probe(1, req, gradients(req.clients, 1))
    assert algo.profile.shape == (12, 3, 5)
    assert np.array_equal(algo.coordinates(), make(profile_dim=5).coordinates())


def test_memory_follows_the_profiled_clients_not_k_squared():
    params = algorithm_class("cflgp").Params(profile_dim=100)
    # 2,714 clients, 10 a round, 20 rounds: 5 clustering rounds profile at most 50 clients
    small = CFLGP.pair_memory(params, num_clients=2714, clients_per_round=10, rounds=20)
    assert small == 2 * 50 * 50 * 8 + 2 * 50 * 4 * 100 * 8
    big = CFLGP.pair_memory(params, num_clients=20000, clients_per_round=200, rounds=20)
    assert big == 2 * 1000 * 1000 * 8 + 2 * 1000 * 4 * 100 * 8
    full = algorithm_class("cflgp").Params()
    assert CFLGP.round_models(full, num_clients=2714, clients_per_round=10, num_params=9) == (
        30 + 4 * 50 * 4
    )


def test_probe_request_names_the_criterion_model_in_turn():
    algo = make(period=2, stop_round=7)
    seen = []
    for t in range(1, 10):
        req = algo.plan_probe(t)
        seen.append(None if req is None else req.clusters[0])
        if req is not None:
            algo.update_probe(t, req, gradients(req.clients, t))
        algo.plan(t)
    assert seen == ["0", None, "1", None, "2", None, "0", None, None]


def test_true_clusters_hands_cflgp_the_number_of_groups(tmp_path):
    from distfl.tools.suite import plan_jobs

    # backdoor has 3 data groups; CFL-GP's default is 4 models
    (plain,) = plan_jobs(["backdoor"], ["cflgp"], [0], tmp_path, [])
    (given,) = plan_jobs(["backdoor"], ["cflgp"], [0], tmp_path, [], true_clusters=True)
    assert plain.config.algorithm.num_clusters == 4
    assert given.config.algorithm.num_clusters == len(given.config.groups) == 3
    assert "algorithm.num_clusters=3" in given.overrides

"""FlexCFL's math against independent computations on small arrays."""

import numpy as np
import pytest

from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.flexcfl import (
    FlexCFL,
    cosine_rows,
    decomposed_cosine,
    edc_groups,
    inter_group,
    most_similar_group,
)


def test_decomposed_cosine_against_a_hand_computation():
    # rows along e1 and e2 (two of each, scaled): the right singular vectors are ±e1, ±e2
    X = np.array([[3.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 5.0, 0.0]])
    E, rank = decomposed_cosine(X, 2)
    assert rank == 2
    # the leading direction is e2 (singular value sqrt(29) > sqrt(10)); cos is ±1 or 0
    assert np.allclose(np.abs(E), [[0, 1], [0, 1], [1, 0], [1, 0]])


def test_decomposed_cosine_against_numpy_svd_and_cosine_by_hand():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 10))
    E, rank = decomposed_cosine(X, 3)
    # independent: eigenvectors of X^T X (the right singular vectors), cosine by hand
    vals, vecs = np.linalg.eigh(X.T @ X)
    top = vecs[:, np.argsort(vals)[::-1][:3]]
    for i in range(6):
        for k in range(3):
            c = X[i] @ top[:, k] / (np.sqrt(X[i] @ X[i]) * np.sqrt(top[:, k] @ top[:, k]))
            assert abs(abs(E[i, k]) - abs(c)) < 1e-10  # the sign of a direction is free
    assert rank == 6


def test_decomposed_cosine_refuses_nan_and_gives_zero_rank_for_zero_updates():
    with pytest.raises(ValueError):
        decomposed_cosine(np.array([[1.0, np.nan], [0.0, 1.0]]), 1)
    E, rank = decomposed_cosine(np.zeros((4, 5)), 2)
    assert rank == 0 and np.all(E == 0)


def test_edc_groups_separates_two_directions():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=20), rng.normal(size=20)
    X = np.stack([a * s + 0.01 * rng.normal(size=20) for s in (1, 2, 3)]
                 + [b * s + 0.01 * rng.normal(size=20) for s in (1, 2, 3)])  # fmt: skip
    labels, _, _ = edc_groups(X, 2, np.random.default_rng(1))
    assert len(set(labels[:3])) == 1 and len(set(labels[3:])) == 1 and labels[0] != labels[3]


def test_identical_updates_do_not_crash_edc_groups():
    X = np.tile(np.arange(5.0), (6, 1))
    labels, E, rank = edc_groups(X, 3, np.random.default_rng(0))
    assert rank == 1 and labels.shape == (6,) and set(labels) <= {0, 1, 2}


def test_inter_group_against_a_hand_computation():
    W = np.array([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    D = np.array([[3.0, 4.0], [0.0, 2.0], [7.0, 7.0]])
    trained = np.array([True, True, False])
    out = inter_group(W, D, trained, 0.5)
    # group 0: + 0.5 * (0, 1); group 1: + 0.5 * (0.6, 0.8); group 2 did not train
    assert np.allclose(out, [[0.0, 0.5], [1.3, 1.4], [5.0, 5.0]])
    assert np.array_equal(inter_group(W, D, trained, 0.0), W)


def test_cold_start_and_migration_rule_is_the_most_similar_direction():
    G = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    U = np.array([[2.0, 1.0], [1.0, 3.0], [0.0, 0.0], [-1.0, -0.5]])
    # the last row is against every direction: the zero update (cosine 0) is the most similar
    assert most_similar_group(U, G).tolist() == [0, 1, 0, 2]
    C = cosine_rows(U, G)
    assert C[0, 0] == pytest.approx(2 / np.sqrt(5)) and C[2].tolist() == [0, 0, 0]


def run_rounds(algo, rounds, direction):
    """Drive the algorithm with synthetic clients whose update is its group's direction."""
    P = direction.shape[1]
    models = {c: np.zeros(P, np.float32) for c in algo.tree.leaf_ids()}
    for t in range(1, rounds + 1):
        plan = algo.plan(t)
        clients = np.array(sorted(plan.train))
        back = sorted(plan.return_models)
        rows = [models[plan.train[k]] + direction[k] for k in back]
        for c in set(plan.train.values()):
            members = [k for k in clients if plan.train[int(k)] == c]
            models[c] = np.mean([models[c] + direction[k] for k in members], 0).astype(np.float32)
        reports = ClientReports(clients=clients, losses=np.zeros((len(clients), 1)),
                                num_samples=np.ones(len(clients), np.int64),
                                models=np.stack(rows).astype(np.float32) if back else None,
                                cluster_models=dict(models))  # fmt: skip
        update = algo.update(t, plan, reports)
        for c, flat in update.models.items():
            models[c] = np.asarray(flat, np.float32)
    return update


def test_pretraining_groups_and_cold_starts_newcomers():
    rng = np.random.default_rng(0)
    K, P = 40, 12
    truth = np.arange(K) % 2
    base = rng.normal(size=(2, P))
    direction = base[truth] + 0.05 * rng.normal(size=(K, P))
    algo = FlexCFL(num_clients=K, clients_per_round=8, seed=1, num_clusters=2, pretrain_scale=5)
    update = run_rounds(algo, 1, direction)
    assert update.stats[algo.wait]["edc_rank"] >= 2
    _, assign = algo.tree.assignment()
    pre = np.flatnonzero(assign < 2)
    assert len(pre) == 10
    # newcomers join the group of their direction
    algo2 = FlexCFL(num_clients=K, clients_per_round=8, seed=1, num_clusters=2, pretrain_scale=5)
    run_rounds(algo2, 12, direction)
    leaves, assign = algo2.tree.assignment()
    placed = assign != leaves.index(algo2.wait)
    assert placed.sum() > 10
    for g in (0, 1):
        assert len(set(assign[placed & (truth == g)])) == 1
    assert set(assign[placed & (truth == 0)]) != set(assign[placed & (truth == 1)])


def test_migration_moves_a_client_whose_direction_changed():
    rng = np.random.default_rng(0)
    K, P = 20, 8
    truth = np.arange(K) % 2
    base = rng.normal(size=(2, P))
    direction = base[truth] + 0.01 * rng.normal(size=(K, P))
    algo = FlexCFL(num_clients=K, clients_per_round=K, seed=2, num_clusters=2, pretrain_scale=10,
                   migrate=True)  # fmt: skip
    run_rounds(algo, 3, direction)
    leaves, assign = algo.tree.assignment()
    before = assign.copy()
    shifted = direction.copy()
    shifted[0] = base[1]  # client 0's data now looks like the other group's
    run_rounds_from(algo, 4, shifted)
    _, after = algo.tree.assignment()
    assert after[0] == before[1] and after[0] != before[0]
    assert np.array_equal(after[1:], before[1:])


def run_rounds_from(algo, t, direction):
    """One round t, every client drawn, cluster models from the algorithm's own state."""
    P = direction.shape[1]
    models = {c: algo.group_models[g].copy() for g, c in enumerate(algo.ids)}
    models[algo.wait] = algo.init_model.copy()
    plan = algo.plan(t)
    clients = np.array(sorted(plan.train))
    back = sorted(plan.return_models)
    rows = np.stack([models[plan.train[k]] + direction[k] for k in back]).astype(np.float32)
    for c in set(plan.train.values()):
        members = [k for k in clients if plan.train[int(k)] == c]
        models[c] = np.mean([models[c] + direction[k] for k in members], 0).astype(np.float32)
    assert P == rows.shape[1]
    reports = ClientReports(clients=clients, losses=np.zeros((len(clients), 1)),
                            num_samples=np.ones(len(clients), np.int64), models=rows,
                            cluster_models=dict(models))  # fmt: skip
    return algo.update(t, plan, reports)


def test_nan_pretraining_is_no_result_not_a_crash():
    K, P = 10, 4
    direction = np.ones((K, P))
    direction[3, 1] = np.nan
    algo = FlexCFL(num_clients=K, clients_per_round=4, seed=0, num_clusters=2, pretrain_scale=5)
    update = run_rounds(algo, 1, direction)
    assert np.isnan(update.stats[algo.wait]["edc_rank"])
    _, assign = algo.tree.assignment()
    assert (assign == 0).sum() == K  # every pre-training client (all K) in group "0"


def test_zero_updates_are_no_result():
    K, P = 10, 4
    algo = FlexCFL(num_clients=K, clients_per_round=4, seed=0, num_clusters=2, pretrain_scale=5)
    update = run_rounds(algo, 1, np.zeros((K, P)))
    assert update.stats[algo.wait]["edc_rank"] == 0
    _, assign = algo.tree.assignment()
    assert (assign == 0).sum() == K and np.all(algo.latest == 0)


def test_state_written_to_a_run_file_and_read_back_continues_the_same():
    from algostate import restore_from

    rng = np.random.default_rng(5)
    K, P = 30, 6
    direction = rng.normal(size=(2, P))[np.arange(K) % 2] + 0.05 * rng.normal(size=(K, P))
    kw = dict(num_clients=K, clients_per_round=5, seed=3, num_clusters=2, pretrain_scale=5)
    fresh = FlexCFL(**kw)
    before_round_1 = FlexCFL(**kw)
    restore_from(before_round_1, fresh)  # nothing read yet: still to pre-train
    assert before_round_1.init_model is None and before_round_1.plan(1) == fresh.plan(1)
    algo = FlexCFL(**kw)
    run_rounds(algo, 3, direction)
    copy = FlexCFL(**kw)
    restore_from(copy, algo)
    assert np.array_equal(copy.init_model, algo.init_model)
    assert np.array_equal(copy.group_models, algo.group_models)
    assert np.array_equal(copy.latest, algo.latest)
    assert np.array_equal(copy.tree.assignment()[1], algo.tree.assignment()[1])
    assert copy.plan(4) == algo.plan(4)  # the same draws from the restored generator

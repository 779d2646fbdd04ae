"""FeSEM (Long et al., World Wide Web 2023): the pure functions against hand computations
and scipy, and the FeSEM class driven with synthetic client models."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from
from scipy.spatial.distance import cdist

from distfl.algorithms import build_algorithm
from distfl.algorithms.api.base import ClientReports, RoundPlan
from distfl.algorithms.fesem import (
    FeSEM,
    assign_nearest,
    initial_assignment,
    l2_distances,
    weighted_centres,
)
from distfl.config import load as load_config
from distfl.errors import ConfigError

# ------------------------------------------------------------------ pure functions


def test_l2_distances_by_hand_and_against_cdist():
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    C = np.array([[0.0, 0.0], [6.0, 8.0], [3.0, 0.0]])
    assert l2_distances(X, C).tolist() == [[0.0, 10.0, 3.0], [5.0, 5.0, 4.0]]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(9, 40)).astype(np.float32)
    C = rng.normal(size=(4, 40)).astype(np.float32)
    assert np.allclose(l2_distances(X, C), cdist(X.astype(float), C.astype(float)), rtol=1e-13)


def test_l2_distances_has_no_cancellation_far_from_the_origin():
    # two points 1e-6 apart, 1e4 from the origin: the expansion |x|² - 2x·c + |c|² loses it
    X = np.full((1, 3), 1e4)
    C = X + np.array([[1e-6, 0.0, 0.0]])
    assert l2_distances(X, C)[0, 0] == pytest.approx(1e-6, rel=1e-6)


def test_assign_nearest_ties_go_to_the_lowest_index():
    D = np.array([[2.0, 1.0, 1.0], [0.5, 0.5, 3.0], [4.0, 4.0, 4.0], [3.0, 2.0, 1.0]])
    assert assign_nearest(D).tolist() == [1, 0, 0, 2]


def test_weighted_centres_by_hand_and_an_empty_centre_keeps_its_model():
    X = np.array([[1.0, 0.0], [3.0, 2.0], [10.0, 10.0]])
    w = np.array([1.0, 3.0, 5.0])
    labels = np.array([0, 0, 2])
    old = np.array([[9.0, 9.0], [-1.0, -2.0], [0.0, 0.0]])
    out = weighted_centres(X, w, labels, old)
    # centre 0: (1·(1, 0) + 3·(3, 2)) / 4 = (2.5, 1.5); centre 1 has no one; centre 2 = x_2
    assert out.tolist() == [[2.5, 1.5], [-1.0, -2.0], [10.0, 10.0]]
    assert old.tolist() == [[9.0, 9.0], [-1.0, -2.0], [0.0, 0.0]]  # not modified


def test_weighted_centres_against_loops():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(12, 5))
    w = rng.integers(1, 30, size=12).astype(float)
    labels = rng.integers(0, 3, size=12)
    old = rng.normal(size=(4, 5))
    out = weighted_centres(X, w, labels, old)
    for m in range(4):
        idx = [i for i in range(12) if labels[i] == m]
        if not idx:
            assert np.array_equal(out[m], old[m])
            continue
        for p in range(5):
            expect = sum(w[i] * X[i, p] for i in idx) / sum(w[i] for i in idx)
            assert out[m, p] == pytest.approx(expect, rel=1e-12, abs=1e-14)


def test_initial_assignment_is_balanced_and_random():
    a = initial_assignment(11, 3, np.random.default_rng(0))
    assert sorted(np.bincount(a, minlength=3).tolist()) == [3, 4, 4]
    b = initial_assignment(11, 3, np.random.default_rng(1))
    assert not np.array_equal(a, b)
    assert set(initial_assignment(2, 3, np.random.default_rng(0)).tolist()) <= {0, 1, 2}


# ------------------------------------------------------------------ the FeSEM class

P = 4


def reports_for(clients, models, num_samples) -> ClientReports:
    clients = np.asarray(clients, dtype=np.int64)
    return ClientReports(
        clients=clients,
        losses=np.zeros((len(clients), 3)),
        num_samples=np.asarray(num_samples, dtype=np.int64),
        models=np.asarray(models, dtype=np.float32),
    )


def adjust(alg: FeSEM, t: int, centres: dict, reports: ClientReports) -> dict:
    """Round t's update with the round's aggregated centres: the centres it replaced."""
    reports.cluster_models = centres
    return alg.update(t, RoundPlan(t, {}), reports).models


def set_labels(alg: FeSEM, labels) -> None:
    """Put client k in centre labels[k] (the tree owns the assignment)."""
    alg.tree.reassign(np.arange(len(labels)), [str(m) for m in labels])


def test_distinct_initial_models_and_balanced_clusters():
    alg = FeSEM(num_clients=10, clients_per_round=4, seed=0, num_clusters=3, init="random")
    inits = alg.initial_models()
    assert inits == {"0": 1, "1": 2, "2": 3}
    clusters = alg.clusters()
    assert sorted(clusters) == ["0", "1", "2"]
    everyone = np.sort(np.concatenate(list(clusters.values())))
    assert everyone.tolist() == list(range(10))
    assert sorted(len(m) for m in clusters.values()) == [3, 3, 4]


def test_build_algorithm_passes_the_settings():
    cfg = load_config(
        overrides=[
            'algorithm.name="fesem"',
            "algorithm.num_clusters=3",
            "algorithm.reassign_every=2",
        ]
    )
    alg = build_algorithm(cfg)
    assert isinstance(alg, FeSEM)
    assert (alg.num_clusters, alg.reassign_every) == (3, 2)


@pytest.mark.parametrize("name", ["fesem", "ifca"])
def test_num_clusters_zero_is_the_number_of_groups(name):
    """0 gives one cluster model per ground-truth group (the papers give the true count);
    without groups it is refused, and a negative count names the allowed values."""
    cfg = load_config(overrides=[f'algorithm.name="{name}"', "algorithm.num_clusters=0"])
    groups = np.repeat([0, 2, 5], [5, 5, cfg.data.num_clients - 10])
    alg = build_algorithm(cfg, groups=groups)
    assert alg.num_clusters == 3 and len(alg.tree.leaves()) == 3
    with pytest.raises(ValueError, match="ground-truth groups"):
        build_algorithm(cfg)
    with pytest.raises(ConfigError, match=r"num_clusters.*0 \(the number of data groups\)"):
        load_config(overrides=[f'algorithm.name="{name}"', "algorithm.num_clusters=-1"])


def test_plan_samples_uniformly_and_returns_every_trained_model():
    alg = FeSEM(num_clients=10, clients_per_round=4, seed=0, init="random")
    seen = np.zeros(10)
    for t in range(1, 201):
        plan = alg.plan(t)
        assert len(plan.train) == 4
        assert plan.return_models == frozenset(plan.train)
        for k, cid in plan.train.items():
            assert cid == str(alg.labels[k])
            seen[k] += 1
    # 800 draws over 10 clients: 80 each on average, binomial sd ≈ 7
    assert seen.min() > 50 and seen.max() < 110


def test_e_step_assigns_the_nearest_centre_and_m_step_averages():
    alg = FeSEM(num_clients=6, clients_per_round=6, seed=0, num_clusters=3, init="random")
    centres = {
        "0": np.array([0.0, 0.0, 0.0, 0.0], dtype=np.float32),
        "1": np.array([10.0, 0.0, 0.0, 0.0], dtype=np.float32),
        "2": np.array([0.0, 0.0, 0.0, 50.0], dtype=np.float32),
    }
    # clients 0, 3, 4 sit near centre 1, clients 1, 2 near centre 0, client 5 not sampled
    X = np.array(
        [
            [9.0, 1.0, 0.0, 0.0],  # client 0
            [1.0, 0.0, 0.0, 0.0],  # client 1
            [-1.0, 2.0, 0.0, 0.0],  # client 2
            [11.0, 0.0, 0.0, 0.0],  # client 3
            [10.0, 0.0, 3.0, 0.0],  # client 4
        ]
    )
    set_labels(alg, [2, 2, 1, 0, 0, 2])
    out = adjust(alg, 1, centres, reports_for([0, 1, 2, 3, 4], X, [1, 2, 2, 1, 2]))
    assert alg.labels.tolist() == [1, 0, 0, 1, 1, 2]  # 5 kept its centre
    assert sorted(out) == ["0", "1"]  # centre 2 won nobody: not replaced
    assert out["0"].dtype == np.float32
    assert out["0"].tolist() == [0.0, 1.0, 0.0, 0.0]  # (2 (1, 0) + 2 (-1, 2)) / 4
    expect1 = (1 * X[0] + 1 * X[3] + 2 * X[4]) / 4  # (10, 0.25, 1.5, 0)
    assert np.allclose(out["1"], expect1, rtol=0, atol=1e-6)
    assert {c: m.tolist() for c, m in alg.clusters().items()} == {
        "0": [1, 2],
        "1": [0, 3, 4],
        "2": [5],
    }
    assert alg.reassignments == 5


def test_reassignment_only_every_n_rounds():
    alg = FeSEM(num_clients=2, clients_per_round=2, seed=0, reassign_every=3, init="random")
    set_labels(alg, [0, 0])
    centres = {"0": np.zeros(P, dtype=np.float32), "1": np.ones(P, dtype=np.float32)}
    X = np.array([[0.0] * P, [0.9] * P])
    for t in (1, 2, 4, 5):
        assert adjust(alg, t, centres, reports_for([0, 1], X, [1, 1])) == {}
        assert alg.labels.tolist() == [0, 0]
    out = adjust(alg, 6, centres, reports_for([0, 1], X, [1, 1]))
    assert alg.labels.tolist() == [0, 1]
    assert np.allclose(out["1"], 0.9)


def test_empty_clusters_are_fine_for_the_assignment():
    alg = FeSEM(num_clients=3, clients_per_round=3, seed=0, num_clusters=3, init="random")
    centres = {str(m): np.full(P, 10.0 * m, dtype=np.float32) for m in range(3)}
    X = np.full((3, P), 0.5)
    adjust(alg, 1, centres, reports_for([0, 1, 2], X, [1, 1, 1]))
    clusters = alg.clusters()
    assert clusters["0"].tolist() == [0, 1, 2]
    assert len(clusters["1"]) == 0 and len(clusters["2"]) == 0
    leaves, assignment = alg.assignment()
    assert leaves == ["0", "1", "2"] and assignment.tolist() == [0, 0, 0]
    plan = alg.plan(2)
    assert plan.clusters() == ["0"]


def _simulate(alg: FeSEM, centres: dict, rounds, num_samples) -> list:
    """Clients pull their centre towards their own optimum (two groups at ±1); returns the
    plans and the centres after each round."""
    K = alg.num_clients
    optimum = np.where(np.arange(K)[:, None] % 2 == 0, 1.0, -1.0) * np.ones((K, P))
    out = []
    for t in rounds:
        plan = alg.plan(t)
        clients = np.array(sorted(plan.train))
        X = np.stack([0.5 * centres[plan.train[k]] + 0.5 * optimum[k] for k in clients])
        replaced = adjust(alg, t, centres, reports_for(clients, X, num_samples[clients]))
        centres = {**centres, **replaced}
        out.append((plan.train, {c: m.copy() for c, m in centres.items()}))
    return out, centres


def test_state_round_trip_continues_identically():
    K = 12
    num_samples = np.arange(5, 5 + K)
    alg = FeSEM(num_clients=K, clients_per_round=5, seed=4, num_clusters=3, init="random")
    rng = np.random.default_rng(0)
    centres = {str(m): rng.normal(size=P).astype(np.float32) for m in range(3)}
    _, centres = _simulate(alg, centres, range(1, 6), num_samples)
    restored = FeSEM(num_clients=K, clients_per_round=5, seed=99, num_clusters=3, init="random")
    restore_from(restored, alg)
    a, _ = _simulate(alg, centres, range(6, 16), num_samples)
    b, _ = _simulate(restored, centres, range(6, 16), num_samples)
    for (plan_a, c_a), (plan_b, c_b) in zip(a, b, strict=True):
        assert plan_a == plan_b
        for cid in c_a:
            assert np.array_equal(c_a[cid], c_b[cid])
    assert np.array_equal(alg.labels, restored.labels)
    assert alg.reassignments == restored.reassignments
    # the even and odd clients have found different centres
    groups = np.arange(K) % 2
    assert all(len(set(alg.labels[groups == g].tolist())) == 1 for g in (0, 1))
    assert alg.labels[0] != alg.labels[1]


# ------------------------------------------------------------------ the k-means++ start


def test_kmeanspp_start_seeds_the_centres_from_round_ones_models():
    """init = "kmeans++": one initial model for every centre; round 1 trains every client;
    its models (two groups far apart) make the centres their groups' weighted means, and
    every client joins its group's centre; round 2 is a plain E-step on a sample."""
    alg = FeSEM(num_clients=5, clients_per_round=2, seed=3, num_clusters=2, init="kmeans++")
    assert alg.initial_models() == {"0": 0, "1": 0}
    plan = alg.plan(1)
    assert sorted(plan.train) == [0, 1, 2, 3, 4] and plan.return_models == frozenset(range(5))
    same = {"0": np.zeros(P, dtype=np.float32), "1": np.zeros(P, dtype=np.float32)}
    X = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0], [1.2, 0, 0, 0], [-1.1, 0, 0, 0],
                  [0.8, 0, 0, 0]])  # fmt: skip
    w = np.array([1, 2, 3, 4, 5])
    out = adjust(alg, 1, same, reports_for(range(5), X, w))
    assert not alg.unseeded
    m_pos, m_neg = int(alg.labels[0]), int(alg.labels[1])
    assert m_pos != m_neg
    assert alg.labels.tolist() == [m_pos, m_neg, m_pos, m_neg, m_pos]
    assert np.allclose(out[str(m_pos)][0], (1 * 1.0 + 3 * 1.2 + 5 * 0.8) / 9, atol=1e-6)
    assert np.allclose(out[str(m_neg)][0], (2 * -1.0 + 4 * -1.1) / 6, atol=1e-6)
    # round 2: a sample of 2, and the E-step against the seeded centres
    assert len(alg.plan(2).train) == 2
    centres = {cid: np.asarray(v) for cid, v in out.items()}
    moved = np.array([[0.9, 0, 0, 0], [0.95, 0, 0, 0]])  # client 1 now near the other centre
    adjust(alg, 2, centres, reports_for([0, 1], moved, [1, 1]))
    assert alg.labels[[0, 1]].tolist() == [m_pos, m_pos]


def test_fedavg_rounds_then_the_seeding_round():
    """fedavg_rounds = 2: rounds 1 and 2 train a sample and set every centre to the round's
    sample-weighted mean model, nobody moves; round 3 is the seeding round (every client,
    k-means); the random start ignores the key."""
    alg = FeSEM(num_clients=5, clients_per_round=2, seed=3, num_clusters=2, init="kmeans++",
                fedavg_rounds=2)  # fmt: skip
    before = alg.labels.copy()
    same = {"0": np.zeros(P, dtype=np.float32), "1": np.zeros(P, dtype=np.float32)}
    for r in (1, 2):
        plan = alg.plan(r)
        chosen = sorted(plan.train)
        assert len(chosen) == 2 and plan.return_models == frozenset(chosen)
        X = np.array([[1.0, 2, 0, 0], [3.0, -2, 0, 0]])
        out = adjust(alg, r, same, reports_for(chosen, X, [1, 3]))
        mean = (1 * X[0] + 3 * X[1]) / 4  # [2.5, -1, 0, 0]
        assert set(out) == {"0", "1"} and all(np.allclose(v, mean) for v in out.values())
        assert alg.unseeded and alg.labels.tolist() == before.tolist()
        same = {cid: np.asarray(v) for cid, v in out.items()}
    plan = alg.plan(3)
    assert sorted(plan.train) == [0, 1, 2, 3, 4]
    X = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0], [1.2, 0, 0, 0], [-1.1, 0, 0, 0],
                  [0.8, 0, 0, 0]])  # fmt: skip
    adjust(alg, 3, same, reports_for(range(5), X, [1, 1, 1, 1, 1]))
    assert not alg.unseeded and len(set(alg.labels[[0, 2, 4]])) == 1
    assert alg.labels[0] != alg.labels[1] == alg.labels[3]
    paper = FeSEM(
        num_clients=5, clients_per_round=2, seed=3, num_clusters=2, fedavg_rounds=2, init="random"
    )
    assert paper.fedavg_rounds == 0 and len(paper.plan(1).train) == 2
    with pytest.raises(ConfigError, match="fedavg_rounds"):
        load_config(overrides=['algorithm.name="fesem"', "algorithm.fedavg_rounds=-1"])


def test_kmeanspp_state_survives_and_the_paper_start_stays_an_option():
    a = FeSEM(num_clients=6, clients_per_round=3, seed=0, num_clusters=2, init="kmeans++")
    b = FeSEM(num_clients=6, clients_per_round=3, seed=0, num_clusters=2, init="kmeans++")
    a.unseeded = False
    restore_from(b, a)
    assert b.unseeded is False
    assert FeSEM(num_clients=6, clients_per_round=3, seed=0, init="random").initial_models() == {
        "0": 1,
        "1": 2,
    }


def test_kmeanspp_is_the_configs_default():
    from distfl.config import build

    alg = build_algorithm(load_config(overrides=['algorithm.name="fesem"']))
    assert alg.init == "kmeans++" and alg.initial_models() == {"0": 0, "1": 0}
    # every client trains in the seeding round: fewer clients per round than centres is fine
    load_config(overrides=['algorithm.name="fesem"', "algorithm.num_clusters=5",
                           "server.clients_per_round=4"])  # fmt: skip
    # a run file written before the key existed resumes with the start it had
    stored = load_config(overrides=['algorithm.name="fesem"']).to_dict()
    del stored["algorithm"]["init"]
    assert build(stored, stored=True).algorithm.params.init == "random"


def test_the_seeding_round_is_what_the_memory_check_counts():
    """FeSEM's seeding round sends up to 2,048 clients' models; later rounds the round's."""
    count = FeSEM.round_models
    assert count(FeSEM.Params(), num_clients=2714, clients_per_round=10, num_params=99) == 2048
    assert count(FeSEM.Params(init="random"), num_clients=2714, clients_per_round=10,
                 num_params=99) == 10  # fmt: skip

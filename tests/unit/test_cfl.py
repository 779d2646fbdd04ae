"""CFL (Sattler, Müller, Samek, IEEE TNNLS 2020): the pure functions against hand
computations and independent scipy/scikit-learn calls, and the CFL class driven round by
round with synthetic client models (a small stand-in for the server: FedAvg per cluster,
children start from the parent's aggregated model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from algostate import restore_from
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import cosine_similarity as sk_cosine

from distfl.algorithms import build_algorithm
from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.cfl import CFL, bipartition, cosine_similarity, split_criterion
from distfl.config import load as load_config

# ------------------------------------------------------------------ split_criterion


def test_split_criterion_opposite_updates_split():
    # mean of (3, 4) and (-3, -4) is 0; the largest norm is 5
    mean_norm, max_norm, split = split_criterion(
        np.array([[3.0, 4.0], [-3.0, -4.0]]), [1, 1], 0.4, 1.6
    )
    assert mean_norm == 0.0 and max_norm == 5.0 and split


def test_split_criterion_weighted_mean_by_hand():
    U = np.array([[1.0, 0.0], [0.0, 2.0]])
    mean_norm, max_norm, _ = split_criterion(U, [3, 1], 10.0, 0.0)
    # (3 (1, 0) + 1 (0, 2)) / 4 = (0.75, 0.5)
    assert mean_norm == pytest.approx(math.sqrt(0.75**2 + 0.5**2), rel=1e-15)
    assert max_norm == 2.0
    unweighted, _, _ = split_criterion(U, [1, 1], 10.0, 0.0)
    assert unweighted == pytest.approx(math.sqrt(0.5**2 + 1.0**2), rel=1e-15)


def test_split_criterion_thresholds_are_strict():
    U = np.array([[0.4, 0.0], [0.4, 0.0]])  # mean norm 0.4, max norm 0.4
    assert split_criterion(U, [1, 1], 0.41, 0.39)[2]
    assert not split_criterion(U, [1, 1], 0.4, 0.39)[2]  # mean_norm == eps1
    assert not split_criterion(U, [1, 1], 0.41, 0.4)[2]  # max_norm == eps2
    assert not split_criterion(np.zeros((0, 3)), np.zeros(0), 1.0, 0.0)[2]


def test_split_criterion_random_against_loops():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(7, 11))
    w = rng.integers(1, 50, size=7).astype(float)
    mean = [sum(w[k] * U[k, p] for k in range(7)) / sum(w) for p in range(11)]
    expect_mean = math.sqrt(sum(x * x for x in mean))
    expect_max = max(math.sqrt(sum(x * x for x in row)) for row in U.tolist())
    mean_norm, max_norm, split = split_criterion(U, w, expect_mean + 1e-9, expect_max - 1e-9)
    assert mean_norm == pytest.approx(expect_mean, rel=1e-12)
    assert max_norm == pytest.approx(expect_max, rel=1e-12)
    assert split


# ------------------------------------------------------------------ cosine similarity


def test_cosine_similarity_by_hand():
    U = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
    S = cosine_similarity(U)
    r = 1 / math.sqrt(2)
    expect = np.array(
        [
            [1.0, 0.0, -1.0, r],
            [0.0, 1.0, 0.0, r],
            [-1.0, 0.0, 1.0, -r],
            [r, r, -r, 1.0],
        ]
    )
    assert np.allclose(S, expect, atol=1e-15)
    assert np.array_equal(S, S.T)


def test_cosine_similarity_against_sklearn_with_a_zero_update():
    rng = np.random.default_rng(1)
    U = rng.normal(size=(9, 30))
    U[4] = 0.0
    S = cosine_similarity(U)
    assert np.allclose(S, sk_cosine(U), atol=1e-12)
    assert np.all(S[4] == 0.0)


# ------------------------------------------------------------------ bipartition


def test_bipartition_two_obvious_groups():
    # items 0, 2, 3 point one way, 1 and 4 the other
    v = np.array([1.0, 0.5, -0.2])
    U = np.array([v, -v + [0.1, 0, 0], v * 2 + [0, 0.1, 0], v + [0, 0, 0.1], -v])
    labels = bipartition(cosine_similarity(U))
    assert labels.tolist() == [0, 1, 0, 0, 1]


def test_bipartition_similarity_by_hand():
    # a hand-written similarity: {0, 1} and {2, 3} are close, across they are not
    S = np.array(
        [
            [1.0, 0.9, -0.5, -0.4],
            [0.9, 1.0, -0.3, -0.6],
            [-0.5, -0.3, 1.0, 0.8],
            [-0.4, -0.6, 0.8, 1.0],
        ]
    )
    assert bipartition(S).tolist() == [0, 0, 1, 1]
    assert bipartition(S[::-1, ::-1]).tolist() == [0, 0, 1, 1]


def test_bipartition_is_complete_linkage_as_sklearn_computes_it():
    """Against scikit-learn's complete-linkage clustering of −S (the reference code's call);
    single linkage differs from it on some of these, so the comparison can tell."""
    differs_from_single = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(3, 14))
        S = cosine_similarity(rng.normal(size=(n, 5)))
        ours = bipartition(S)
        complete = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete")
        theirs = complete.fit(-S).labels_
        assert adjusted_rand_score(theirs, ours) == 1.0, seed
        assert set(ours.tolist()) == {0, 1} and ours[0] == 0
        single = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="single")
        if adjusted_rand_score(single.fit(-S).labels_, ours) != 1.0:
            differs_from_single += 1
    assert differs_from_single > 0


def test_bipartition_needs_two_items():
    with pytest.raises(ValueError):
        bipartition(np.ones((1, 1)))


# ------------------------------------------------------------------ the CFL class

P = 6


class Federation:
    """The server's part for CFL: every cluster's model, each client's model after training
    (the cluster model plus an update chosen by the test), FedAvg per cluster, the
    algorithm's call order, children starting from the parent's aggregated model."""

    def __init__(self, alg: CFL, num_samples: np.ndarray, seed: int = 0):
        self.alg = alg
        self.num_samples = np.asarray(num_samples, dtype=np.int64)
        self.models = {"0": np.random.default_rng(seed).normal(size=P).astype(np.float32)}
        self.round = 0

    def step(self, updates: np.ndarray):
        """One round; ``updates[k]`` is client k's ΔW. Returns (plan, reports, splits)."""
        self.round += 1
        t = self.round
        plan = self.alg.plan(t)
        clients = np.array(sorted(plan.train), dtype=np.int64)
        assert plan.return_models == frozenset(clients.tolist())
        trained = np.stack(
            [self.models[plan.train[int(k)]] + updates[k].astype(np.float32) for k in clients]
        )
        for cid in plan.clusters():
            rows = [i for i, k in enumerate(clients) if plan.train[int(k)] == cid]
            w = self.num_samples[clients[rows]].astype(np.float64)
            agg = (w / w.sum()) @ trained[rows].astype(np.float64)
            self.models[cid] = agg.astype(np.float32)
        reports = ClientReports(
            clients=clients,
            losses=np.zeros((len(clients), 2)),
            num_samples=self.num_samples[clients],
            models=trained,
            cluster_models=dict(self.models),
        )
        update = self.alg.update(t, plan, reports)
        assert update.models == {}
        splits = update.splits
        for split in splits:
            for child in split.children:
                self.models[child] = self.models[split.parent].copy()
            del self.models[split.parent]
        return plan, reports, splits


def opposite_updates(groups: list[list[int]], K: int, scale: float = 2.0) -> np.ndarray:
    """Clients of group g move along +v_g·scale, clients of the others along −v_g: with two
    groups of equal weight the mean update is 0 and every update has norm ``scale``."""
    U = np.zeros((K, P))
    v = np.zeros(P)
    v[0] = 1.0
    sign = {k: (1.0 if g == 0 else -1.0) for g, members in enumerate(groups) for k in members}
    for k in range(K):
        U[k] = sign[k] * scale * v
    return U


def test_plan_is_full_participation_with_every_model_returned():
    alg = CFL(num_clients=5, clients_per_round=2, seed=0)
    plan = alg.plan(1)
    assert plan.train == dict.fromkeys(range(5), "0")
    assert plan.return_models == frozenset(range(5))
    assert list(alg.clusters()) == ["0"] and alg.clusters()["0"].tolist() == [0, 1, 2, 3, 4]


def test_build_algorithm_passes_the_thresholds():
    cfg = load_config(
        overrides=[
            'algorithm.name="cfl"',
            "algorithm.eps1=0.25",
            "algorithm.eps2=3.5",
            "algorithm.warmup=7",
        ]
    )
    alg = build_algorithm(cfg)
    assert isinstance(alg, CFL)
    assert (alg.eps1, alg.eps2, alg.warmup) == (0.25, 3.5, 7)
    assert alg.num_clients == cfg.data.num_clients


def test_splits_into_the_two_groups_with_global_ids_after_warmup():
    A, B = [0, 2, 5], [1, 3, 4]
    alg = CFL(num_clients=6, clients_per_round=6, seed=0, eps1=0.4, eps2=1.6, warmup=3)
    fed = Federation(alg, np.ones(6))
    U = opposite_updates([A, B], 6)
    for _ in range(3):  # rounds 1..3: within the warm-up
        assert fed.step(U)[2] == []
    assert alg.stats["0"]["mean_norm"] == pytest.approx(0.0, abs=1e-6)
    assert alg.stats["0"]["max_norm"] == pytest.approx(2.0, rel=1e-6)
    _, _, splits = fed.step(U)  # round 4 > warm-up
    assert len(splits) == 1
    split = splits[0]
    assert split.parent == "0"
    assert {c: m.tolist() for c, m in split.children.items()} == {"0.0": A, "0.1": B}
    assert split.info["labels"].tolist() == [0, 1, 0, 1, 1, 0]
    assert split.info["similarity"].shape == (6, 6)
    assert split.info["max_norm"][0] == pytest.approx(2.0, rel=1e-6)
    assert {c: m.tolist() for c, m in alg.clusters().items()} == {"0.0": A, "0.1": B}
    plan = alg.plan(5)
    assert plan.train == {0: "0.0", 2: "0.0", 5: "0.0", 1: "0.1", 3: "0.1", 4: "0.1"}
    # the children start the next round from the parent's aggregated model
    for child in ("0.0", "0.1"):
        assert np.array_equal(alg.start[child], fed.models[child])


def test_no_split_when_the_mean_update_is_large():
    A, B = [0, 1, 2], [3, 4]  # unequal groups: the mean update is (3 - 2) / 5 * 3 = 0.6
    alg = CFL(num_clients=5, clients_per_round=5, seed=0, eps1=0.4, eps2=1.6, warmup=0)
    fed = Federation(alg, np.ones(5))
    U = opposite_updates([A, B], 5, scale=3.0)
    for _ in range(4):
        assert fed.step(U)[2] == []
    assert alg.stats["0"]["mean_norm"] == pytest.approx(0.6, rel=1e-5)
    assert alg.stats["0"]["max_norm"] == pytest.approx(3.0, rel=1e-5)
    # weighted by sample counts the same updates average to 0 (3·2 = 2·3) and split
    alg = CFL(num_clients=5, clients_per_round=5, seed=0, eps1=0.4, eps2=1.6, warmup=0)
    fed = Federation(alg, np.array([2, 2, 2, 3, 3]))
    fed.step(U)
    splits = fed.step(U)[2]
    assert [m.tolist() for m in splits[0].children.values()] == [A, B]


def test_no_split_when_every_update_is_small():
    alg = CFL(num_clients=4, clients_per_round=4, seed=0, eps1=0.4, eps2=1.6, warmup=0)
    fed = Federation(alg, np.ones(4))
    U = opposite_updates([[0, 1], [2, 3]], 4, scale=1.5)  # max norm 1.5 < ε2
    for _ in range(3):
        assert fed.step(U)[2] == []
    U = opposite_updates([[0, 1], [2, 3]], 4, scale=1.7)
    assert len(fed.step(U)[2]) == 1


def test_first_round_is_not_tested_and_small_clusters_never_split():
    alg = CFL(num_clients=4, clients_per_round=4, seed=0, warmup=0)
    fed = Federation(alg, np.ones(4))
    U = opposite_updates([[0, 1], [2, 3]], 4)
    assert fed.step(U)[2] == [] and alg.stats == {}  # no start model yet
    assert len(fed.step(U)[2]) == 1
    # children of 2 members each: the criterion holds inside them too, but they stay
    V = np.zeros((4, P))
    V[[0, 2], 1] = 5.0
    V[[1, 3], 1] = -5.0
    for _ in range(3):
        assert fed.step(V)[2] == []
    assert alg.stats["0.0"]["max_norm"] == pytest.approx(5.0, rel=1e-6)
    assert sorted(alg.clusters()) == ["0.0", "0.1"]


def test_updates_are_measured_against_the_round_start_model():
    """ΔW_k = θ_k − θ_c(start of the round): with updates u_k the stats are those of u_k,
    whatever the cluster model has drifted to."""
    rng = np.random.default_rng(3)
    alg = CFL(num_clients=4, clients_per_round=4, seed=0, eps1=0.0, warmup=0)
    fed = Federation(alg, np.array([1, 2, 3, 4]))
    fed.step(rng.normal(size=(4, P)))
    for _ in range(3):
        U = rng.normal(size=(4, P))
        fed.step(U)
        mean_norm, max_norm, _ = split_criterion(U, [1, 2, 3, 4], 0.0, 0.0)
        assert alg.stats["0"]["mean_norm"] == pytest.approx(mean_norm, rel=1e-5)
        assert alg.stats["0"]["max_norm"] == pytest.approx(max_norm, rel=1e-5)


def test_second_level_split_keeps_global_client_ids():
    K = 8
    A, B = [0, 3, 5, 6], [1, 2, 4, 7]
    alg = CFL(num_clients=K, clients_per_round=K, seed=0, eps1=0.4, eps2=1.6, warmup=1)
    fed = Federation(alg, np.ones(K))
    U = opposite_updates([A, B], K)
    fed.step(U)
    splits = fed.step(U)[2]
    assert {c: m.tolist() for c, m in splits[0].children.items()} == {"0.0": A, "0.1": B}
    # inside A, {0, 6} and {3, 5} pull apart along another axis; B stays at rest
    V = np.zeros((K, P))
    V[[0, 6], 2] = 3.0
    V[[3, 5], 2] = -3.0
    splits = fed.step(V)[2]
    assert len(splits) == 1 and splits[0].parent == "0.0"
    children = {c: m.tolist() for c, m in splits[0].children.items()}
    # global ids, not positions within 0.0 (which would read [0, 3] and [1, 2])
    assert children == {"0.0.0": [0, 6], "0.0.1": [3, 5]}
    assert {c: m.tolist() for c, m in alg.clusters().items()} == {
        "0.0.0": [0, 6],
        "0.0.1": [3, 5],
        "0.1": B,
    }
    leaves, assignment = alg.assignment()
    assert leaves == ["0.0.0", "0.0.1", "0.1"]
    assert assignment.tolist() == [0, 2, 2, 1, 2, 1, 0, 2]


def test_state_round_trip_continues_identically():
    K = 8
    rng = np.random.default_rng(5)
    A, B = [0, 3, 5, 6], [1, 2, 4, 7]
    base = opposite_updates([A, B], K)

    inner = np.zeros((K, P))  # from round 6: {0, 6} and {3, 5} pull apart inside A
    inner[[0, 6], 2] = 3.0
    inner[[3, 5], 2] = -3.0

    def updates(t: int) -> np.ndarray:
        noise = np.random.default_rng(t).normal(scale=0.05, size=(K, P))
        return (base if t < 6 else inner) + noise

    alg = CFL(num_clients=K, clients_per_round=K, seed=0, warmup=3)
    fed = Federation(alg, rng.integers(5, 20, size=K))
    for t in range(1, 5):
        fed.step(updates(t))
    assert sorted(alg.clusters()) == ["0.0", "0.1"]  # split at round 4
    restored = CFL(num_clients=K, clients_per_round=K, seed=0, warmup=3)
    restore_from(restored, alg)
    twin = Federation(restored, fed.num_samples)
    twin.models = {c: m.copy() for c, m in fed.models.items()}
    twin.round = fed.round
    for t in range(5, 12):
        p1, _, s1 = fed.step(updates(t))
        p2, _, s2 = twin.step(updates(t))
        assert p1.train == p2.train
        assert [(s.parent, {c: m.tolist() for c, m in s.children.items()}) for s in s1] == [
            (s.parent, {c: m.tolist() for c, m in s.children.items()}) for s in s2
        ]
        assert alg.stats == restored.stats
    for cid in alg.start:
        assert np.array_equal(alg.start[cid], restored.start[cid])
    assert alg.rounds_seen == restored.rounds_seen == 11
    assert alg.clusters().keys() == restored.clusters().keys()
    assert sorted(alg.clusters()) == ["0.0.0", "0.0.1", "0.1"]  # 0.0 split again


def test_what_the_memory_check_counts_for_cfl():
    """Every member's model reaches the server every round (all K at the root), and a
    split's complete linkage holds about 48 bytes per pair of members at its peak."""
    params = CFL.Params()
    assert CFL.round_models(params, num_clients=2714, clients_per_round=10, num_params=99) == 2714
    assert CFL.working_pair_bytes(params) == 48 and CFL.pair_bytes == 8
    assert CFL.pair_memory(params, num_clients=100, clients_per_round=10, rounds=5) == 480_000

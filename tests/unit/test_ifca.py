"""IFCA (Ghosh et al., NeurIPS 2020): the argmin assignment and the IFCA class driven by
synthetic probe results. Expected values are written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from

from distfl.algorithms import build_algorithm
from distfl.algorithms.api.base import ClientReports, ProbeRequest
from distfl.algorithms.ifca import IFCA, assign_by_loss
from distfl.config import load

# ----------------------------------------------------------------------- assign_by_loss


def test_assign_by_loss_hand_values():
    losses = np.array(
        [
            [2.0, 1.0, 3.0],  # 1
            [0.5, 0.7, 0.6],  # 0
            [9.0, 8.0, 7.5],  # 2
            [1.0, 1.0 + 1e-12, 1.0 + 2e-12],  # 0 by a hair
        ]
    )
    got = assign_by_loss(losses)
    assert got.dtype == np.int64
    assert got.tolist() == [1, 0, 2, 0]


def test_assign_by_loss_ties_go_to_the_lowest_index():
    losses = np.array([[1.0, 1.0, 2.0], [3.0, 0.5, 0.5], [0.2, 0.2, 0.2]])
    assert assign_by_loss(losses).tolist() == [0, 1, 0]


def test_assign_by_loss_nan_never_wins():
    losses = np.array([[np.nan, 2.0], [1.0, np.nan], [np.nan, np.nan]])
    assert assign_by_loss(losses).tolist() == [1, 0, 0]


def test_assign_by_loss_one_model_and_no_clients():
    assert assign_by_loss(np.array([[4.0], [1.0]])).tolist() == [0, 0]
    assert assign_by_loss(np.zeros((0, 3))).shape == (0,)


@pytest.mark.parametrize("shape", [(3,), (2, 0), (1, 2, 2)])
def test_assign_by_loss_rejects_bad_shapes(shape):
    with pytest.raises(ValueError):
        assign_by_loss(np.zeros(shape))


# ------------------------------------------------------------------------ the IFCA class

K, M, CPR = 10, 3, 4
# client k is "of" model BEST[k]: its loss is lowest there
BEST = np.array([1, 1, 0, 2, 1, 0, 2, 2, 1, 0])


def _losses(clients: np.ndarray, best: np.ndarray = BEST) -> np.ndarray:
    """[n, M] losses: 1.0 under the client's best model, 2.0 + j under model j otherwise."""
    out = np.array([[2.0 + j for j in range(M)] for _ in clients])
    out[np.arange(len(clients)), best[clients]] = 1.0
    return out


def _reports(plan) -> ClientReports:
    clients = np.array(sorted(plan.train), dtype=np.int64)
    n = len(clients)
    return ClientReports(
        clients=clients, losses=np.ones((n, 2)), num_samples=np.full(n, 10, dtype=np.int64)
    )


def _round(alg: IFCA, t: int, best: np.ndarray = BEST):
    request = alg.plan_probe(t)
    alg.update_probe(t, request, _losses(request.clients, best))
    plan = alg.plan(t)
    return request, plan, alg.update(t, plan, _reports(plan))


def test_cluster_ids_and_initial_models():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    assert alg.initial_models() == {"0": 1, "1": 2, "2": 3}
    clusters = alg.clusters()
    assert sorted(clusters) == ["0", "1", "2"]
    assert all(len(members) == 0 for members in clusters.values())
    assert (alg.assign == -1).all()


def test_round_one_probes_every_client_over_every_model():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    request = alg.plan_probe(1)
    assert isinstance(request, ProbeRequest)
    assert request.clients.dtype == np.int64
    assert request.clients.tolist() == list(range(K))
    assert request.clusters == ["0", "1", "2"]


def test_clients_join_their_least_loss_cluster_and_train_from_it():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    _, plan, update = _round(alg, 1)
    # every client has its cluster after round 1, not only the trained ones
    assert alg.assign.tolist() == BEST.tolist()
    clusters = alg.clusters()
    assert clusters["0"].tolist() == [2, 5, 9]
    assert clusters["1"].tolist() == [0, 1, 4, 8]
    assert clusters["2"].tolist() == [3, 6, 7]
    leaves, index = alg.assignment()
    assert leaves == ["0", "1", "2"] and index.tolist() == BEST.tolist()
    # only clients_per_round of them train, each from the model of its cluster
    assert len(plan.train) == CPR
    assert all(cid == str(BEST[k]) for k, cid in plan.train.items())
    assert plan.return_models == frozenset()
    assert update.stats == {}  # the sizes are the run file's size column, not statistics


def test_later_rounds_probe_exactly_the_sampled_clients():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=5, num_clusters=M, init="random")
    _round(alg, 1)
    seen = set()
    for t in range(2, 12):
        request, plan, _ = _round(alg, t)
        clients = request.clients.tolist()
        assert len(clients) == CPR and len(set(clients)) == CPR
        assert clients == sorted(clients)
        assert sorted(plan.train) == clients  # the probed clients are the ones that train
        assert request.clusters == ["0", "1", "2"]
        seen.update(clients)
    assert len(seen) > CPR  # a fresh uniform sample each round, not a fixed set


def test_unsampled_clients_keep_their_assignment():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=1, num_clusters=M, init="random")
    _round(alg, 1)
    # every client now prefers model (BEST + 1) mod M; only the probed ones move
    moved = (BEST + 1) % M
    request, plan, _ = _round(alg, 2, best=moved)
    probed = request.clients
    others = np.setdiff1d(np.arange(K), probed)
    assert alg.assign[probed].tolist() == moved[probed].tolist()
    assert alg.assign[others].tolist() == BEST[others].tolist()
    assert all(cid == str(moved[k]) for k, cid in plan.train.items())


def test_empty_clusters_stay_listed():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    everyone_in_2 = np.full(K, 2)
    _, plan, update = _round(alg, 1, best=everyone_in_2)
    clusters = alg.clusters()
    assert sorted(clusters) == ["0", "1", "2"]
    assert clusters["0"].size == 0 and clusters["1"].size == 0
    assert clusters["2"].tolist() == list(range(K))
    assert set(plan.train.values()) == {"2"}
    leaves, index = alg.assignment()
    assert leaves == ["0", "1", "2"] and (index == 2).all()
    assert update.stats == {}


def test_plan_needs_the_rounds_probe():
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    with pytest.raises(RuntimeError):
        alg.plan(1)
    request = alg.plan_probe(1)
    with pytest.raises(ValueError):
        alg.update_probe(1, request, np.zeros((K, M + 1)))


def test_sampling_is_seeded():
    a = IFCA(num_clients=K, clients_per_round=CPR, seed=3, num_clusters=M, init="random")
    b = IFCA(num_clients=K, clients_per_round=CPR, seed=3, num_clusters=M, init="random")
    c = IFCA(num_clients=K, clients_per_round=CPR, seed=4, num_clusters=M, init="random")
    plans = [[sorted(_round(x, t)[1].train) for t in range(1, 8)] for x in (a, b, c)]
    assert plans[0] == plans[1]
    assert plans[0] != plans[2]


def test_state_round_trip_continues_identically():
    a = IFCA(num_clients=K, clients_per_round=CPR, seed=7, num_clusters=M, init="random")
    for t in range(1, 4):
        _round(a, t)
    state = a.state_dict()
    assert "assign" not in state  # the assignment is the tree's, saved in /hierarchy
    b = IFCA(num_clients=K, clients_per_round=CPR, seed=99, num_clusters=M, init="random")
    restore_from(b, a)
    assert b.assign.tolist() == a.assign.tolist()
    moved = (BEST + 2) % M
    for t in range(4, 9):
        ra, pa, _ = _round(a, t, best=moved)
        rb, pb, _ = _round(b, t, best=moved)
        assert ra.clients.tolist() == rb.clients.tolist()
        assert pa.train == pb.train
    assert a.assign.tolist() == b.assign.tolist()
    # the state does not alias the live arrays
    sampled = a._sampled.copy()
    a.state_dict()["sampled"][:] = -5
    assert a._sampled.tolist() == sampled.tolist()


def test_rejects_impossible_settings():
    with pytest.raises(ValueError):
        IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=0, init="random")
    with pytest.raises(ValueError):
        IFCA(num_clients=K, clients_per_round=K + 1, seed=0, num_clusters=M, init="random")


def test_state_survives_the_run_files_storage(tmp_path):
    a = IFCA(num_clients=K, clients_per_round=CPR, seed=11, num_clusters=M, init="random")
    for t in range(1, 3):
        _round(a, t)
    b = IFCA(num_clients=K, clients_per_round=CPR, seed=0, num_clusters=M, init="random")
    restore_from(b, a)
    for t in range(3, 7):
        assert _round(a, t)[1].train == _round(b, t)[1].train
    assert a.assign.tolist() == b.assign.tolist()


def test_built_from_the_config():
    config = load(
        overrides=[
            'algorithm.name="ifca"',
            "algorithm.num_clusters=3",
            "data.num_clients=10",
            "server.clients_per_round=4",
        ]
    )
    alg = build_algorithm(config)
    assert isinstance(alg, IFCA)
    assert (alg.num_clusters, alg.num_clients, alg.clients_per_round) == (3, 10, 4)
    assert alg.init == "kmeans++"  # the default: one initial model, seeded in round 1
    assert alg.initial_models() == {"0": 0, "1": 0, "2": 0}
    paper = build_algorithm(load(overrides=[*config_overrides(), 'algorithm.init="random"']))
    assert paper.initial_models() == {"0": 1, "1": 2, "2": 3}


def config_overrides() -> list[str]:
    return [
        'algorithm.name="ifca"',
        "algorithm.num_clusters=3",
        "data.num_clients=10",
        "server.clients_per_round=4",
    ]


def test_kmeanspp_start():
    """init = "kmeans++": round 1 has no probe, every client is in cluster 0, trains from it
    and sends its model; k-means on them gives the cluster models; round 2 probes every
    client, round 3 only the sampled ones."""
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=2, num_clusters=2, init="kmeans++")
    assert alg.plan_probe(1) is None
    assert alg.assign.tolist() == [0] * K
    plan = alg.plan(1)
    clients = np.array(sorted(plan.train))
    assert clients.tolist() == list(range(K))
    assert set(plan.train.values()) == {"0"} and plan.return_models == frozenset(plan.train)
    X = np.where(np.arange(K)[:, None] % 2 == 0, 3.0, -3.0) * np.ones((K, 5))
    reports = ClientReports(
        clients=clients, losses=np.ones((K, 2)), num_samples=np.full(K, 10),
        models=X.astype(np.float32),
    )  # fmt: skip
    models = alg.update(1, plan, reports).models
    assert sorted(models) == ["0", "1"]
    assert sorted(float(m[0]) for m in models.values()) == [-3.0, 3.0]
    assert alg.plan_probe(2).clients.tolist() == list(range(K))
    assert alg.plan_probe(3).clients.tolist() == alg._sampled.tolist()
    assert alg.update(3, alg.plan(3), _reports(alg.plan(3))).models == {}


def test_fedavg_rounds_before_the_seeding_round():
    """fedavg_rounds = 2: rounds 1 and 2 probe nobody, train the sampled clients on cluster
    0 without returning models, and copy its aggregated model to every other cluster;
    round 3 seeds (every client returns its model), round 4 probes every client."""
    alg = IFCA(num_clients=K, clients_per_round=CPR, seed=2, num_clusters=3, init="kmeans++",
               fedavg_rounds=2)  # fmt: skip
    for t in (1, 2):
        assert alg.plan_probe(t) is None
        assert alg.assign.tolist() == [0] * K
        plan = alg.plan(t)
        assert sorted(plan.train) == alg._sampled.tolist() and len(plan.train) == CPR
        assert set(plan.train.values()) == {"0"} and not plan.return_models
        mean = np.full(5, float(t), dtype=np.float32)
        reports = _reports(plan)
        reports.cluster_models = {"0": mean, "1": np.zeros(5), "2": np.zeros(5)}
        models = alg.update(t, plan, reports).models
        assert sorted(models) == ["1", "2"]
        assert all(np.array_equal(m, mean) for m in models.values())
    assert alg.plan_probe(3) is None
    plan = alg.plan(3)
    assert sorted(plan.train) == list(range(K)) and plan.return_models == frozenset(plan.train)
    X = np.repeat(np.array([[-3.0], [0.0], [3.0]]), [3, 3, 4], axis=0) * np.ones((K, 5))
    reports = ClientReports(
        clients=np.arange(K), losses=np.ones((K, 2)), num_samples=np.full(K, 10),
        models=X.astype(np.float32),
    )  # fmt: skip
    models = alg.update(3, plan, reports).models
    assert sorted(float(m[0]) for m in models.values()) == [-3.0, 0.0, 3.0]
    assert alg.plan_probe(4).clients.tolist() == list(range(K))


def test_fedavg_rounds_survive_a_restart_and_are_off_for_a_random_start():
    kw = dict(num_clients=K, clients_per_round=CPR, seed=5, num_clusters=2, init="kmeans++",
              fedavg_rounds=3)  # fmt: skip
    a = IFCA(**kw)
    for t in (1, 2):
        a.plan_probe(t)
        plan = a.plan(t)
        reports = _reports(plan)
        reports.cluster_models = {"0": np.ones(3), "1": np.zeros(3)}
        a.update(t, plan, reports)
    b = IFCA(**kw)
    restore_from(b, a)
    for alg in (a, b):  # round 3 is still FedAvg, round 4 seeds
        assert alg.plan_probe(3) is None and not alg.plan(3).return_models
    assert a._sampled.tolist() == b._sampled.tolist()
    assert IFCA(**{**kw, "init": "random"}).fedavg_rounds == 0
    with pytest.raises(ValueError, match="fedavg_rounds"):
        IFCA(**{**kw, "fedavg_rounds": -1})


def test_fedavg_rounds_from_the_config_and_old_files():
    alg = build_algorithm(load(overrides=[*config_overrides(), "algorithm.fedavg_rounds=4"]))
    assert alg.fedavg_rounds == 4
    assert build_algorithm(load(overrides=config_overrides())).fedavg_rounds == 0


def test_the_seeding_round_is_what_the_memory_check_counts():
    """k-means++ seeding asks up to 2,048 clients (and 1 GiB of float32 models) for their
    models in one round; a random start never more than the round's clients."""
    kmeans = IFCA.Params(num_clusters=2)
    count = IFCA.round_models
    assert count(kmeans, num_clients=2714, clients_per_round=10, num_params=4810) == 2048
    assert count(kmeans, num_clients=300, clients_per_round=10, num_params=4810) == 300
    assert count(kmeans, num_clients=2714, clients_per_round=10, num_params=1 << 20) == 256
    random = IFCA.Params(num_clusters=2, init="random")
    assert count(random, num_clients=2714, clients_per_round=10, num_params=4810) == 10

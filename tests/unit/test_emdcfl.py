"""EMD-CFL's pure math: projections, W1, mutual adjacency, neighbourhood clusters, rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from distfl.algorithms.base import ClientReports, RoundPlan
from distfl.algorithms.emdcfl import (
    EMDCFL,
    embed_size,
    mutual_adjacency,
    neighbourhood_clusters,
    projected_dim,
    projection,
    protocol_bytes,
    wasserstein1,
)
from distfl.algorithms.emdcfl_client import embed_sets, emd_row, last_linear_inputs
from distfl.models import MLP


def test_projection_is_shared_by_the_pair_and_private_to_it():
    r = projection(10, 0.9, seed=3, a=2, b=5)
    assert r.shape == (10, 9)
    assert np.array_equal(r, projection(10, 0.9, seed=3, a=5, b=2))
    assert not np.array_equal(r, projection(10, 0.9, seed=3, a=2, b=6))
    assert not np.array_equal(r, projection(10, 0.9, seed=4, a=2, b=5))
    assert projection(3, 0.1, seed=0, a=0, b=1).shape == (3, 1)


def test_projection_nearly_preserves_distances_on_average():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 64))
    r = projection(64, 0.9, seed=1, a=0, b=1)
    d0 = np.linalg.norm(x[:25] - x[25:], axis=1)
    d1 = np.linalg.norm((x[:25] - x[25:]) @ r, axis=1)
    assert np.mean(d1 / d0) == pytest.approx(1.0, abs=0.1)


def test_w1_matches_scipy_in_one_dimension():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(30), rng.standard_normal(20) + 0.7
    assert wasserstein1(x[:, None], y[:, None]) == pytest.approx(wasserstein_distance(x, y))


def test_w1_hand_computed_and_sinkhorn_close():
    x = np.array([[0.0, 0.0], [1.0, 0.0]])
    y = np.array([[0.0, 3.0], [1.0, 3.0]])
    assert wasserstein1(x, y) == pytest.approx(3.0)
    assert wasserstein1(x, x) == pytest.approx(0.0)
    assert wasserstein1(x, y, solver="sinkhorn", reg=0.01) == pytest.approx(3.0, rel=1e-3)


def test_mutual_adjacency_needs_both_directions():
    d = np.array([[-0.1, 0.01, 0.5], [0.03, -0.2, 0.01], [0.5, 0.02, 0.0]])
    m = mutual_adjacency(d, 0.025)
    expected = np.array([[1, 0, 0], [0, 1, 1], [0, 1, 1]], dtype=bool)
    assert np.array_equal(m, expected)  # (0, 1) is 0.01 one way but 0.03 the other


def test_neighbourhood_clusters_group_identical_rows():
    m = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=bool)
    assert neighbourhood_clusters(m).tolist() == [0, 0, 1, 1]
    m[1, 2] = m[2, 1] = True  # a bridge between 1 and 2 makes every row differ
    assert neighbourhood_clusters(m).tolist() == [0, 1, 2, 3]


def test_embed_sets_are_disjoint_and_deterministic():
    e, v = embed_sets(60, 512, seed=0, client=4)
    assert len(e) == len(v) == 30 and not set(e) & set(v)
    e2, v2 = embed_sets(60, 512, seed=0, client=4)
    assert np.array_equal(e, e2) and np.array_equal(v, v2)
    assert len(embed_sets(1000, 100, seed=0, client=0)[0]) == 100
    assert not np.array_equal(embed_sets(60, 512, seed=0, client=5)[0], e)


def test_last_linear_inputs_is_the_penultimate_layer():
    torch.manual_seed(0)
    model = MLP((1, 4, 4), 3, (5, 7))
    x = torch.randn(6, 1, 4, 4)
    net = model.net
    manual = net[4](net[3](net[2](net[1](net[0](x)))))  # flatten, lin, relu, lin, relu
    assert torch.allclose(last_linear_inputs(model, x), manual)


def test_emd_row_own_entry_is_minus_tau_and_identical_data_gives_minus_tau():
    torch.manual_seed(1)
    model = MLP((1, 4, 4), 3, (8,))
    rng = torch.Generator().manual_seed(2)
    a = torch.rand(20, 1, 4, 4, generator=rng)
    b = torch.rand(20, 1, 4, 4, generator=rng) + 2.0  # another distribution
    val = torch.rand(20, 1, 4, 4, generator=rng)
    row = emd_row(
        model, 0, {0: a, 1: a.clone(), 2: b}, val, ratio=1.0, seed=0, solver="exact", reg=0.05
    )
    z = last_linear_inputs(model, a).double().numpy()
    tau = wasserstein1(z, last_linear_inputs(model, val).double().numpy())
    assert row[0] == pytest.approx(-tau)
    assert row[1] == pytest.approx(-tau)  # the same samples: W1 of the projections is 0
    assert row[2] > row[1] + 0.1


def reports(clients):
    clients = np.asarray(clients, dtype=np.int64)
    return ClientReports(clients, np.zeros((len(clients), 2)), np.ones(len(clients), np.int64))


def test_class_splits_the_root_once_from_the_probe_and_samples_per_cluster():
    algo = EMDCFL(num_clients=6, clients_per_round=3, seed=0, epsilon=0.1)
    req = algo.plan_probe(1)
    assert req.op == "distances" and req.clients.tolist() == list(range(6))
    assert algo.plan_probe(2) is None
    g = np.array([0, 0, 1, 1, 1, 0])
    d = np.where(g[:, None] == g[None, :], -0.05, 0.4)
    algo.update_probe(1, req, d)
    plan = algo.plan(1)
    assert set(plan.train.values()) == {"0"} and len(plan.train) == 3
    (split,) = algo.update(1, plan, reports(sorted(plan.train))).splits
    assert split.parent == "0"
    assert {k: v.tolist() for k, v in split.children.items()} == {
        "0.0": [0, 1, 5],
        "0.1": [2, 3, 4],
    }
    assert algo.update(2, plan, reports([])).splits == []
    plan2 = algo.plan(2)
    for k, cid in plan2.train.items():
        assert k in split.children[cid]
    assert sorted(plan2.train.values()).count("0.0") == 2  # round(0.5 · 3)


def test_one_neighbourhood_means_no_split_and_state_round_trip():
    algo = EMDCFL(num_clients=4, clients_per_round=2, seed=5, epsilon=1.0)
    algo.update_probe(1, algo.plan_probe(1), np.zeros((4, 4)))
    assert algo.update(1, RoundPlan(1, {0: "0"}), reports([0])).splits == []
    other = EMDCFL(num_clients=4, clients_per_round=2, seed=5, epsilon=1.0)
    other.tree.restore(algo.tree.to_nodes())
    other.load_state_dict(algo.state_dict())
    assert other.plan(2).train == algo.plan(2).train


def test_protocol_bytes_hand_computed():
    # two clients: m = (5, 3) samples per side, 9 projected columns of 10, 100 parameters;
    # downloads 2·400, model swap 2·400, embeddings 2·(n−1)·(5+3)·9·4, τ 2·8
    got = protocol_bytes(np.array([10, 7]), num_params=100, embed_dim=10, samples=512, ratio=0.9)
    assert got == 800 + 800 + 576 + 16
    assert embed_size(np.array([1, 10, 5000]), 512).tolist() == [1, 5, 512]
    assert projected_dim(10, 0.9) == 9 and projected_dim(3, 0.1) == 1

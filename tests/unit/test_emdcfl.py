"""EMD-CFL's pure math: projections, W1, mutual adjacency, neighbourhood clusters, rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from distfl.algorithms.api.base import ClientReports, RoundPlan
from distfl.algorithms.emdcfl import (
    EMDCFL,
    anchor_adjacency,
    draw_anchors,
    embed_size,
    mutual_adjacency,
    neighbourhood_clusters,
    one_shot_cost,
    pair_seconds,
    projected_dim,
    projection,
    protocol_bytes,
    refusal,
    sample_seconds,
    wasserstein1,
)
from distfl.algorithms.emdcfl.algorithm import ENTRY_SECONDS, PAIR_SECONDS
from distfl.algorithms.emdcfl.client import embed_sets, emd_row
from distfl.models import MLP, last_linear_inputs


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


# -- the anchors' approximation and the one-shot round's cost -------------------------------


def test_anchor_adjacency_with_every_client_an_anchor_is_the_mutual_adjacency():
    rng = np.random.default_rng(4)
    d = rng.uniform(-0.1, 0.3, (7, 7))
    everyone = np.arange(7)
    m = anchor_adjacency(d[:, everyone], d[everyone, :].T, everyone, 0.1)
    assert np.array_equal(m, mutual_adjacency(d, 0.1))
    # two anchors of three groups' clients: the columns of the exact adjacency, and the
    # neighbourhoods among them are the groups' when every group holds an anchor
    anchors = np.array([1, 4])
    got = anchor_adjacency(d[:, anchors], d[anchors, :].T, anchors, 0.1)
    assert np.array_equal(got, mutual_adjacency(d, 0.1)[:, anchors])
    g = np.array([0, 0, 0, 1, 1, 1, 2])
    blocks = np.where(g[:, None] == g[None, :], -0.05, 0.4)
    m = anchor_adjacency(blocks[:, anchors], blocks[anchors, :].T, anchors, 0.1)
    assert neighbourhood_clusters(m).tolist() == [0, 0, 0, 1, 1, 1, 2]
    # a group without an anchor: its clients have no neighbour among the anchors
    m = anchor_adjacency(blocks[:, [1]], blocks[[1], :].T, np.array([1]), 0.1)
    assert neighbourhood_clusters(m).tolist() == [0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError):
        anchor_adjacency(d[:, :2], d[:, :3], anchors, 0.1)


def test_draw_anchors_is_a_seeded_uniform_choice():
    a = draw_anchors(100, 8, seed=3)
    assert a.tolist() == sorted(set(a.tolist())) and len(a) == 8 and a.max() < 100
    assert np.array_equal(a, draw_anchors(100, 8, seed=3))
    assert not np.array_equal(a, draw_anchors(100, 8, seed=4))
    assert draw_anchors(5, 5, seed=0).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        draw_anchors(5, 6, seed=0)


def test_protocol_bytes_with_every_client_an_anchor_is_every_pair():
    n = np.array([10, 7, 30, 12])
    kw = {"num_params": 100, "embed_dim": 10, "samples": 512, "ratio": 0.9}
    assert protocol_bytes(n, anchors=np.arange(4), **kw) == protocol_bytes(n, **kw)
    # anchor 0 of three clients: pairs (0, 1), (0, 2) and back; m = (5, 3, 15)
    got = protocol_bytes(n[:3], anchors=np.array([0]), **kw)
    assert got == 3 * 400 + 4 * 400 + 2 * (2 * 5 + 3 + 15) * 9 * 4 + 3 * 8


def test_one_shot_cost_counts_pairs_and_their_samples():
    # two groups: 3 clients of 60 train samples (30 a side), 1 of 10 (5 a side)
    cost = one_shot_cost([3, 1], [60, 10], samples=512, anchors=0, solver="exact", sample_s=0.0)
    assert cost.pairs == 12 and (cost.low, cost.high) == (5, 30)
    share = np.array([0.75, 0.25])
    m = np.array([30.0, 5.0])
    mean = share @ (PAIR_SECONDS["exact"] + ENTRY_SECONDS["exact"] * np.outer(m, m)) @ share
    assert cost.pair_s == pytest.approx(mean) and cost.seconds == pytest.approx(12 * mean)
    assert one_shot_cost([3, 1], [60, 10], samples=4, anchors=0, solver="exact",
                         sample_s=0.0).high == 4  # fmt: skip
    anchored = one_shot_cost([3, 1], [60, 10], samples=512, anchors=2, solver="exact",
                             sample_s=0.0)  # fmt: skip
    assert anchored.pairs == 2 * 2 * 3
    # what fits: K(K − 1) pairs, or 2·L·K
    assert cost.fitting_clients(12 * cost.pair_s) == 4
    assert cost.fitting_clients(11.9 * cost.pair_s) == 3
    assert cost.fitting_anchors(8 * cost.pair_s) == 1
    assert pair_seconds(10, 20, solver="exact", sample_s=1e-3) == pytest.approx(
        PAIR_SECONDS["exact"] + ENTRY_SECONDS["exact"] * 200 + 20e-3
    )
    assert sample_seconds("cnn", (3, 32, 32), 10) == pytest.approx(2.1e-3)
    assert sample_seconds("lenet5", (1, 28, 28), 62) == pytest.approx(150e-6 * 784 / 1024)
    assert sample_seconds("mlp", (2,), 2, hidden=(64,)) == pytest.approx(
        0.5e-6 + 0.25e-9 * (2 * 64 + 64 * 2)
    )
    assert sample_seconds("mlp", (1, 8, 8), 10, hidden=(32,)) == pytest.approx(
        0.5e-6 + 0.25e-9 * (64 * 32 + 32 * 10)
    )


def test_refusal_names_the_key_and_what_fits():
    cost = one_shot_cost([2714], [60], samples=512, anchors=0, solver="exact", sample_s=1e-6)
    assert refusal(cost, 0.0) is None  # no limit
    assert refusal(cost, cost.seconds / 3600) is None
    line = refusal(cost, 1.0)
    assert line.startswith("data.num_clients = 2714: ") and "\n" not in line
    fits = cost.fitting_clients(3600)
    assert f"at most about {fits:,} clients fit" in line
    assert f"algorithm.anchors = L ≤ {cost.fitting_anchors(3600):,} " in line
    anchored = one_shot_cost([2714], [60], samples=512, anchors=2000, solver="exact",
                             sample_s=1e-6)  # fmt: skip
    line = refusal(anchored, 1.0)
    assert line.startswith("algorithm.anchors = 2000: ")
    assert f"at most {anchored.fitting_anchors(3600):,} anchors fit" in line


def test_config_check_refuses_before_round_one_and_old_files_run_unlimited():
    from distfl.config import build
    from distfl.errors import ConfigError

    def raw(**algorithm):
        return {
            "data": {"num_clients": 2714, "samples_per_client": 80},
            "algorithm": {"name": "emdcfl", **algorithm},
        }

    with pytest.raises(ConfigError, match=r"^data\.num_clients = 2714: EMD-CFL's one-shot"):
        build(raw())
    assert build(raw(anchors=64)).algorithm.params.anchors == 64
    assert build(raw(max_hours=0)).algorithm.params.max_hours == 0
    stored = build(raw(), stored=True).algorithm.params  # written before the estimate
    assert (stored.anchors, stored.max_hours) == (0, 0.0)
    with pytest.raises(ConfigError, match=r"algorithm\.anchors = 2714: must be"):
        build(raw(anchors=2714))
    small = build({"data": {"num_clients": 40}, "algorithm": {"name": "emdcfl"}})
    assert small.algorithm.params.max_hours == 1.0
    # the gathered K×K rows count against the memory, the anchors' K×2L do not
    assert EMDCFL.working_pair_bytes(small.algorithm.params) == 16
    assert EMDCFL.working_pair_bytes(build(raw(anchors=64)).algorithm.params) == 0


def test_emd_row_of_some_clients_is_in_ascending_client_order():
    torch.manual_seed(1)
    model = MLP((1, 4, 4), 3, (8,))
    rng = torch.Generator().manual_seed(2)
    x = {c: torch.rand(10, 1, 4, 4, generator=rng) + c for c in range(5)}
    val = torch.rand(10, 1, 4, 4, generator=rng)
    kw = {"ratio": 0.9, "seed": 0, "solver": "exact", "reg": 0.05}
    full = emd_row(model, 2, x, val, **kw)
    some = emd_row(model, 2, {c: x[c] for c in (4, 0, 2)}, val, **kw)
    assert np.array_equal(some, full[[0, 2, 4]])


def test_anchor_run_plans_a_row_of_2l_and_splits_by_the_anchors():
    algo = EMDCFL(num_clients=6, clients_per_round=3, seed=0, epsilon=0.1, anchors=2)
    req = algo.plan_probe(1)
    assert req.width == 4 and req.clients.tolist() == list(range(6))
    anchors = algo.anchors
    assert np.array_equal(anchors, draw_anchors(6, 2, 0))
    g = np.array([0, 0, 1, 1, 1, 0])
    g[anchors] = [0, 1]  # one anchor in each group
    d = np.where(g[:, None] == g[None, :], -0.05, 0.4)
    algo.update_probe(1, req, np.concatenate([d[:, anchors], d[anchors, :].T], axis=1))
    (split,) = algo.update(1, algo.plan(1), reports([0])).splits
    assert sorted(m.tolist() for m in split.children.values()) == sorted(
        np.flatnonzero(g == i).tolist() for i in (0, 1)
    )
    root = algo.tree["0"].datasets
    assert np.array_equal(root["anchors"], anchors) and root["anchor_distances"].shape == (6, 4)
    assert "distances" not in root

"""FedCE's association and soft aggregation (EMD-CFL's implementation of Cai et al., ACM MM
2023) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distfl.algorithms.api.base import ClientReports, ProbeRequest
from distfl.algorithms.fedce import FedCE, association, batch_means, soft_aggregate


def test_batch_means_of_consecutive_batches():
    losses = np.array([[1.0, 3.0, 5.0, 7.0, 10.0]])
    assert batch_means(losses, 2).tolist() == [[2.0, 6.0, 10.0]]
    assert batch_means(losses, 5).tolist() == [[5.2]]
    assert batch_means(losses, 64).tolist() == [[5.2]]


def test_association_by_hand():
    vectors = np.array([[2.0, 2.0], [1.0, 1.0], [3.0, 5.0]])  # L = 2, 1, 4: cluster 1
    L, inc = association(vectors, delta=0.5)
    assert L.tolist() == [2.0, 1.0, 4.0]
    assert inc[1] == 1.0
    assert inc[0] == pytest.approx(math.exp(-0.5 * math.sqrt(2.0)), rel=1e-15)
    assert inc[2] == pytest.approx(math.exp(-0.5 * math.sqrt(4.0 + 16.0)), rel=1e-15)
    # the code's prefix counts: L = (2, 1, 4) has prefix argmins 0, 1, 1
    _, prefix = association(vectors, delta=0.5, prefix_counts=True)
    assert prefix[0] == pytest.approx(1.0 + inc[0]) and prefix[1] == 2.0
    assert prefix[2] == inc[2]
    # a NaN loss never wins and adds nothing
    L, inc = association(np.array([[np.nan], [3.0]]), delta=0.5)
    assert inc.tolist() == [0.0, 1.0]


def test_soft_aggregate_by_hand():
    h = np.array([[0.0, 2.0], [1.0, 0.0]])  # two clients, two clusters
    W = np.array([[1.0, 0.0], [0.0, 1.0]])
    out = soft_aggregate(h, W)
    a = math.exp(0.0) / (math.exp(0.0) + math.exp(1.0))  # client 0's share of cluster 0
    b = math.exp(2.0) / (math.exp(2.0) + math.exp(0.0))  # client 0's share of cluster 1
    assert out[0] == pytest.approx([a, 1 - a], rel=1e-15)
    assert out[1] == pytest.approx([b, 1 - b], rel=1e-15)
    # histories of a thousand rounds do not overflow (the code's float32 softmax would)
    big = soft_aggregate(np.array([[1000.0], [999.0]]), W)
    e = 1.0 / (1.0 + math.exp(-1.0))
    assert big[0] == pytest.approx([e, 1 - e], rel=1e-12)


def test_fedce_round_trains_the_least_loss_cluster_and_mixes_every_cluster():
    alg = FedCE(num_clients=6, clients_per_round=3, seed=2, num_clusters=2)
    request = alg.plan_probe(1)
    assert isinstance(request, ProbeRequest) and request.row_width() == 4
    ks = request.clients.tolist()
    rows = np.array([[1.0, 2.0, 1.0, 0.5], [3.0, 2.0, 0.25, 1.0], [np.nan, 1.0, 0.0, 1.0]])
    alg.update_probe(1, request, rows)
    plan = alg.plan(1)
    assert plan.train == {ks[0]: "0", ks[1]: "1", ks[2]: "1"}
    assert plan.return_models == frozenset(ks)
    assert alg.history[ks].tolist() == rows[:, 2:].tolist()
    models = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], dtype=np.float32)
    reports = ClientReports(clients=np.array(ks), losses=np.zeros((3, 1)),
                            num_samples=np.ones(3, dtype=np.int64), models=models)  # fmt: skip
    update = alg.update(1, plan, reports)
    expected = soft_aggregate(rows[:, 2:], models)
    for j, cid in enumerate(["0", "1"]):
        assert update.models[cid] == pytest.approx(expected[j].astype(np.float32))
    again = FedCE(num_clients=6, clients_per_round=3, seed=2, num_clusters=2)
    again.load_state_dict(alg.state_dict())
    assert np.array_equal(again.history, alg.history)
    assert again.plan_probe(2).clients.tolist() == alg.plan_probe(2).clients.tolist()

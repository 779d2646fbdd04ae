"""The oracle: the ground-truth groups as clusters, per-cluster sampling at the federation's
participation rate. Expected values are written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from

from distfl.algorithms import build_algorithm
from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.common.sampling import sample_sizes
from distfl.algorithms.oracle import Oracle
from distfl.config import load

GROUPS = np.array([1, 0, 0, 2, 1, 1, 0, 1, 2, 1], dtype=np.int64)
# group 0: clients 1, 2, 6; group 1: 0, 4, 5, 7, 9; group 2: 3, 8


def _oracle(cpr: int = 3, seed: int = 0, groups=GROUPS) -> Oracle:
    return Oracle(num_clients=len(groups), clients_per_round=cpr, seed=seed, groups=groups)


def test_clusters_are_the_groups_from_round_zero():
    alg = _oracle()
    clusters = alg.clusters()
    assert sorted(clusters) == ["0", "1", "2"]
    assert clusters["0"].tolist() == [1, 2, 6]
    assert clusters["1"].tolist() == [0, 4, 5, 7, 9]
    assert clusters["2"].tolist() == [3, 8]
    assert alg.initial_models() == {"0": 0, "1": 0, "2": 0}
    leaves, index = alg.assignment()
    assert leaves == ["0", "1", "2"] and index.tolist() == GROUPS.tolist()


def test_sample_sizes_by_hand():
    sizes = np.array([3, 5, 2, 0])
    # rho = 3/10: 0.9 -> 1, 1.5 -> 2 (halves up), 0.6 -> 1, empty -> 0
    assert sample_sizes(sizes, 3, 10).tolist() == [1, 2, 1, 0]
    # rho = 1/10: 0.3, 0.5, 0.2 -> at least 1 each; 0.5 rounds up to 1 as well
    assert sample_sizes(sizes, 1, 10).tolist() == [1, 1, 1, 0]
    # rho = 7/10: 2.1 -> 2, 3.5 -> 4, 1.4 -> 1
    assert sample_sizes(sizes, 7, 10).tolist() == [2, 4, 1, 0]
    # rho = 1: everyone, never more than |C|
    assert sample_sizes(sizes, 10, 10).tolist() == [3, 5, 2, 0]


def test_each_cluster_samples_its_share_of_its_own_members():
    alg = _oracle(cpr=7)  # sizes [2, 4, 1] as above
    for t in range(1, 20):
        plan = alg.plan(t)
        assert plan.round == t
        assert list(plan.train) == sorted(plan.train)
        per_cluster = {c: [k for k, cid in plan.train.items() if cid == c] for c in "012"}
        assert [len(per_cluster[c]) for c in "012"] == [2, 4, 1]
        for c, ks in per_cluster.items():
            assert all(GROUPS[k] == int(c) for k in ks)
        alg.update(t, plan, ClientReports(np.zeros(0, np.int64), np.zeros((0, 1)), np.zeros(0)))
        assert alg.clusters()["1"].tolist() == [0, 4, 5, 7, 9]  # never changes


def test_sampling_is_seeded_and_varies_over_rounds():
    a, b, c = _oracle(seed=4), _oracle(seed=4), _oracle(seed=5)
    pa = [sorted(a.plan(t).train) for t in range(1, 10)]
    pb = [sorted(b.plan(t).train) for t in range(1, 10)]
    pc = [sorted(c.plan(t).train) for t in range(1, 10)]
    assert pa == pb
    assert pa != pc
    assert len({tuple(p) for p in pa}) > 1


def test_state_round_trip_continues_identically():
    a = _oracle(cpr=4, seed=2)
    for t in range(1, 4):
        a.plan(t)
    b = _oracle(cpr=4, seed=77)
    restore_from(b, a)
    for t in range(4, 10):
        assert a.plan(t).train == b.plan(t).train


def test_group_ids_need_not_be_contiguous_or_ordered():
    groups = np.array([3, 0, 3, 0])
    alg = _oracle(cpr=2, groups=groups)
    assert {c: m.tolist() for c, m in alg.clusters().items()} == {"0": [1, 3], "3": [0, 2]}
    plan = alg.plan(1)
    assert sorted(plan.train.values()) == ["0", "3"]


def test_rejects_bad_groups():
    with pytest.raises(ValueError):
        _oracle(groups=np.array([0, -1, 0]))
    with pytest.raises(ValueError):
        Oracle(num_clients=4, clients_per_round=2, seed=0, groups=np.array([0, 1]))


def test_built_from_the_config_with_the_partitions_groups():
    config = load(
        overrides=['algorithm.name="oracle"', "data.num_clients=10", "server.clients_per_round=3"]
    )
    alg = build_algorithm(config, groups=GROUPS)
    assert isinstance(alg, Oracle)
    assert alg.clusters()["2"].tolist() == [3, 8]
    with pytest.raises(ValueError):
        build_algorithm(config)

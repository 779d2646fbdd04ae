"""Newcomers (data.held_out): how many of each group, the partition that draws them after
every trained client (the trained clients' samples unchanged), each family's rule on hand-made
answers (the hard loss argmin, the soft mixture weights by EM, the one global model, the
oracle's group), and what the config refuses in one line."""

from __future__ import annotations

import numpy as np
import pytest

from distfl import config as C
from distfl.algorithms import api
from distfl.algorithms.common.mixture import (
    log_likelihood,
    newcomer_weights,
    responsibilities,
)
from distfl.config.held_out import held_out_counts
from distfl.data import make_partition
from distfl.datasets.digits import load_digits_dataset
from distfl.errors import ConfigError
from distfl.plugins import ALGORITHMS


@pytest.mark.parametrize(
    ("held_out", "counts", "expected"),
    [
        (0.0, (10, 7), (0, 0)),
        (0.2, (10, 7), (2, 1)),  # 2.0, 1.4
        (0.25, (10, 2), (3, 1)),  # 2.5 rounds up, 0.5 too
        (0.1, (4, 20), (0, 2)),  # 0.4 rounds down: none of the first group
        (3.0, (10, 1), (3, 3)),  # a count: that many more of each group
    ],
)
def test_held_out_counts_by_hand(held_out, counts, expected):
    assert held_out_counts(held_out, counts) == expected


def _config(**data) -> C.Config:
    raw = {"data": {"num_clients": 9, "samples_per_client": 40, **data,
                    "groups": [{"count": 5, "alpha": 0.5}, {"count": 4, "alpha": 1000.0,
                                                            "rotation": 90.0}]},
           "algorithm": {"name": "ifca"}, "server": {"clients_per_round": 3}}  # fmt: skip
    return C.build(raw)


@pytest.mark.parametrize("draw", ["per_client", "sequential"])
@pytest.mark.parametrize("skew", [0.0, 0.5])
def test_the_trained_clients_keep_their_samples_and_the_newcomers_follow(draw, skew):
    dataset = load_digits_dataset()
    plain = make_partition(_config(draw=draw, quantity_skew=skew), dataset).eager()
    held = make_partition(_config(draw=draw, quantity_skew=skew, held_out=0.4), dataset).eager()
    assert plain.num_clients == 9 and held.num_clients == 9 + 2 + 2  # round(2.0), round(1.6)
    for k in range(9):
        for a, b in zip(plain.indices(k), held.indices(k), strict=True):
            assert np.array_equal(a, b)
    assert np.array_equal(held.group, [0] * 5 + [1] * 4 + [0, 0, 1, 1])
    # the newcomers hold samples of their own: none of the trained clients' in the pools'
    # first pass (digits has 1,797 samples, the federation 9 × 40 + 4 × 40)
    trained = np.concatenate([np.concatenate(held.indices(k)) for k in range(9)])
    for k in range(9, 13):
        mine = np.concatenate(held.indices(k))
        assert len(mine) >= 2 and not np.isin(mine, trained).any()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"data": {"held_out": 1.5}}, "data.held_out = 1.5: allowed are 0 (none), a share"),
        ({"data": {"held_out": -0.1}}, "data.held_out = -0.1: allowed are"),
        ({"data": {"held_out": 0.01}}, "data.held_out = 0.01: holds out no client"),
        ({"data": {"held_out": 0.2}, "algorithm": {"name": "emdcfl"}},
         "data.held_out = 0.2: algorithm.name = 'emdcfl' gives a client that never trained no "
         "model"),
        ({"data": {"held_out": 1, "groups": [{"count": 4, "partition": "shards",
                                               "shards_per_client": 2}]}},
         "data.held_out = 1: data.groups[0] deals all of its samples"),
    ],
)  # fmt: skip
def test_what_the_config_refuses_in_one_line(change, expected):
    raw = {"data": {"num_clients": 4, "samples_per_client": 40,
                    "groups": [{"count": 4, "alpha": 1.0}]},
           "algorithm": {"name": "ifca"}, "server": {"clients_per_round": 2}}  # fmt: skip
    for section, keys in change.items():
        raw[section] = {**raw[section], **keys}
    with pytest.raises(ConfigError) as err:
        C.build(raw)
    assert str(err.value).startswith(expected)
    assert "\n" not in str(err.value)


def test_every_algorithm_either_states_its_rule_or_is_refused():
    able = {n for n in ALGORITHMS.names() if ALGORITHMS.get(n).newcomers}
    assert {"none", "fedavg_ft", "oracle", "ifca", "fedem", "fedsoft"} <= able
    assert not able & {"fedgwc", "emdcfl", "local", "fedrc", "cfl"}
    for name in able:  # one whose rule is declared places newcomers
        cls = ALGORITHMS.get(name)
        assert cls.place_newcomers is not api.ClusteringAlgorithm.place_newcomers, name


def _ifca(**kw):
    return ALGORITHMS.get("ifca")(num_clients=6, clients_per_round=2, seed=0, num_clusters=3,
                                  init="random", **kw)  # fmt: skip


def test_the_hard_rule_least_train_loss_by_hand():
    """IFCA: the cluster of least loss; a NaN loss never wins, ties go to the lowest index."""
    ifca = _ifca()
    clients = np.array([6, 7, 8, 9])
    request = ifca.newcomer_probe(clients)
    assert request.op == "losses" and request.clusters == ["0", "1", "2"]
    assert np.array_equal(request.clients, clients)
    losses = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [np.nan, 5.0, 5.0], [2.0, 2.0, 0.5]])
    placed = ifca.place_newcomers(clients, np.zeros(4, np.int64), losses)
    assert placed.clusters == ["0", "1", "1", "2"] and placed.rows is None
    # nothing of its state changes: the trained clients' tree is as it was
    assert (ifca.tree.assignment()[1] == -1).all()


def test_the_soft_rule_mixture_weights_by_hand():
    """EM on π alone: component 0 explains samples 0 and 1 (e^-ℓ = 1) and not sample 2
    (e^-ℓ = 0), component 1 the reverse: the likelihood (π0)²(π1) peaks at π = (2/3, 1/3)."""
    losses = np.array([[0.0, 0.0, np.inf], [np.inf, np.inf, 0.0]])
    pi = newcomer_weights(losses)
    assert np.allclose(pi, [2 / 3, 1 / 3], atol=1e-12)
    # a fixed point: one more EM step leaves it
    assert np.allclose(responsibilities(pi, losses).mean(axis=1), pi, atol=1e-12)
    # components that explain every sample alike leave the weights where they start
    assert np.array_equal(newcomer_weights(np.ones((3, 5))), np.full(3, 1 / 3))
    # 1 and 2 equal, 0 worse on every sample: π flows away from 0 toward an even 1, 2
    pi = newcomer_weights(np.array([[3.0, 3.0], [1.0, 1.0], [1.0, 1.0]]))
    assert pi[0] < 1e-6 and abs(pi[1] - pi[2]) < 1e-12
    fedem = ALGORITHMS.get("fedem")(num_clients=4, clients_per_round=2, seed=0, num_clusters=3)
    rows = np.array([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]])
    placed = fedem.place_newcomers(np.array([4, 5]), np.zeros(2, np.int64), rows)
    assert placed.clusters == ["1", "0"] and np.array_equal(placed.rows, rows)
    assert fedem.newcomer_probe(np.array([4, 5])).op == "newcomer_weights"


@pytest.mark.parametrize("seed", range(5))
def test_the_accelerated_em_reaches_plain_ems_fixed_point(seed):
    """Two components that explain the samples nearly alike: plain EM crawls (thousands of
    steps, and where the best weights are on the simplex's edge, hundreds of thousands);
    the accelerated one ends near where plain EM ends, its log-likelihood within 1e-5."""
    rng = np.random.default_rng(seed)
    base = rng.exponential(1.0, size=60)
    losses = np.stack([base, base + rng.normal(0, 0.05, 60), base + 1.0])
    pi = np.full(3, 1 / 3)
    for _ in range(200_000):
        pi, before = responsibilities(pi, losses).mean(axis=1), pi
        if np.abs(pi - before).max() < 1e-15:
            break
    fast = newcomer_weights(losses)
    assert np.abs(fast - pi).max() < 1e-4 and abs(fast.sum() - 1) < 1e-12
    assert log_likelihood(fast, losses) >= log_likelihood(pi, losses) - 1e-5


def test_fedsofts_rule_places_by_the_largest_weight_on_the_mix():
    fedsoft = ALGORITHMS.get("fedsoft")(num_clients=4, clients_per_round=2, seed=0,
                                        num_clusters=2)  # fmt: skip
    fedsoft.federation = api.Federation(4, 2, 0, num_params=3)
    request = fedsoft.newcomer_probe(np.array([4, 5]))
    assert request.op == "importance" and request.clusters == ["0", "1"]
    u = np.array([[0.25, 0.75], [0.5, 0.5]])
    placed = fedsoft.place_newcomers(np.array([4, 5]), np.zeros(2, np.int64), u)
    assert placed.clusters == ["1", "0"]  # a tie: the first
    # no personal model (0), the weights, then the P zeros of the model it has not got
    assert placed.rows.tolist() == [[0, 0.25, 0.75, 0, 0, 0], [0, 0.5, 0.5, 0, 0, 0]]


def test_the_global_rule_and_the_oracles():
    for name in ("none", "fedavg_ft"):
        alg = ALGORITHMS.get(name)(num_clients=4, clients_per_round=2, seed=0)
        assert alg.newcomer_probe(np.array([4, 5])) is None
        assert alg.place_newcomers(np.array([4, 5]), np.array([1, 0]), None).clusters == ["0"] * 2
    oracle = ALGORITHMS.get("oracle")(num_clients=4, clients_per_round=2, seed=0,
                                      groups=np.array([0, 0, 1, 1]))  # fmt: skip
    placed = oracle.place_newcomers(np.array([4, 5, 6]), np.array([1, 0, 1]), None)
    assert placed.clusters == ["1", "0", "1"]

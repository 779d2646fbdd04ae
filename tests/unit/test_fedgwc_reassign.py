"""FedGWC giving a member back (``reassign = "loss"``): which probed clients move
(:func:`~distfl.algorithms.fedgwc.reassign.moves`, checked on hand-made losses), and what a
move does to the algorithm: the tree, a fresh P in each cluster that changed, the round's
cohorts, the statistics, the run file's state; ``reassign = "none"`` (the paper's) asks
for no probe and never moves a member."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import paper_fedgwc, restore, snapshot

from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.fedgwc.reassign import moves

LEAVES = ["0.0", "0.1"]


def _moves(losses, own, sizes=None, ratio=0.5, outlier=2.0, min_clients=1, clients=None):
    clients = np.arange(len(own)) if clients is None else np.asarray(clients)
    sizes = sizes or {"0.0": 10, "0.1": 10}
    return moves(clients, own, LEAVES, np.asarray(losses, dtype=float), sizes,
                 ratio=ratio, outlier=outlier, min_clients=min_clients)  # fmt: skip


#: two members of each cluster that fit their own model (0.2) and not the other (3.0)
PEERS = [[0.2, 3.0], [0.2, 3.0], [3.0, 0.2], [3.0, 0.2]]
PEERS_OWN = ["0.0", "0.0", "0.1", "0.1"]


def test_a_client_far_from_its_cluster_that_the_other_model_fits_moves():
    # client 4 of 0.0: 4.0 at home (above 2 x 0.2), 0.3 in 0.1 (< 0.5 x 4.0), and 0.0's
    # members find 0.1's model 15 times worse: it moves. Client 5 of 0.1 fits its own: stays
    out = _moves([*PEERS, [4.0, 0.3], [3.0, 0.25]], [*PEERS_OWN, "0.0", "0.1"])
    assert out == {4: "0.1"}


def test_each_condition_alone_keeps_the_client():
    # another model far better, but its cluster's members find that model better too (a
    # better model for all, as for one-class clients under near-IID ones): stays
    assert _moves([[0.4, 0.3], [0.4, 0.3], [4.0, 0.3]], ["0.0", "0.0", "0.0"]) == {}
    # the other model far better, but the client is not far from its members (1.0 is not
    # above 2 x 0.6, the median of 0.2, 0.6 and 3.0): stays
    assert _moves([[0.2, 3.0], [0.6, 3.0], [3.0, 30.0], [1.0, 0.3]],
                  ["0.0", "0.0", "0.0", "0.0"]) == {}  # fmt: skip
    # far from its members, but the other model is not far better (2.5 is not below 0.5 x 4)
    assert _moves([*PEERS, [4.0, 2.5]], [*PEERS_OWN, "0.0"]) == {}
    # probed alone in its cluster: no evidence, stays
    assert _moves([[3.0, 0.2], [4.0, 0.1]], ["0.1", "0.0"]) == {}


def test_models_alike_move_nobody_and_the_ratios_are_strict():
    assert _moves([[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]], ["0.0", "0.0", "0.0"]) == {}
    assert _moves([*PEERS, [4.0, 2.0]], [*PEERS_OWN, "0.0"]) == {}  # exactly half: stays
    assert _moves([*PEERS, [4.0, 1.999]], [*PEERS_OWN, "0.0"]) == {4: "0.1"}
    assert _moves([*PEERS, [0.4, 0.1]], [*PEERS_OWN, "0.0"]) == {}  # exactly 2 x 0.2
    # the members' ratio exactly 1 / ratio counts (at least): 0.4 / 0.2 = 2
    assert _moves([[0.2, 0.4], [0.2, 0.4], [4.0, 0.1]], ["0.0", "0.0", "0.0"]) == {2: "0.1"}


def test_nan_never_wins_and_a_nan_home_loss_counts_as_infinite():
    assert _moves([*PEERS, [np.nan, 0.3]], [*PEERS_OWN, "0.0"]) == {4: "0.1"}
    assert _moves([*PEERS, [4.0, np.nan]], [*PEERS_OWN, "0.0"]) == {}
    assert _moves([*PEERS, [np.nan, np.nan]], [*PEERS_OWN, "0.0"]) == {}
    # a member whose losses are NaN tells nothing of the models: no evidence, no move
    assert _moves([[np.nan, np.nan], [4.0, 0.3]], ["0.0", "0.0"]) == {}


def test_a_cluster_keeps_min_clients_counted_in_ascending_client_order():
    # clients 7 and 3 of 0.0 (4 members, floor 3) both belong in 0.1 (probed together,
    # each far above the median of its cluster's others): only 3 moves
    out = _moves([*PEERS, [5.0, 0.1], [5.0, 0.1]], [*PEERS_OWN, "0.0", "0.0"],
                 sizes={"0.0": 4, "0.1": 4}, min_clients=3,
                 clients=[0, 1, 2, 4, 7, 3])  # fmt: skip
    assert out == {3: "0.1"}
    # client 5 joining 0.0 (3 members, at the floor) makes room for client 6 to leave it
    out = _moves([*PEERS, [0.1, 5.0], [5.0, 0.1]], [*PEERS_OWN, "0.1", "0.0"],
                 sizes={"0.0": 3, "0.1": 4}, min_clients=3, clients=[0, 1, 2, 3, 5, 6])  # fmt: skip
    assert out == {5: "0.0", 6: "0.1"}
    out = _moves([*PEERS, [5.0, 0.1]], [*PEERS_OWN, "0.0"], sizes={"0.0": 3, "0.1": 4},
                 min_clients=3)  # fmt: skip
    assert out == {}


def test_ties_among_other_models_go_to_the_first_cluster():
    out = moves(np.array([0, 1, 2]), ["0.1", "0.1", "0.1"], ["0.0", "0.1", "0.2"],
                np.array([[3.0, 0.2, 3.0], [3.0, 0.2, 3.0], [0.1, 3.0, 0.1]]),
                {"0.0": 5, "0.1": 5, "0.2": 5}, ratio=0.5, outlier=2.0, min_clients=1)  # fmt: skip
    assert out == {2: "0.0"}


def test_losses_of_another_shape_are_refused():
    with pytest.raises(ValueError, match="losses of shape"):
        _moves([[1.0, 2.0, 3.0]], ["0.0"])


# -- the algorithm -------------------------------------------------------------------------


def _split_fedgwc(**kwargs):
    """A FedGWC of 12 clients whose root split (by hand) into 0.0 = 0..6 (client 6 on the
    wrong side) and 0.1 = 7..11, with P's sub-blocks as a split leaves them."""
    alg = paper_fedgwc(num_clients=12, clients_per_round=12, seed=0, **kwargs)
    rng = np.random.default_rng(3)
    alg.state["0"].P[:] = rng.uniform(0.1, 0.9, size=(12, 12))
    labels = np.array([0] * 7 + [1] * 5)
    children = {f"0.{c}": np.flatnonzero(labels == c) for c in (0, 1)}
    for cid, members in children.items():
        alg.state[cid] = type(alg.state["0"])(P=alg.state["0"].P[np.ix_(members, members)].copy())
    alg.tree.split("0", children, 1, {"labels": labels})
    del alg.state["0"]
    return alg


def _losses(request) -> np.ndarray:
    """Client 6 fits 0.1's model (0.2 against 3.0 at home, where the others have 0.2);
    every other client its own (0.2, and 3.0 under the other model)."""
    rows = []
    for k in request.clients:
        home = 0 if k < 6 else 1
        row = np.full(len(request.clusters), 3.0)
        row[home] = 0.2
        rows.append(row)
    return np.array(rows)


def test_fedgwc_moves_the_misplaced_client_and_starts_both_clusters_afresh():
    alg = _split_fedgwc(reassign="loss", min_clients=3)
    request = alg.plan_probe(2)
    assert request is not None and request.clusters == LEAVES and request.op == "losses"
    assert request.clients.tolist() == list(range(12))  # every member: rate 1
    alg.update_probe(2, request, _losses(request))
    clusters = alg.clusters()
    assert clusters["0.0"].tolist() == list(range(6))
    assert clusters["0.1"].tolist() == list(range(6, 12))
    for cid in LEAVES:  # P⁰ = 0 of the new members, MSE 1, no test pending
        st = alg.state[cid]
        n = len(clusters[cid])
        np.testing.assert_array_equal(st.P, np.zeros((n, n)))
        assert st.mse == 1.0 and st.quiet == 0 and st.proposal is None
    plan = alg.plan(2)
    assert plan.train[6] == "0.1"  # the mover trains in its new cluster this round
    assert {k for k, c in plan.train.items() if c == "0.0"} == set(range(6))
    ids = np.array(sorted(plan.train), dtype=np.int64)
    reports = ClientReports(clients=ids, losses=np.full((12, 4), 0.5),
                            num_samples=np.full(12, 10, dtype=np.int64))  # fmt: skip
    stats = alg.update(2, plan, reports).stats
    assert (stats["0.0"]["joined"], stats["0.0"]["left"]) == (0.0, 1.0)
    assert (stats["0.1"]["joined"], stats["0.1"]["left"]) == (1.0, 0.0)
    assert alg.state["0.0"].P.shape == (6, 6) and alg.state["0.1"].P.shape == (6, 6)
    # a round without moves records neither
    request = alg.plan_probe(3)
    alg.update_probe(3, request, _losses(request))
    plan = alg.plan(3)
    stats = alg.update(3, plan, ClientReports(clients=ids, losses=np.full((12, 4), 0.5),
                       num_samples=np.full(12, 10, dtype=np.int64))).stats  # fmt: skip
    assert "joined" not in stats["0.0"] and "left" not in stats["0.1"]


def test_a_move_is_recorded_where_none_of_the_cluster_reported():
    alg = _split_fedgwc(reassign="loss", min_clients=3)
    request = alg.plan_probe(2)
    alg.update_probe(2, request, _losses(request))
    plan = alg.plan(2)
    ids = np.arange(6, dtype=np.int64)  # only 0.0's clients report (0.1's dropped out)
    reports = ClientReports(clients=ids, losses=np.full((6, 4), 0.5),
                            num_samples=np.full(6, 10, dtype=np.int64))  # fmt: skip
    stats = alg.update(2, plan, reports).stats
    assert stats["0.1"] == {"joined": 1.0, "left": 0.0}
    assert (stats["0.0"]["joined"], stats["0.0"]["left"]) == (0.0, 1.0) and "mse" in stats["0.0"]


def test_the_state_after_a_move_is_what_the_run_file_gives_back():
    alg = _split_fedgwc(reassign="loss", min_clients=3)
    request = alg.plan_probe(2)
    alg.update_probe(2, request, _losses(request))
    copy = paper_fedgwc(num_clients=12, clients_per_round=12, seed=0, reassign="loss",
                        min_clients=3)  # fmt: skip
    restore(copy, snapshot(alg))
    for cid, members in alg.clusters().items():
        np.testing.assert_array_equal(copy.clusters()[cid], members)
        np.testing.assert_array_equal(copy.state[cid].P, alg.state[cid].P)
    assert copy.plan(3).train == alg.plan(3).train


def test_the_floor_keeps_a_cluster_of_min_clients():
    alg = _split_fedgwc(reassign="loss", min_clients=7)  # 0.0 holds 7: nobody may leave
    request = alg.plan_probe(2)
    alg.update_probe(2, request, _losses(request))
    assert len(alg.clusters()["0.0"]) == 7


def test_the_papers_mode_and_a_single_cluster_ask_for_no_probe():
    assert _split_fedgwc(reassign="none").plan_probe(2) is None
    whole = paper_fedgwc(num_clients=12, clients_per_round=4, seed=0, reassign="loss")
    assert whole.plan_probe(1) is None and len(whole.plan(1).train) == 4


def test_reassign_every_probes_every_nth_round():
    alg = _split_fedgwc(reassign="loss", reassign_every=3)
    assert [alg.plan_probe(t) is not None for t in range(2, 8)] == [
        False, True, False, False, True, False]  # fmt: skip


def test_the_probe_draws_the_cohorts_the_plan_trains():
    """The cohorts are drawn once a round, by the probe or, without one, by the plan: the
    same clients either way (the draw's order and generator are the plan's)."""
    a = paper_fedgwc(num_clients=40, clients_per_round=8, seed=5, reassign="loss")
    b = paper_fedgwc(num_clients=40, clients_per_round=8, seed=5, reassign="loss")
    for t in range(1, 6):
        assert a.plan_probe(t) is None  # one cluster: nothing to probe
        assert a.plan(t).train == b.plan(t).train

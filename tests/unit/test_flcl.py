"""FLCL's pure functions on small arrays against hand-computed or independently computed
values, and the algorithm driven by synthetic client reports."""

from __future__ import annotations

import numpy as np
import pytest

from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.flcl import (
    FACTOR_FLOOR,
    FLCL,
    LAMBDA_FLOOR,
    combination,
    estimated_cross_losses,
    external_regret,
    least_preferred,
    multiplicative_weights,
    regret_bound,
    row_normalise,
    stationary_distribution,
)
from distfl.runfile.reader import _read_tree
from distfl.runfile.writer import _write_tree

# --------------------------------------------------------------------------- cross losses


def test_cross_losses_by_hand():
    # d_0 = (1, 0), ‖d_0‖ = 1, ∇̂l_0 = (0.5 - 1.5) (1, 0) = (-1, 0);
    # l̂_0(θ_1) = 0.5 + <(-1, 0), (0, 2) - (1, 0)> = 0.5 + 1 = 1.5.
    # d_1 = (0, 2), ‖d_1‖ = 2, ∇̂l_1 = (1 - 2) / 2 (0, 2) = (0, -1);
    # l̂_1(θ_0) = 1 + <(0, -1), (1, 0) - (0, 2)> = 1 + 2 = 3.
    models = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    got = estimated_cross_losses([0.5, 1.0], [1.5, 2.0], models, np.zeros(2, np.float32))
    assert np.allclose(got, [[0.5, 1.5], [3.0, 1.0]], rtol=0, atol=1e-12)


def test_cross_losses_against_the_formula_in_a_loop():
    rng = np.random.default_rng(4)
    n, P = 5, 7
    prev = rng.standard_normal(P)
    models = prev + rng.standard_normal((n, P))
    own = rng.uniform(0, 1, n)
    agg = own + rng.uniform(0, 2, n)
    expected = np.empty((n, n))
    for i in range(n):
        d = models[i] - prev
        grad = (own[i] - agg[i]) / np.sqrt(np.sum(d * d)) * d
        for j in range(n):
            expected[i, j] = own[i] + np.sum(grad * (models[j] - models[i]))
    got = estimated_cross_losses(own, agg, models, prev)
    assert np.allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert np.allclose(np.diag(got), own)  # l̂_i(θ_i) = l_i(θ_i)


def test_cross_losses_of_a_client_that_did_not_move():
    prev = np.array([1.0, 2.0])
    models = np.array([[1.0, 2.0], [3.0, 2.0]])
    got = estimated_cross_losses([0.4, 0.1], [0.9, 0.3], models, prev)
    assert got[0].tolist() == [0.4, 0.4]  # no direction: no gradient estimate
    # client 1: d = (2, 0), ∇̂ = -0.2/2 (2, 0) = (-0.2, 0); l̂_1(θ_0) = 0.1 + 0.4 = 0.5
    assert got[1] == pytest.approx([0.5, 0.1])
    with pytest.raises(ValueError, match="shapes"):
        estimated_cross_losses([0.1], [0.2, 0.3], models, prev)


# --------------------------------------------------------------------------- weights


def test_multiplicative_weights_by_hand():
    W = np.array([[1.0, 2.0], [0.5, 1.0]])
    cross = np.array([[0.5, 2.0], [-1.0, 0.1]])
    # factors 1 - 0.3 l̂: 0.85, 0.4; negative l̂ counts as 0: 1.0; 0.97
    got = multiplicative_weights(W, cross, 0.3)
    assert np.allclose(got, [[0.85, 0.8], [0.5, 0.97]])
    # the factor is clipped below at the floor, so weights stay positive
    assert np.allclose(multiplicative_weights(W, cross, 0.3, floor=0.5), [[0.85, 1.0], [0.5, 0.97]])
    huge = multiplicative_weights(W, np.full((2, 2), 1e9), 0.9)
    assert np.allclose(huge, W * FACTOR_FLOOR) and (huge > 0).all()
    with pytest.raises(ValueError, match="floor"):
        multiplicative_weights(W, cross, 0.3, floor=0.0)


def test_row_normalise_by_hand():
    assert np.allclose(row_normalise([[1.0, 3.0], [2.0, 2.0]]), [[0.25, 0.75], [0.5, 0.5]])
    # with a floor: (0, 1) -> (0.1, 1) -> (0.1, 1) / 1.1
    got = row_normalise([[0.0, 4.0], [1.0, 1.0]], floor=0.1)
    assert np.allclose(got, [[0.1 / 1.1, 1 / 1.1], [0.5, 0.5]])


# --------------------------------------------------------------------------- λ


def test_stationary_distribution_two_states_by_hand():
    # [[1-a, a], [b, 1-b]]: λ = (b, a) / (a + b)
    a, b = 0.2, 0.6
    got = stationary_distribution([[1 - a, a], [b, 1 - b]])
    assert np.allclose(got, [0.75, 0.25], rtol=0, atol=1e-14)
    assert stationary_distribution([[1.0]]).tolist() == [1.0]


def test_stationary_distribution_three_states_by_hand():
    # A birth-death chain: detailed balance λ_0 0.5 = λ_1 0.25, λ_1 0.25 = λ_2 0.5
    # gives λ ∝ (1, 2, 1).
    L = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    assert np.allclose(stationary_distribution(L), [0.25, 0.5, 0.25], rtol=0, atol=1e-14)
    # a doubly stochastic matrix has the uniform distribution
    D = np.array([[0.2, 0.5, 0.3], [0.5, 0.1, 0.4], [0.3, 0.4, 0.3]])
    assert np.allclose(stationary_distribution(D), np.full(3, 1 / 3), rtol=0, atol=1e-14)


def test_stationary_distribution_against_numpy_eig():
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 12):
        L = row_normalise(rng.uniform(0.01, 1.0, (n, n)))
        values, vectors = np.linalg.eig(L.T)
        v = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
        expected = v / v.sum()
        got = stationary_distribution(L)
        assert np.allclose(got, expected, rtol=1e-10, atol=1e-13)
        assert np.allclose(got @ L, got, atol=1e-14)


def test_stationary_distribution_of_a_nearly_decomposable_chain():
    """Two blocks joined by entries of 1e-12 (settled preferences): the exact answer of the
    two-state reduction, a = 1e-12 out of the first, b = 3e-12 out of the second, is
    (0.75, 0.25); a solver that subtracts from the diagonal loses it."""
    e = 1e-12
    got = stationary_distribution([[1 - e, e], [3 * e, 1 - 3 * e]])
    assert np.allclose(got, [0.75, 0.25], rtol=1e-9, atol=0)
    # four states: within-block uniform, block mass (0.75, 0.25) split evenly
    L = np.array(
        [
            [0.5 - e / 2, 0.5 - e / 2, e / 2, e / 2],
            [0.5 - e / 2, 0.5 - e / 2, e / 2, e / 2],
            [1.5 * e, 1.5 * e, 0.5 - 1.5 * e, 0.5 - 1.5 * e],
            [1.5 * e, 1.5 * e, 0.5 - 1.5 * e, 0.5 - 1.5 * e],
        ]
    )
    assert np.allclose(stationary_distribution(L), [0.375, 0.375, 0.125, 0.125], rtol=1e-9)


def test_stationary_distribution_of_an_absorbing_chain():
    # state 1 absorbs: the reduction cannot pass it and the least-squares solve answers
    assert np.allclose(stationary_distribution([[0.5, 0.5], [0.0, 1.0]]), [0.0, 1.0], atol=1e-12)
    assert np.allclose(stationary_distribution([[1.0, 0.0], [0.5, 0.5]]), [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("block", [1, 2, 3, 7])
def test_stationary_distribution_by_blocks_matches_one_state_at_a_time(block):
    """The blocked reduction sums the same non-negative terms in another order: it agrees
    with the sequential one to rounding, on spread, nearly decomposable and absorbing
    chains, whatever the block size (a block of n states is the sequential reduction)."""
    rng = np.random.default_rng(block)
    for n in (2, 3, 9, 40):
        L = row_normalise(rng.uniform(0.0, 1.0, (n, n)) ** 6, LAMBDA_FLOOR)
        one = stationary_distribution(L, block=n)
        assert np.allclose(stationary_distribution(L, block=block), one, rtol=1e-12, atol=0)
    # settled preferences: two blocks whose cross entries are at the floor
    g = rng.random(30) < 0.3
    W = rng.uniform(0.5, 1.0, (30, 30)) * (g[:, None] == g[None, :])
    L = row_normalise(W, LAMBDA_FLOOR)
    blocked = stationary_distribution(L, block=block)
    assert np.allclose(blocked, stationary_distribution(L, block=30), rtol=1e-12, atol=0)
    assert np.allclose(blocked @ L, blocked, rtol=1e-12, atol=0)
    absorbing = [[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]]
    assert np.allclose(stationary_distribution(absorbing, block=block), [0, 1, 0], atol=1e-12)


def test_stationary_distribution_above_the_sequential_size_reduces_by_blocks():
    """Above SEQUENTIAL_STATES members Λ is reduced by blocks (the sequential reduction
    costs 28 s at 2,714 members); below, one state at a time, as it always was."""
    from distfl.algorithms import flcl

    rng = np.random.default_rng(3)
    n = flcl.SEQUENTIAL_STATES + 5
    L = row_normalise(rng.uniform(0.0, 1.0, (n, n)), LAMBDA_FLOOR)
    got = stationary_distribution(L)
    assert np.array_equal(got, stationary_distribution(L, block=flcl.STATE_BLOCK))
    assert np.allclose(got, stationary_distribution(L, block=n), rtol=1e-12, atol=0)
    # below, the bits of the reduction as first written (np.outer's array added each step)
    small = row_normalise(L[:40, :40], LAMBDA_FLOOR)
    A = small.copy()
    for k in range(39, 0, -1):
        A[:k, k] /= A[k, :k].sum()
        A[:k, :k] += np.outer(A[:k, k], A[k, :k])
    lam = np.zeros(40)
    lam[0] = 1.0
    for k in range(1, 40):
        lam[k] = lam[:k] @ A[:k, k]
    assert np.array_equal(stationary_distribution(small), lam / lam.sum())


def test_combination_restricted_to_the_remaining_members():
    # members {0, 2}: sub-block [[0.5, 0.2], [0.4, 0.4]] -> rows [[5/7, 2/7], [1/2, 1/2]]
    # -> two states with a = 2/7, b = 1/2: λ = (b, a) / (a + b) = (7/11, 4/11)
    L = np.array([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.4, 0.2, 0.4]])
    got = combination(L, np.array([True, False, True]))
    assert np.allclose(got, [7 / 11, 0.0, 4 / 11], rtol=0, atol=1e-14)
    assert np.allclose(combination(L, np.ones(3, bool)), stationary_distribution(L))


# --------------------------------------------------------------------------- regret, DecompCL


def test_external_regret_and_bound():
    assert external_regret([1.0, 0.5], [0.25, 0.75]).tolist() == [0.75, -0.25]
    assert regret_bound(3.0, 9) == pytest.approx(1.0)  # δ / √(Kt)
    assert regret_bound(2.0, 100) == pytest.approx(0.2)


def test_least_preferred_by_hand():
    # column sums without the diagonal: 0.10, 0.43, 0.47 -> client 0, whom the others
    # do not want although it wants itself; with the diagonal: 1.05, 0.93, 1.02 -> client 1
    L = np.array([[0.95, 0.03, 0.02], [0.05, 0.5, 0.45], [0.05, 0.4, 0.55]])
    assert least_preferred(L) == 0
    assert least_preferred(L, include_self=True) == 1
    # the first of equal ones
    assert least_preferred(np.full((3, 3), 1 / 3)) == 0


# --------------------------------------------------------------------------- the algorithm


def reports(models, agg, own, clients=None) -> ClientReports:
    """Reports of n clients with 3 local steps: the first loss ``agg``, the last ``own``."""
    models = np.asarray(models, dtype=np.float32)
    n = len(models)
    agg, own = np.broadcast_to(agg, n), np.broadcast_to(own, n)
    losses = np.stack([agg, (agg + own) / 2, own], axis=1).astype(np.float64)
    return ClientReports(
        clients=np.arange(n, dtype=np.int64) if clients is None else np.asarray(clients),
        losses=losses,
        num_samples=np.full(n, 10, dtype=np.int64),
        models=models,
    )


#: three clients who move alike and one who moves against them
DIRECTIONS = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
AGG = np.array([0.7, 0.7, 0.7, 2.0])
OWN = np.array([0.2, 0.2, 0.2, 0.5])


def step(algo, t, models, agg=AGG, own=OWN):
    """One round: (the new cluster models, the splits, the whole RoundUpdate)."""
    plan = algo.plan(t)
    rep = reports(models, agg, own, clients=sorted(plan.train))
    update = algo.update(t, plan, rep)
    return update.models, update.splits, update


def test_every_member_trains_and_returns_its_model():
    algo = FLCL(num_clients=4, clients_per_round=1, seed=0)
    plan = algo.plan(1)
    assert plan.train == {0: "0", 1: "0", 2: "0", 3: "0"}
    assert plan.return_models == frozenset({0, 1, 2, 3})


def test_first_round_plain_mean_then_regext():
    algo = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=100.0, period=10)
    zeros = np.zeros((4, 2), np.float32)
    out, _, _ = step(algo, 1, zeros + [[1, 0], [3, 0], [0, 4], [0, 0]])
    # no start model known yet: Λ uniform, θ_a the plain mean
    assert np.allclose(algo.state["0"].Lambda, 0.25)
    assert np.allclose(out["0"], [1.0, 1.0])
    # round 2 from θ_a = (1, 1): the clients move by DIRECTIONS
    prev = out["0"]
    out, _, _ = step(algo, 2, prev + DIRECTIONS)
    # by hand: clients 0-2 have ∇̂ = (0.2 - 0.7) (1, 0) = (-0.5, 0); client 3 (1.5, 0).
    # l̂_i(θ_j), i < 3: 0.2 for j < 3, 0.2 + <(-0.5, 0), (-2, 0)> = 1.2 for j = 3;
    # l̂_3(θ_j): 0.5 + <(1.5, 0), (2, 0)> = 3.5 for j < 3, 0.5 for itself.
    # factors 1 - 0.5 l̂: 0.9 and 0.4 on rows 0-2; the floor and 0.75 on row 3.
    f = FACTOR_FLOOR
    W = np.array([[0.9, 0.9, 0.9, 0.4]] * 3 + [[f, f, f, 0.75]])
    expected = W / W.sum(axis=1, keepdims=True)
    L = algo.state["0"].Lambda
    assert np.allclose(L, np.maximum(expected, LAMBDA_FLOOR), rtol=1e-9, atol=1e-15)
    lam = stationary_distribution(L)
    assert np.allclose(lam @ L, lam)
    thetas = (prev + DIRECTIONS).astype(np.float64)
    assert np.allclose(out["0"], lam @ thetas, atol=1e-6)  # θ_a = Σ λ_i θ_i
    # not the sample-weighted (here: plain) mean of the four models
    assert not np.allclose(out["0"], thetas.mean(axis=0), atol=1e-3)
    assert out["0"].dtype == np.float32
    assert np.array_equal(algo.state["0"].prev, out["0"])


def run_decomposition(expel: str):
    """Regret above the bound at the first check, below it at the second."""
    algo = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=1.4, period=2,
                expel=expel)  # fmt: skip
    prev = np.zeros(2, np.float32)
    history = []
    for t in range(1, 7):
        out, splits, _ = step(algo, t, prev + DIRECTIONS)
        prev = out[sorted(out)[0]]
        history.append((t, out, splits, {c: s.expelled_at.copy() for c, s in algo.state.items()}))
    return algo, history


@pytest.mark.parametrize("expel", ["preference", "regret"])
def test_decomposition_expels_the_dissenter_then_splits(expel):
    algo, history = run_decomposition(expel)
    # rounds 1-2: the warm-up period, no check; regret per round: 0.5 x 3 and 1.5
    assert all(not h[2] for h in history[:3])
    assert (history[1][3]["0"] < 0).all()
    # round 4: mean regret (0.5 * 3 + 1.5) / 4 = 0.75 >= 1.4 / √4 = 0.7: client 3 expelled
    assert history[3][3]["0"].tolist() == [-1, -1, -1, 4]
    assert not history[3][2]
    # round 6: the remaining clients' mean regret 0.5 < 1.4 / √6 = 0.57: split into
    # (remaining, expelled)
    (split,) = history[5][2]
    assert split.parent == "0"
    assert {k: v.tolist() for k, v in split.children.items()} == {"0.0": [0, 1, 2], "0.1": [3]}
    assert split.info["labels"].tolist() == [0, 0, 0, 1]
    assert split.info["expelled_at"].tolist() == [-1, -1, -1, 4]
    assert split.info["combination"][3] == 0.0
    assert split.info["regret_bound"][0] == pytest.approx(1.4 / np.sqrt(6))
    assert sorted(algo.state) == ["0.0", "0.1"] and algo.decompositions == 1
    # each child keeps its sub-block of Λ (row-normalised), starts from the parent's
    # model and a warm-up
    parent = split.info["preferences"]
    assert np.allclose(algo.state["0.0"].Lambda, row_normalise(parent[:3, :3]))
    assert algo.state["0.1"].Lambda.tolist() == [[1.0]]
    for child in ("0.0", "0.1"):
        assert np.array_equal(algo.state[child].prev, history[5][1]["0"])
        assert not algo.state[child].warm and algo.state[child].age == 0
    assert {k: v.tolist() for k, v in algo.clusters().items()} == {"0.0": [0, 1, 2], "0.1": [3]}


def test_the_model_ignores_an_expelled_client():
    algo = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=1.4, period=2)
    prev = np.zeros(2, np.float32)
    for t in range(1, 5):
        out, _, _ = step(algo, t, prev + DIRECTIONS)
        prev = out["0"]
    assert algo.state["0"].expelled_at[3] == 4
    models = prev + DIRECTIONS
    out, _, _ = step(algo, 5, models)
    lam = combination(algo.state["0"].Lambda, np.array([True, True, True, False]))
    assert np.allclose(out["0"], lam[:3] @ models[:3].astype(np.float64), atol=1e-6)
    assert np.allclose(out["0"], prev + [1.0, 0.0], atol=1e-6)  # the dissenter's pull is gone


def test_a_homogeneous_cluster_does_not_decompose():
    algo = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=1.4, period=2)
    prev = np.zeros(2, np.float32)
    same = np.tile([1.0, 0.0], (4, 1)).astype(np.float32)
    for t in range(1, 9):
        out, splits, update = step(algo, t, prev + same, agg=0.3, own=0.2)
        prev = out["0"]
        assert not splits
        if t % 2 == 0 and t > 2:
            assert update.stats["0"]["regret"] == pytest.approx(0.1)
    assert (algo.state["0"].expelled_at < 0).all()
    # uniform cross losses keep Λ uniform and θ_a the plain mean
    assert np.allclose(algo.state["0"].Lambda, 0.25)


def test_a_pair_decomposes_at_once():
    """With two clients left, expelling one leaves one: the split follows at once."""
    algo = FLCL(num_clients=2, clients_per_round=2, seed=0, eta=0.5, delta=1.0, period=1)
    d = np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32)
    prev = np.zeros(2, np.float32)
    out, splits, _ = step(algo, 1, prev + d, agg=[0.7, 2.0], own=[0.2, 0.5])
    assert not splits  # warm-up
    out, splits, _ = step(algo, 2, out["0"] + d, agg=[0.7, 2.0], own=[0.2, 0.5])
    (split,) = splits
    assert sorted(len(v) for v in split.children.values()) == [1, 1]


def test_bad_settings_and_reports():
    for kwargs in ({"eta": 0.0}, {"eta": 1.0}, {"delta": 0.0}, {"period": 0}, {"expel": "x"}):
        with pytest.raises(ValueError):
            FLCL(num_clients=4, clients_per_round=4, seed=0, **kwargs)
    algo = FLCL(num_clients=2, clients_per_round=2, seed=0)
    one_step = ClientReports(
        clients=np.arange(2), losses=np.ones((2, 1)), num_samples=np.ones(2, np.int64),
        models=np.zeros((2, 3), np.float32),
    )  # fmt: skip
    plan = algo.plan(1)
    with pytest.raises(ValueError, match="local_steps"):
        algo.update(1, plan, one_step)
    no_models = reports(np.zeros((2, 3)), 1.0, 0.5)
    no_models.models = None
    with pytest.raises(ValueError, match="return_models"):
        algo.update(1, plan, no_models)


def test_state_round_trip_through_the_run_file_tree(tmp_path):
    """Stop after round 3 (mid-period, one cluster), store the state as the run file does,
    load it into a fresh instance: both continue with the same bits, through the split."""
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(3)
    a = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=1.4, period=2)
    prev = np.zeros(2, np.float32)
    noise = rng.normal(0, 0.01, (8, 4, 2)).astype(np.float32)
    for t in range(1, 4):
        out, _, _ = step(a, t, prev + DIRECTIONS + noise[t])
        prev = out["0"]
    with h5py.File(tmp_path / "s.h5", "w") as f:
        _write_tree(f.create_group("algorithm"), a.state_dict())
    with h5py.File(tmp_path / "s.h5", "r") as f:
        stored = _read_tree(f["algorithm"])
    b = FLCL(num_clients=4, clients_per_round=4, seed=0, eta=0.5, delta=1.4, period=2)
    b.load_state_dict(stored)
    prev_a = prev_b = prev
    split_seen = False
    for t in range(4, 8):
        models_a = prev_a + DIRECTIONS + noise[t]
        models_b = prev_b + DIRECTIONS + noise[t]
        assert np.array_equal(models_a, models_b)
        out_a, splits_a, _ = step(a, t, models_a)
        out_b, splits_b, _ = step(b, t, models_b)
        assert sorted(out_a) == sorted(out_b)
        for cid in out_a:
            assert np.array_equal(out_a[cid], out_b[cid])
        assert [s.children.keys() for s in splits_a] == [s.children.keys() for s in splits_b]
        split_seen |= bool(splits_a)
        prev_a, prev_b = out_a[sorted(out_a)[0]], out_b[sorted(out_b)[0]]
    assert split_seen
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["decompositions"] == sb["decompositions"] == 1
    assert sa["clusters"].keys() == sb["clusters"].keys()
    for cid in sa["clusters"]:
        for key, value in sa["clusters"][cid].items():
            assert np.array_equal(np.asarray(value), np.asarray(sb["clusters"][cid][key])), key


def test_state_before_the_first_round_has_no_start_model():
    a = FLCL(num_clients=3, clients_per_round=3, seed=0)
    b = FLCL(num_clients=3, clients_per_round=3, seed=0)
    b.load_state_dict(a.state_dict())
    assert b.state["0"].prev is None
    assert np.array_equal(b.state["0"].Lambda, a.state["0"].Lambda)


def test_what_the_memory_check_counts_for_flcl():
    """Every member's model reaches the server every round; Λ and a round's work on it
    hold about 48 bytes per pair of members at the peak."""
    params = FLCL.Params()
    assert FLCL.round_models(params, num_clients=2714, clients_per_round=10, num_params=9) == 2714
    assert FLCL.working_pair_bytes(params) == 48 and FLCL.pair_bytes == 8

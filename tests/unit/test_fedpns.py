"""FedPNS: the expectations from the Gram matrix against their definition, the optimal
aggregation by hand and against a plain transcription, and the lazy selection probabilities
against a dense array updated by the code's formulas; the draw's frequencies, its
availability filter, its guard and its state."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from distfl.participation.fedpns import (
    PnsProbabilities,
    expectation,
    expectations_without_each,
    optimal_aggregation,
)


def test_expectation_by_its_definition():
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # mean (2/3, 2/3): <g_i, mean> = 2/3, 2/3, 4/3
    assert expectation(g) == pytest.approx(8 / 3, rel=1e-15)
    assert expectation(np.zeros((0, 2))) == 0.0


def test_gram_expectations_without_each_match_the_definition():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n, d = int(rng.integers(2, 12)), int(rng.integers(1, 30))
        g = rng.normal(size=(n, d)) + rng.normal(size=d)  # correlated rows
        members = rng.random(n) < 0.7
        if members.sum() < 2:
            members[:2] = True
        got = expectations_without_each(g @ g.T, members)
        scale = np.sum(g * g)
        for i in range(n):
            if members[i]:
                rest = members.copy()
                rest[i] = False
                assert abs(got[i] - expectation(g[rest])) <= 1e-12 * scale
            else:
                assert got[i] == -np.inf
        # E(S) = sum_S G / |S|
        assert float((g @ g.T)[np.ix_(members, members)].sum()) / members.sum() == pytest.approx(
            expectation(g[members]), rel=1e-12, abs=1e-12 * scale
        )


def test_optimal_aggregation_by_hand():
    # g0 = (1, 0), g1 = (0, 1), g2 = (1, 1), g3 = (-2, -1): g3 points against the others.
    # sum = (0, 1): E(S) = |sum|² / 4 = 1/4
    # E(S∖i) = |sum - g_i|² / 3: 0: |(-1, 1)|²/3 = 2/3, 1: 0, 2: |(-1, 0)|²/3 = 1/3,
    #          3: |(2, 2)|²/3 = 8/3 -> key 3, 8/3 > 1/4: labeled and removed; E(S) = 8/3
    # S = {0, 1, 2}, sum = (2, 2): E(S∖i) = |sum - g_i|² / 2: 0: |(1, 2)|²/2 = 5/2,
    #          1: |(2, 1)|²/2 = 5/2, 2: |(1, 1)|²/2 = 1 -> key 0 (tie with 1: the lowest),
    #          5/2 <= 8/3: stop
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-2.0, -1.0]])
    members = np.ones(4, dtype=bool)
    assert expectations_without_each(g @ g.T, members) == pytest.approx([2 / 3, 0, 1 / 3, 8 / 3])
    kept, labeled = optimal_aggregation(g, min_kept=1)
    assert kept.dtype == np.int64
    assert kept.tolist() == [0, 1, 2] and labeled == [3]
    assert optimal_aggregation(g, min_kept=3)[1] == [3]
    kept, labeled = optimal_aggregation(g, min_kept=4)  # |S| = 4 is not above 4
    assert kept.tolist() == [0, 1, 2, 3] and labeled == []


def test_optimal_aggregation_ties_and_min_kept():
    # g0 = g1 = (1, 0), g2 = g3 = (-1, 0): sum 0, E(S) = 0
    # E(S∖i) = 1/3 for every i: a four-way tie, key 0 (the lowest), 1/3 > 0: removed
    # S = {1, 2, 3}, E = 1/3: E(S∖1) = |(-2, 0)|²/2 = 2, E(S∖2) = E(S∖3) = 0: key 1, removed
    # S = {2, 3}, E = 2: E(S∖i) = |(-1, 0)|²/1 = 1 <= 2: stop
    g = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]])
    for min_kept, kept, labeled in [
        (1, [2, 3], [0, 1]),
        (2, [2, 3], [0, 1]),
        (3, [1, 2, 3], [0]),
        (4, [0, 1, 2, 3], []),
        (9, [0, 1, 2, 3], []),
    ]:
        got_kept, got_labeled = optimal_aggregation(g, min_kept=min_kept)
        assert (got_kept.tolist(), got_labeled) == (kept, labeled), min_kept


def test_optimal_aggregation_edge_cases():
    kept, labeled = optimal_aggregation(np.zeros((0, 3)), min_kept=1)
    assert kept.dtype == np.int64 and kept.size == 0 and labeled == []
    assert optimal_aggregation(np.ones((1, 3)), min_kept=1)[0].tolist() == [0]
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError):
            optimal_aggregation(np.ones((3, 2)), min_kept=bad)
    with pytest.raises(ValueError):
        optimal_aggregation(np.array([[np.nan, 0.0], [1.0, 0.0]]), min_kept=1)
    with pytest.raises(ValueError):
        optimal_aggregation(np.ones(3), min_kept=1)


def feddel(g, min_kept):
    """The code's loop with E taken by its definition for every set (the loss check out)."""
    S = list(range(g.shape[0]))
    labeled = []
    e_s = expectation(g[S])
    while len(S) > min_kept:
        values = {i: expectation(g[[j for j in S if j != i]]) for i in S}
        key = max(S, key=lambda i: values[i])  # the first maximum in S's order
        if values[key] <= e_s:
            break
        labeled.append(key)
        S.remove(key)
        e_s = values[key]
    return S, labeled


def test_optimal_aggregation_against_the_definition():
    rng = np.random.default_rng(2022)
    removed = 0
    for _ in range(200):
        n, d = int(rng.integers(1, 11)), int(rng.integers(1, 8))
        g = rng.normal(size=(n, d)) + rng.normal(size=d)
        g[rng.random(n) < 0.3] *= -2.0  # some pull against the others
        min_kept = int(rng.integers(1, 9))
        kept, labeled = optimal_aggregation(g, min_kept=min_kept)
        want_kept, want_labeled = feddel(g, min_kept)
        assert (kept.tolist(), labeled) == (want_kept, want_labeled)
        removed += len(labeled)
    assert removed > 50


class Dense:
    """The code's probabilistic_selection on a plain array of K probabilities, its
    arithmetic on Python floats as the code's."""

    def __init__(self, K):
        self.p = np.full(K, 1.0 / K)
        self.count = np.zeros((K, 2), dtype=np.int64)  # selected, labeled

    def round(self, cohort, labeled, alpha=2.0, beta=0.7):
        self.count[cohort, 0] += 1
        self.count[labeled, 1] += 1
        weight = 0.0
        for i in labeled:
            ratio = int(self.count[i, 1]) / int(self.count[i, 0])
            change = float(self.p[i]) * min((ratio + beta) ** alpha, 1)
            weight += change
            self.p[i] = float(self.p[i]) - change
        rest = np.setdiff1d(np.arange(self.p.size), labeled)
        for i in rest.tolist():
            self.p[i] = float(self.p[i]) + weight / len(rest)


def lazy_round(probs, cohort, labeled, alpha=2.0, beta=0.7):
    probs.record_selected(cohort)
    probs.record_labeled(labeled)
    selected, times_labeled = probs.counts(labeled)
    probs.penalise(labeled, times_labeled / np.maximum(selected, 1), alpha=alpha, beta=beta)


@pytest.mark.parametrize(
    "K, m, alpha", [(7, 4, 2.0), (50, 10, 2.0), (1000, 10, 2.0), (60, 12, 1.0), (9, 5, 1.7)]
)
def test_probabilities_match_a_dense_array(K, m, alpha):
    rng = np.random.default_rng(K)
    dense, lazy = Dense(K), PnsProbabilities(K)
    was_zero = np.zeros(K, dtype=bool)
    regrown = 0
    for _ in range(12):
        cohort = rng.choice(K, m, replace=False)
        labeled = rng.permutation(cohort)[: int(rng.integers(0, 4))].tolist()
        dense.round(cohort, labeled, alpha)
        lazy_round(lazy, cohort, labeled, alpha)
        p = lazy.prob(np.arange(K))
        assert np.array_equal(p, dense.p)  # to the last bit, so within 1e-15 relative
        assert abs(math.fsum(p.tolist()) - 1.0) <= 1e-13
        assert np.all(p <= lazy.shift)
        regrown += int(np.sum(was_zero & (p > 0.0)))
        was_zero |= p == 0.0
        assert np.array_equal(np.stack(lazy.counts(np.arange(K)), axis=1), dense.count)
    # some went to 0 (ratio + beta >= 1) and grew back: p far below the shift
    assert was_zero.any() and regrown > 0


def unequal(K=6):
    """K clients with unequal probabilities: 0 halved-ish, 1 to 0, 2 lowered."""
    probs = PnsProbabilities(K)
    probs.penalise([0], [0.0])  # loses 0.49 of 1/6
    probs.penalise([1, 2], [1.0, 0.1])  # 1 loses all, 2 loses 0.64
    return probs


def binomial_ok(hits, trials, p):
    return abs(hits / trials - p) <= 4.0 * math.sqrt(p * (1.0 - p) / trials) + 1e-12


def test_draw_frequencies_match_the_probabilities():
    K, N = 6, 20_000
    probs = unequal(K)
    p = probs.prob(np.arange(K))
    assert p[1] == 0.0 and len(set(p.tolist())) == 4
    rng = np.random.default_rng(1)
    draws = np.array([probs.draw(rng, 3) for _ in range(N)])
    assert draws.dtype == np.int64
    assert all(len(set(row)) == 3 for row in draws.tolist())
    first = np.bincount(draws[:, 0], minlength=K)
    second = np.bincount(draws[:, 1], minlength=K)
    # successive sampling: P(second = j) = sum_{i != j} p_i p_j / (1 - p_i)
    p_second = np.array(
        [sum(p[i] * p[j] / (1 - p[i]) for i in range(K) if i != j) for j in range(K)]
    )
    for k in range(K):
        assert binomial_ok(first[k], N, p[k]), (k, first[k] / N, p[k])
        assert binomial_ok(second[k], N, p_second[k]), (k, second[k] / N, p_second[k])
    assert first[1] == second[1] == 0


def test_draw_skips_what_accept_refuses():
    K = 40
    probs = PnsProbabilities(K)
    probs.penalise([3, 4], [0.0, 0.2])
    rng = np.random.default_rng(3)
    refused = set(range(0, K, 3))
    asked = []

    def accept(ids):
        asked.append(ids.copy())
        return np.array([k not in refused for k in ids.tolist()], dtype=bool)

    seen = set()
    for _ in range(500):
        seen |= set(probs.draw(rng, 8, accept=accept).tolist())
    assert not seen & refused
    assert seen == set(range(K)) - refused
    assert asked and all(a.dtype == np.int64 for a in asked)


def test_draw_edge_cases_and_guard():
    probs = PnsProbabilities(3)
    rng = np.random.default_rng(0)
    assert probs.draw(rng, 0).tolist() == []
    assert sorted(probs.draw(rng, 3).tolist()) == [0, 1, 2]
    with pytest.raises(ValueError):
        probs.draw(rng, 4)
    probs.penalise([0, 1], [1.0, 0.5])  # both to 0, client 2 takes everything
    assert probs.prob([0, 1, 2]).tolist() == [0.0, 0.0, 1.0]
    assert probs.draw(rng, 1).tolist() == [2]
    with pytest.raises(RuntimeError, match="probability 0 or are not accepted"):
        probs.draw(rng, 2)
    with pytest.raises(RuntimeError):
        probs.draw(rng, 1, accept=lambda ids: ids != 2)
    with pytest.raises(ValueError):
        probs.penalise([0, 1, 2], [0.0, 0.0, 0.0])  # nobody left to take the mass
    with pytest.raises(ValueError):
        probs.penalise([0, 0], [0.0, 0.0])
    with pytest.raises(ValueError):
        probs.prob([3])


def test_state_dict_round_trip():
    K = 100
    rng = np.random.default_rng(11)
    probs = PnsProbabilities(K)
    for _ in range(5):
        cohort = probs.draw(rng, 10)
        lazy_round(probs, cohort, cohort[:2].tolist())
    state = probs.state_dict()
    for key, value in state.items():
        assert isinstance(value, (int, float, np.ndarray)), key
    assert state["counted_ids"].size == np.unique(state["counted_ids"]).size <= 50
    again = PnsProbabilities(K)
    again.load_state_dict(
        {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()}
    )
    ids = np.arange(K)
    assert np.array_equal(again.prob(ids), probs.prob(ids))
    assert all(
        np.array_equal(a, b) for a, b in zip(again.counts(ids), probs.counts(ids), strict=True)
    )
    seed = rng.bit_generator.state
    first = probs.draw(rng, 10)
    rng.bit_generator.state = seed
    assert np.array_equal(again.draw(rng, 10), first)
    with pytest.raises(ValueError):
        PnsProbabilities(K + 1).load_state_dict(state)


def test_ten_million_clients_hold_no_array_of_the_population():
    K, m = 10_000_000, 100
    rng = np.random.default_rng(5)
    probs = PnsProbabilities(K)
    tracemalloc.start()
    try:
        for _ in range(30):
            cohort = probs.draw(rng, m)
            lazy_round(probs, cohort, cohort[:3].tolist())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000
    state = probs.state_dict()
    labeled = probs.prob(state["labeled_ids"])
    total = (K - labeled.size) * probs.shift + math.fsum(labeled.tolist())
    assert abs(total - 1.0) <= 1e-12
    assert state["counted_ids"].size <= 30 * m

"""FedCS's Algorithm 2 by hand (the greedy order, Θ and t at each step, the deadline's cut),
its empty and hopeless cases, its tie rule and its zero denominators, and against a plain
transcription of the paper's pseudocode on random inputs; the round's duration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distfl.participation.fedcs import fedcs_round_s, fedcs_select

# Four clients, model_bytes = 10, T_cs = T_agg = 1:
#   position  t^UD  t^UL  rate  T^d alone (10 / rate)
#   0         5     2     10    1
#   1         2     3     5     2
#   2         8     4     10    1
#   3         1     6     2     5
UPDATE = [5.0, 2.0, 8.0, 1.0]
UPLOAD = [2.0, 3.0, 4.0, 6.0]
RATE = [10.0, 5.0, 10.0, 2.0]


def select(round_s, **kw):
    return fedcs_select(
        UPDATE, UPLOAD, RATE, model_bytes=10.0, round_s=round_s, t_cs=1.0, t_agg=1.0, **kw
    )


def duration(positions):
    return fedcs_round_s(positions, UPDATE, UPLOAD, RATE, model_bytes=10.0, t_cs=1.0, t_agg=1.0)


def test_worked_example_deadline_20():
    # step 1: S = {}, Θ = 0, T^d_S = 0; denominator = T^d_k + t^UL + max(0, t^UD - 0):
    #   0: 1+2+5 = 8   1: 2+3+2 = 7   2: 1+4+8 = 13   3: 5+6+1 = 12   -> x = 1
    #   Θ' = 0+3+max(0,2-0) = 5; t = 1 + T^d_{1} 2 + 5 + 1 = 9 < 20: add; Θ = 5, T^d_S = 2
    # step 2: denominator = (T^d_{S∪k} - 2) + t^UL + max(0, t^UD - 5):
    #   0: 0+2+0 = 2   2: 0+4+3 = 7   3: (5-2)+6+0 = 9   -> x = 0
    #   Θ' = 5+2+0 = 7; t = 1+2+7+1 = 11 < 20: add; Θ = 7
    # step 3: 2: 0+4+max(0,8-7) = 5   3: 3+6+0 = 9   -> x = 2
    #   Θ' = 7+4+1 = 12; t = 1+2+12+1 = 16 < 20: add; Θ = 12
    # step 4: 3: Θ' = 12+6+0 = 18; t = 1 + T^d_{S∪3} 5 + 18 + 1 = 25 >= 20: refused
    chosen = select(20.0)
    assert chosen.dtype == np.int64
    assert chosen.tolist() == [1, 0, 2]
    assert duration(chosen) == 16.0
    assert duration([1]) == 9.0 and duration([1, 0]) == 11.0


def test_worked_example_deadline_is_strict():
    # deadline 16: steps 1 and 2 as above (t = 9, 11); step 3: client 2 makes t = 16, not
    # below 16: refused, Θ stays 7; step 4: client 3: Θ' = 7+6+0 = 13, t = 1+5+13+1 = 20:
    # refused
    assert select(16.0).tolist() == [1, 0]
    assert select(16.0 + 1e-9).tolist() == [1, 0, 2]
    # deadline 9: client 1 alone makes t = 9: refused; then client 0 alone (denominator 8):
    # Θ' = 0+2+5 = 7, t = 1+1+7+1 = 10: refused; the others likewise
    assert select(9.0).tolist() == []


def test_a_deadline_nobody_meets():
    assert select(0.5).tolist() == []
    assert select(-1.0).tolist() == []
    assert duration([]) == 2.0  # T_cs + T_agg


def test_no_candidates():
    chosen = fedcs_select([], [], [], model_bytes=10.0, round_s=100.0)
    assert chosen.dtype == np.int64 and chosen.shape == (0,)
    assert fedcs_round_s([], [], [], [], model_bytes=10.0, t_cs=0.5, t_agg=0.25) == 0.75


def test_ties_go_to_the_lowest_position():
    # three identical clients: each step's scores tie, the lowest position remaining wins
    chosen = fedcs_select([1.0] * 3, [1.0] * 3, [1.0] * 3, model_bytes=1.0, round_s=100.0)
    assert chosen.tolist() == [0, 1, 2]
    # step 1: denominators T^d 1 + t^UL + t^UD 1 = [4, 3, 4, 3]: 1 and 3 tie, 1 wins; Θ = 2
    # step 2: no more T^d, updates done by Θ = 2: denominators t^UL = [2, -, 2, 1]: 3; Θ = 3
    # steps 3 and 4: 0 and 2 tie at 2: 0 (Θ = 5), then 2 (Θ = 7)
    chosen = fedcs_select(
        [1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 2.0, 1.0], [1.0] * 4, model_bytes=1.0, round_s=100.0
    )
    assert chosen.tolist() == [1, 3, 0, 2]


def test_a_zero_denominator_is_picked_first_without_warnings():
    # no model to send and clients 1 and 3 take no time: denominators 0 (score +inf), the
    # lowest position first; client 0 (denominator 3) and 2 (denominator 1) after
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = fedcs_select(
            [1.0, 0.0, 0.0, 0.0],
            [2.0, 0.0, 1.0, 0.0],
            [1.0, 1.0, 1.0, 1.0],
            model_bytes=0.0,
            round_s=10.0,
        )
    # Θ: 0 (client 1), 0 (client 3), then client 2: 0+1+0 = 1, client 0: 1+2+max(0,1-1) = 3
    assert chosen.tolist() == [1, 3, 2, 0]
    assert fedcs_round_s(chosen, [1, 0, 0, 0], [2, 0, 1, 0], [1] * 4, model_bytes=0.0) == 3.0


def pseudocode(update, upload, rate, model_bytes, round_s, t_cs, t_agg):
    """Algorithm 2 written out with Python lists and loops, as the paper states it."""

    def td(S):
        return model_bytes / min(rate[k] for k in S) if S else 0.0

    K = list(range(len(update)))
    S: list[int] = []
    theta = 0.0
    while len(K) > 0:
        best, best_score = None, None
        for k in K:  # K stays ascending: the first of equal scores is the lowest position
            denom = td(S + [k]) - td(S) + upload[k] + max(0.0, update[k] - theta)
            score = float("inf") if denom == 0.0 else 1.0 / denom
            if best is None or score > best_score:
                best, best_score = k, score
        x = best
        K.remove(x)
        theta_next = theta + upload[x] + max(0.0, update[x] - theta)
        t = t_cs + td(S + [x]) + theta_next + t_agg
        if t < round_s:
            theta = theta_next
            S.append(x)
    return S, t_cs + td(S) + theta + t_agg


def test_against_the_pseudocode_on_random_inputs():
    rng = np.random.default_rng(20190520)
    cuts = 0
    for case in range(200):
        n = int(rng.integers(0, 13))
        update = rng.exponential(5.0, n)
        upload = rng.exponential(2.0, n)
        rate = rng.uniform(0.5, 10.0, n)
        if case % 3 == 0:  # a coarse grid: many ties
            update, upload, rate = np.round(update), np.round(upload), np.ceil(rate)
        model_bytes = float(rng.uniform(0.0, 20.0))
        t_cs, t_agg = float(rng.uniform(0.0, 2.0)), float(rng.uniform(0.0, 2.0))
        round_s = float(rng.uniform(0.0, 40.0))
        want, want_s = pseudocode(
            update.tolist(), upload.tolist(), rate.tolist(), model_bytes, round_s, t_cs, t_agg
        )
        got = fedcs_select(
            update, upload, rate, model_bytes=model_bytes, round_s=round_s, t_cs=t_cs, t_agg=t_agg
        )
        assert got.tolist() == want, case
        got_s = fedcs_round_s(
            got, update, upload, rate, model_bytes=model_bytes, t_cs=t_cs, t_agg=t_agg
        )
        assert got_s == want_s
        if got.size:
            assert got_s < round_s
        cuts += 0 < got.size < n
    assert cuts > 30  # the deadline cuts the cohort in many of the cases


@pytest.mark.parametrize(
    "update, upload, rate",
    [
        ([1.0, -1.0], [1.0, 1.0], [1.0, 1.0]),
        ([1.0, 1.0], [1.0, np.nan], [1.0, 1.0]),
        ([1.0, 1.0], [1.0, 1.0], [1.0, 0.0]),
        ([1.0, 1.0], [1.0], [1.0, 1.0]),
    ],
)
def test_bad_resources_are_refused(update, upload, rate):
    with pytest.raises(ValueError):
        fedcs_select(update, upload, rate, model_bytes=1.0, round_s=10.0)


def test_bad_selections_are_refused():
    for positions in ([0, 0], [4], [-1], [0.5]):
        with pytest.raises(ValueError):
            duration(positions)

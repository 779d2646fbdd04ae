"""Exact sums with one int64 per value (``comm.sums = "scaled"``): distfl.exact's
segment_bounds, grid_exponents, quantise_sum and from_scaled.

Expected values come from Python's ``fractions.Fraction`` (exact rational arithmetic) and
from hand-computed exponents, never from the code under test.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from distfl.errors import DivergedError
from distfl.exact import (
    MIN_EXPONENT,
    SumLayout,
    element_scales,
    from_scaled,
    grid_exponents,
    quantise_sum,
    segment_bounds,
)


def f32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def bits(t: torch.Tensor) -> list[int]:
    return t.to(torch.float64).contiguous().view(torch.int64).tolist()


def scaled_sum(new, start, counts, segments, *, groups=None) -> torch.Tensor:
    """The whole pipeline as the runtime runs it, with the clients split into ``groups``
    (lists of row indices, one per simulated rank): local bounds, their max, the grids,
    each group's integer sum, the integer total, the float64 result."""
    n = new.shape[0]
    groups = groups if groups is not None else [list(range(n))]
    bounds = torch.stack([segment_bounds(new[g], start, counts[g], segments) for g in groups]).amax(
        dim=0
    )
    exps = grid_exponents(bounds[None, :], torch.tensor([n]))[0]
    scales = element_scales(exps, segments)
    total = sum(quantise_sum(new[g], start, counts[g], scales) for g in groups)
    return from_scaled(total, exps, segments)


def random_clients(rng: np.random.Generator, n: int, p: int, spread: float = 6.0):
    start = torch.from_numpy(rng.normal(size=p).astype(np.float32))
    scale = 10.0 ** rng.uniform(-spread, 0, size=(n, p))
    new = start + torch.from_numpy((rng.normal(size=(n, p)) * scale).astype(np.float32))
    counts = torch.from_numpy(rng.integers(1, 500, size=n).astype(np.float64))
    return new, start, counts


# --------------------------------------------------------------------------- grids


def test_grid_exponents_hand_computed():
    # b = 0.75 = 0.75 * 2^0 (E = 0); N = 1 (c = 0): e = 0 + 1 + 0 - 62 = -61
    # b = 3.0 = 0.75 * 2^2 (E = 2); N = 1: e = -59
    # b = 1.0 = 0.5 * 2^1 (E = 1); N = 3 (c = 2): e = 1 + 1 + 2 - 62 = -58
    # b = 0: the finest grid
    bounds = torch.tensor([[0.75, 3.0], [1.0, 0.0]], dtype=torch.float64)
    exps = grid_exponents(bounds, torch.tensor([1, 3]))
    assert exps.tolist() == [[-61, -59], [-58, MIN_EXPONENT]]


@pytest.mark.parametrize("n, c", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (1024, 10), (1025, 11)])
def test_grid_exponent_grows_with_the_number_of_terms(n, c):
    exps = grid_exponents(torch.tensor([[0.5]], dtype=torch.float64), torch.tensor([n]))
    assert int(exps[0, 0]) == 0 + 1 + c - 62


def test_element_scales_repeat_per_segment_exactly():
    scales = element_scales(torch.tensor([-61, 3]), (2, 3))
    assert scales.tolist() == [2.0**61, 2.0**61, 2.0**-3, 2.0**-3, 2.0**-3]


def test_bound_is_at_least_half_the_largest_weighted_term():
    new = f32([[1.0, 0.5, -3.0], [0.25, 2.0, 0.0]])
    start = f32([0.0, 0.0, 1.0])
    counts = torch.tensor([2.0, 5.0], dtype=torch.float64)
    # |Δ| rows: [1, .5, 4], [.25, 2, 1]; weighted: [2, 1, 8], [1.25, 10, 5]
    bound = segment_bounds(new, start, counts, (1, 2))
    assert bound.tolist() == [2.0, 10.0]


def test_bound_of_nan_or_inf_is_inf_and_refused_on_every_rank():
    new = f32([[float("nan"), 1.0], [0.0, 1.0]])
    bound = segment_bounds(new, f32([0.0, 0.0]), torch.ones(2, dtype=torch.float64), (1, 1))
    assert bound[0] == math.inf and bound[1] == 1.0
    with pytest.raises(DivergedError, match="NaN or Inf"):
        grid_exponents(bound[None, :], torch.tensor([2]))
    inf = segment_bounds(f32([[float("inf")]]), f32([0.0]), torch.ones(1), (1,))
    with pytest.raises(FloatingPointError):
        grid_exponents(inf[None, :], torch.tensor([1]))


def test_a_bound_of_two_to_the_900_is_refused():
    with pytest.raises(DivergedError, match="2\\^900"):
        grid_exponents(torch.tensor([[2.0**900]], dtype=torch.float64), torch.tensor([1]))
    grid_exponents(torch.tensor([[2.0**899]], dtype=torch.float64), torch.tensor([1]))


# --------------------------------------------------------------------------- exactness


def test_order_and_grouping_do_not_change_the_bits():
    rng = np.random.default_rng(3)
    new, start, counts = random_clients(rng, 40, 257)
    segments = (200, 50, 7)
    reference = bits(scaled_sum(new, start, counts, segments))
    r = random.Random(5)
    for _ in range(12):
        order = list(range(40))
        r.shuffle(order)
        cuts = sorted(r.sample(range(1, 40), r.randint(0, 6)))
        groups = [order[a:b] for a, b in zip([0, *cuts], [*cuts, 40], strict=True)]
        assert bits(scaled_sum(new, start, counts, segments, groups=groups)) == reference


def test_result_is_the_exact_sum_to_the_grid():
    """Each term is rounded once to its grid: the result is within N/2 grid steps of the
    exact rational sum (plus float64's final rounding), and far closer than float32."""
    rng = np.random.default_rng(11)
    n, p = 25, 64
    new, start, counts = random_clients(rng, n, p)
    got = scaled_sum(new, start, counts, (p,))
    bound = segment_bounds(new, start, counts, (p,))
    step = 2.0 ** int(grid_exponents(bound[None, :], torch.tensor([n]))[0, 0])
    for j in range(p):
        exact = sum(
            Fraction(float(counts[k])) * (Fraction(float(new[k, j])) - Fraction(float(start[j])))
            for k in range(n)
        )
        err = abs(Fraction(float(got[j])) - exact)
        assert err <= Fraction(n, 2) * Fraction(step) + abs(exact) * Fraction(1, 2**52)
        # and that is below float32's resolution of the largest term by a wide margin
        assert err < float(bound[0]) * 2.0**-40


def test_grid_values_round_trip_exactly():
    # terms already on the grid: the sum is exact, whatever their signs and sizes
    start = f32([0.0, 0.0])
    new = f32([[0.5, -0.375], [-0.25, 1.0], [2.0**-20, -(2.0**-24)]])
    counts = torch.ones(3, dtype=torch.float64)
    got = scaled_sum(new, start, counts, (2,))
    assert got.tolist() == [0.25 + 2.0**-20, 0.625 - 2.0**-24]


def test_terms_at_the_edge_of_the_grid():
    """N terms each as large as the bound allows sum to just below 2^63 on the grid, and
    terms below half a grid step vanish (half to even)."""
    n = 4
    big = 2.0**10
    start = f32([0.0, 0.0])
    new = torch.tensor([[big, -big]] * n, dtype=torch.float32)
    counts = torch.ones(n, dtype=torch.float64)
    bound = segment_bounds(new, start, counts, (2,))
    exps = grid_exponents(bound[None, :], torch.tensor([n]))[0]
    scales = element_scales(exps, (2,))
    total = quantise_sum(new, start, counts, scales)
    # b = 2^10 = 0.5 * 2^11 (E = 11), c = 2: e = 11 + 1 + 2 - 62 = -48; each term 2^58
    assert int(exps[0]) == -48
    assert total.tolist() == [n * 2**58, -n * 2**58]
    assert from_scaled(total, exps, (2,)).tolist() == [n * big, -n * big]
    # a term of exactly half a step rounds to even (0), 1.5 steps to 2 steps
    step = 2.0**-48
    tiny = torch.tensor([[big, 0.5 * step * 2**20]], dtype=torch.float32)
    q = quantise_sum(tiny, start, torch.tensor([2.0**-20]), scales)
    assert q.tolist()[1] == 0


def test_opposite_terms_cancel_exactly_and_zero_segments_stay_zero():
    start = f32([1.0, 5.0])
    new = f32([[1.5, 5.0], [0.5, 5.0]])
    got = scaled_sum(new, start, torch.ones(2, dtype=torch.float64), (1, 1))
    assert got.tolist() == [0.0, 0.0]


def test_layout_width_and_decode():
    scaled, limbs = SumLayout("scaled", (3, 2)), SumLayout("limbs", (3, 2))
    assert scaled.num_params == 5 and scaled.width == 6 and limbs.width == 16
    row = torch.tensor([1, -2, 3, 4, 5], dtype=torch.int64)
    out = scaled.decode(row, torch.tensor([-1, 2]))
    assert out.tolist() == [0.5, -1.0, 1.5, 16.0, 20.0]

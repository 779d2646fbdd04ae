"""Exact fixed-point sums: distfl.exact.to_limbs / from_limbs.

Expected values come from Python's ``fractions.Fraction`` (exact rational arithmetic)
and from hand-computed limb patterns, never from the code under test.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from distfl.exact import NUM_LIMBS, from_limbs, to_limbs

GRID = Fraction(1, 2**64)


def grid_round(v: float) -> Fraction:
    """v rounded to the 2^-64 grid, round half to even (Python's round on a Fraction)."""
    return Fraction(round(Fraction(v) / GRID)) * GRID


def f64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def random_terms(rng: np.random.Generator, shape, lo_exp=-12, hi_exp=3) -> np.ndarray:
    """Mixed signs, magnitudes log-uniform in [10^lo_exp, 10^hi_exp]."""
    mag = 10.0 ** rng.uniform(lo_exp, hi_exp, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return sign * mag


def limbs_of_terms(terms: np.ndarray) -> torch.Tensor:
    """[T, P] float64 terms -> [T, 3, P] int64 limbs, one term at a time."""
    return torch.stack([to_limbs(torch.from_numpy(row)) for row in terms])


def bits(t: torch.Tensor) -> list[int]:
    return t.to(torch.float64).contiguous().view(torch.int64).tolist()


# --------------------------------------------------------------------------- shapes


def test_shape_and_dtype():
    limbs = to_limbs(f64([0.5, -2.0, 3.25]))
    assert limbs.shape == (NUM_LIMBS, 3)
    assert limbs.dtype == torch.int64
    out = from_limbs(limbs)
    assert out.shape == (3,)
    assert out.dtype == torch.float64


def test_empty_tensor():
    limbs = to_limbs(torch.zeros(0, dtype=torch.float64))
    assert limbs.shape == (NUM_LIMBS, 0)
    assert from_limbs(limbs).shape == (0,)


# --------------------------------------------------------------------------- hand-computed limbs


@pytest.mark.parametrize(
    "value, expected",
    [
        (0.0, [0, 0, 0]),
        (1.0, [1, 0, 0]),
        (1.5, [1, 2**31, 0]),  # 0.5 = 2^31 * 2^-32
        (2.0**-32, [0, 1, 0]),
        (2.0**-64, [0, 0, 1]),
        (2.0**-20 + 2.0**-32 + 5 * 2.0**-64, [0, 2**12 + 1, 5]),  # 45 significant bits
        (-(3.0 + 2.0**-32), [-3, -1, 0]),  # sign applied to every limb
        (2.0**31 - 1.0, [2**31 - 1, 0, 0]),
        (0.25 + 2.0**-40, [0, 2**30, 2**24]),  # 2^-40 = 2^24 * 2^-64
    ],
)
def test_limbs_hand_computed(value, expected):
    assert to_limbs(f64([value]))[:, 0].tolist() == expected


@pytest.mark.parametrize(
    "value, low",
    [
        (2.0**-65, 0),  # 0.5 units -> 0 (even)
        (3 * 2.0**-65, 2),  # 1.5 units -> 2 (even)
        (5 * 2.0**-65, 2),  # 2.5 units -> 2 (even)
        (7 * 2.0**-66, 2),  # 1.75 units -> 2
        (2.0**-66, 0),  # 0.25 units -> 0
    ],
)
def test_rounding_to_grid_is_half_to_even(value, low):
    assert to_limbs(f64([value]))[:, 0].tolist() == [0, 0, low]


def test_negative_limbs_are_negated_positive_limbs():
    rng = np.random.default_rng(1)
    v = np.abs(random_terms(rng, 200))
    pos = to_limbs(torch.from_numpy(v))
    neg = to_limbs(torch.from_numpy(-v))
    assert torch.equal(neg, -pos)


def test_float32_input_is_accepted():
    v32 = torch.tensor([0.1, -2.5], dtype=torch.float32)
    out = from_limbs(to_limbs(v32))
    # float32 values have 24 significant bits and |v| >= 2^-4: on the grid, exact
    assert out.tolist() == [float(v32[0]), -2.5]


# --------------------------------------------------------------------------- normalisation


def test_from_limbs_depends_only_on_the_integer_value():
    """Different limb vectors holding the same integer give the same float."""
    a = torch.tensor([[1], [2**31], [0]], dtype=torch.int64)  # 1.5
    b = torch.tensor([[0], [2**31 + 2**32], [0]], dtype=torch.int64)  # 1.5, carry in mid
    c = torch.tensor([[2], [-(2**31)], [0]], dtype=torch.int64)  # 1.5, borrow from top
    d = torch.tensor([[1], [2**31 - 1], [2**32]], dtype=torch.int64)  # 1.5, carry in low
    assert [float(from_limbs(x)[0]) for x in (a, b, c, d)] == [1.5] * 4


def test_from_limbs_mixed_sign_limbs():
    # 5 - 2^-32 + 2^20 * 2^-64 (47 significant bits: exactly representable), held in
    # limbs of mixed signs as a sum of positive and negative terms produces
    x = torch.tensor([[5], [-1], [2**20]], dtype=torch.int64)
    expected = Fraction(5) - Fraction(1, 2**32) + 2**20 * GRID
    assert Fraction(float(from_limbs(x)[0])) == expected
    # cancelling limbs give exactly zero
    z = torch.tensor([[1], [-(2**32)], [0]], dtype=torch.int64)
    assert float(from_limbs(z)[0]) == 0.0


# --------------------------------------------------------------------------- (a) order independence


def test_sum_is_bit_identical_whatever_the_order_and_grouping():
    rng = np.random.default_rng(1234)
    terms = random_terms(rng, (500, 16))
    limbs = limbs_of_terms(terms)  # [T, 3, P]

    reference = from_limbs(limbs.sum(dim=0))
    ref_bits = bits(reference)

    py_rng = random.Random(99)
    for trial in range(6):
        order = list(range(len(terms)))
        py_rng.shuffle(order)
        shuffled = limbs[order]
        # sequential accumulation, one term at a time, in the shuffled order
        acc = torch.zeros_like(shuffled[0])
        for term in shuffled:
            acc += term
        assert bits(from_limbs(acc)) == ref_bits
        # chunked: sum chunks of uneven sizes, then sum the chunk sums in reverse
        cuts = sorted(py_rng.sample(range(1, len(terms)), 7 + trial))
        chunks = torch.tensor_split(shuffled, cuts)
        partial = [c.sum(dim=0) for c in chunks]
        total = torch.zeros_like(partial[0])
        for p in reversed(partial):
            total += p
        assert bits(from_limbs(total)) == ref_bits
        # pairwise tree reduction (like a ring/tree collective)
        level = list(shuffled)
        while len(level) > 1:
            level = [
                level[i] + level[i + 1] if i + 1 < len(level) else level[i]
                for i in range(0, len(level), 2)
            ]
        assert bits(from_limbs(level[0])) == ref_bits


def test_float_sums_do_depend_on_order_but_limb_sums_do_not():
    """The point of the module: a case where plain float64 sums disagree."""
    terms = [1e3, 1e-12, -1e3, 1e-12] * 50
    a = sum(terms)
    b = sum(sorted(terms))
    assert a != b  # the premise: float addition is not associative here
    limbs = [to_limbs(f64([t])) for t in terms]
    la = sum(limbs, torch.zeros(3, 1, dtype=torch.int64))
    lb = sum(
        sorted(limbs, key=lambda x: float(from_limbs(x)[0])), torch.zeros(3, 1, dtype=torch.int64)
    )
    assert torch.equal(la, lb)
    assert bits(from_limbs(la)) == bits(from_limbs(lb))


# --------------------------------------------------------------------------- (b) accuracy


def test_sum_matches_exact_rational_sum_and_fsum():
    rng = np.random.default_rng(7)
    n_terms, width = 300, 12
    terms = random_terms(rng, (n_terms, width))
    out = from_limbs(limbs_of_terms(terms).sum(dim=0))

    for j in range(width):
        col = terms[:, j].tolist()
        exact = sum((grid_round(v) for v in col), Fraction(0))
        got = Fraction(float(out[j]))
        # the best a float64 can do is to round the exact value; allow one ulp, and never
        # less than 2^-60 absolute
        tol = max(Fraction(2) ** -60, Fraction(math.ulp(float(exact))))
        assert abs(got - exact) <= tol, (j, float(got - exact))
        # and against the correctly rounded sum of the raw values: each term moved by at
        # most half a grid step, plus the final roundings
        fs = math.fsum(col)
        bound = n_terms * 2.0**-65 + 2 * math.ulp(fs)
        assert abs(float(out[j]) - fs) <= bound


def test_small_positive_sums_are_accurate_to_the_grid():
    """Sums below 1 in magnitude keep relative float64 accuracy (positive result)."""
    rng = np.random.default_rng(3)
    terms = np.abs(random_terms(rng, (200, 8), lo_exp=-12, hi_exp=-6))
    out = from_limbs(limbs_of_terms(terms).sum(dim=0))
    for j in range(terms.shape[1]):
        exact = sum((grid_round(v) for v in terms[:, j].tolist()), Fraction(0))
        assert exact > 0
        err = abs(Fraction(float(out[j])) - exact)
        assert err <= max(Fraction(2) ** -60, Fraction(math.ulp(float(exact))))


def test_small_negative_sum_is_accurate():
    terms = [1e-3, -1e-3 - 1e-12]
    limbs = sum((to_limbs(f64([t])) for t in terms), torch.zeros(3, 1, dtype=torch.int64))
    exact = sum((grid_round(t) for t in terms), Fraction(0))
    got = Fraction(float(from_limbs(limbs)[0]))
    assert abs(got - exact) <= max(Fraction(2) ** -60, Fraction(math.ulp(float(exact))))


# --------------------------------------------------------------------------- (c) round trip


def grid_values(rng: np.random.Generator, n: int, min_exp: int) -> list[float]:
    """Positive floats m * 2^e with m < 2^53 and e >= min_exp, below 2^31."""
    out = []
    for _ in range(n):
        m = int(rng.integers(1, 2**53))
        e = int(rng.integers(min_exp, 31 - 53 + 1))
        v = math.ldexp(m, e)
        assert Fraction(v) == Fraction(m) * Fraction(2) ** e  # exactly representable
        out.append(v)
    return out


def test_round_trip_is_exact_for_positive_grid_values():
    rng = np.random.default_rng(11)
    values = grid_values(rng, 400, -64) + [2.0**-64, 1.0, 2.0**31 - 2.0**-22, 0.1 + 0.2]
    # 0.1 + 0.2 is a float64 >= 2^-2: its last bit is 2^-54, on the grid
    out = from_limbs(to_limbs(f64(values)))
    assert out.tolist() == values


def test_round_trip_is_exact_for_negative_values_of_magnitude_at_least_one():
    rng = np.random.default_rng(12)
    values = [-v for v in grid_values(rng, 400, -52) if v >= 1.0]
    values += [-1.0, -(1 + 2.0**-52), -(2.0**31 - 2.0**-22), -1234.5]
    out = from_limbs(to_limbs(f64(values)))
    assert out.tolist() == values


def test_round_trip_negative_values_with_coarse_bits():
    # below 1 in magnitude, but every bit at 2^-53 or above
    values = [-0.5, -0.25, -(2.0**-20), -(0.5 + 2.0**-53), -(3 * 2.0**-40), -0.75]
    out = from_limbs(to_limbs(f64(values)))
    assert out.tolist() == values


@pytest.mark.parametrize("value", [-(2.0**-60), -(3 * 2.0**-64), -(2.0**-11 + 2.0**-63)])
def test_round_trip_negative_values_with_fine_bits(value):
    out = from_limbs(to_limbs(f64([value])))
    assert out.tolist() == [value]


def test_round_trip_of_off_grid_values_rounds_to_grid():
    # positive values finer than the grid come back rounded to the grid
    values = [1e-30, 1e-20, 3e-19, 1.0 + 2.0**-52, 7e-5]
    out = from_limbs(to_limbs(f64(values)))
    # every grid-rounded value here has fewer than 53 significant bits: exact
    assert [Fraction(x) for x in out.tolist()] == [grid_round(v) for v in values]
    assert out.tolist()[:2] == [0.0, 0.0]


# --------------------------------------------------------------------------- (d) signs and zero


def test_zero_and_negative_zero():
    limbs = to_limbs(f64([0.0, -0.0]))
    assert limbs.tolist() == [[0, 0], [0, 0], [0, 0]]
    assert from_limbs(limbs).tolist() == [0.0, 0.0]


def test_opposite_terms_cancel_exactly():
    rng = np.random.default_rng(5)
    v = random_terms(rng, 64)
    total = to_limbs(torch.from_numpy(v)) + to_limbs(torch.from_numpy(-v))
    assert torch.count_nonzero(total) == 0
    assert from_limbs(total).tolist() == [0.0] * 64


def test_negative_sum_of_mixed_terms():
    terms = [-2.5, 1.25, -0.125, -3.0]  # all on the grid, exact sum -4.375
    limbs = sum((to_limbs(f64([t])) for t in terms), torch.zeros(3, 1, dtype=torch.int64))
    assert from_limbs(limbs).tolist() == [-4.375]


# --------------------------------------------------------------------------- (e) errors


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_raises_floating_point_error(bad):
    with pytest.raises(FloatingPointError):
        to_limbs(f64([1.0, bad, 2.0]))


@pytest.mark.parametrize("big", [2.0**31, -(2.0**31), 1e12, -3e9])
def test_too_large_raises_overflow_error(big):
    with pytest.raises(OverflowError):
        to_limbs(f64([0.0, big]))


def test_just_below_the_limit_is_accepted():
    top = 2.0**31 - 2.0**-22  # the largest float64 below 2^31
    limbs = to_limbs(f64([top, -top]))
    assert limbs[0].tolist() == [2**31 - 1, -(2**31 - 1)]
    assert from_limbs(limbs).tolist() == [top, -top]

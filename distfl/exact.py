"""Exact, order-independent sums of model updates across ranks.

A float sum depends on the order of its terms, and the order of a reduction depends on
the world size and on the collective's algorithm (ring, tree, MPI's choice). To make
W=1, torchrun and mpiexec give the same bits, every weighted client update is put on a
fixed-point grid of 2^-64 and held as three signed 64-bit limbs of 32 bits each
(value = l2·2^32 + l1 + l0·2^-32, in units of 2^-32·2^-32). Integer sums are associative,
so any reduction order gives the same integers; the float64 value is rebuilt from them
once, on the server.

Range: |value| < 2^31 per term; up to 2^31 terms before a limb could overflow. Terms
finer than 2^-64 are rounded to the grid (round half to even), which is far below
float32 resolution for any realistic parameter.
"""

from __future__ import annotations

import math

import torch

NUM_LIMBS = 3
_SHIFT = 32
_SCALE = 2.0**64
_MAX_ABS = 2.0**31


def to_limbs(values: torch.Tensor) -> torch.Tensor:
    """float tensor [n] -> int64 limbs [3, n] (top, middle, bottom) on the 2^-64 grid."""
    v = values.to(torch.float64).reshape(-1)
    a = v.abs()
    if a.numel():
        biggest = float(a.max())  # NaN propagates through max
        if not math.isfinite(biggest):
            raise FloatingPointError("a client update holds NaN or Inf (diverged training?)")
        if biggest >= _MAX_ABS:
            raise OverflowError(f"a weighted client update exceeds {_MAX_ABS:g} in magnitude")
    # |v|·2^64 = whole·2^32 + frac·2^32 with whole = floor(|v|·2^32) < 2^63: every step is
    # exact (scaling by powers of two, floor, and a subtraction that loses no bits), and
    # rounding frac·2^32 rounds |v|·2^64 itself (half to even), since whole·2^32 is whole.
    a.mul_(2.0**32)
    whole = torch.floor(a)
    low = a.sub_(whole).mul_(2.0**32).round_()
    top = torch.floor(whole * 2.0**-32)
    mid = whole.sub_(top * 2.0**32)
    sign = torch.where(v < 0, -1.0, 1.0).to(torch.float64)
    limbs = torch.empty((NUM_LIMBS, v.numel()), dtype=torch.int64)
    for i, part in enumerate((top, mid, low)):  # the sign goes on each limb, exactly
        limbs[i].copy_(part.mul_(sign))
    return limbs


def from_limbs(limbs: torch.Tensor) -> torch.Tensor:
    """int64 limbs [3, n] (possibly sums of many terms) -> float64 [n].

    The limbs are first normalised (carries propagated) so that the result is a
    deterministic function of the exact integer value they hold."""
    top, mid, low = _normalise(limbs[0], limbs[1], limbs[2])
    # Work on the magnitude, so that a small negative value is not rebuilt as -1 + (1 - |v|),
    # which would lose its low bits: negate, then normalise again (top >= 0 afterwards).
    negative = top < 0
    ntop, nmid, nlow = _normalise(-top, -mid, -low)
    top = torch.where(negative, ntop, top)
    mid = torch.where(negative, nmid, mid)
    low = torch.where(negative, nlow, low)
    # 0 <= low, mid < 2^32: the fraction mid·2^32 + low is rounded once, relative to itself
    frac = (mid.to(torch.float64) * 2.0**32 + low.to(torch.float64)) / _SCALE
    magnitude = top.to(torch.float64) + frac
    return torch.where(negative, -magnitude, magnitude)


def _normalise(top: torch.Tensor, mid: torch.Tensor, low: torch.Tensor):
    """Propagate carries so that 0 <= low, mid < 2^32; the value is unchanged."""
    carry = torch.div(low, 2**_SHIFT, rounding_mode="floor")
    low = low - carry * 2**_SHIFT
    mid = mid + carry
    carry = torch.div(mid, 2**_SHIFT, rounding_mode="floor")
    mid = mid - carry * 2**_SHIFT
    return top + carry, mid, low

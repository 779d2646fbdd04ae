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

import torch

NUM_LIMBS = 3
_SHIFT = 32
_SCALE = 2.0**64
_MAX_ABS = 2.0**31


def to_limbs(values: torch.Tensor) -> torch.Tensor:
    """float tensor [n] -> int64 limbs [3, n] (top, middle, bottom) on the 2^-64 grid."""
    v = values.to(torch.float64)
    if not torch.isfinite(v).all():
        raise FloatingPointError("a client update holds NaN or Inf (diverged training?)")
    if v.numel() and float(v.abs().max()) >= _MAX_ABS:
        raise OverflowError(f"a weighted client update exceeds {_MAX_ABS:g} in magnitude")
    sign = torch.sign(v)
    x = torch.round(v.abs() * _SCALE)  # exact: scaling by a power of two, then rounding
    top = torch.floor(x / 2.0**64)
    x = x - top * 2.0**64  # exact: the remainder has no more significant bits than x
    mid = torch.floor(x / 2.0**32)
    low = x - mid * 2.0**32
    limbs = torch.stack([top, mid, low]).to(torch.int64)
    return limbs * sign.to(torch.int64)


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

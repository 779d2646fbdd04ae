"""Exact, order-independent sums of model updates across ranks.

A float sum depends on the order of its terms, and the order of a reduction depends on
the world size and on the collective's algorithm (ring, tree, MPI's choice). To make
W=1, torchrun and mpiexec give the same bits, every weighted client update n_k (θ_k - θ)
is put on a fixed-point grid and held as integers; integer sums are associative, so any
reduction order gives the same integers, and the float64 value is rebuilt from them once,
on the server. Two formats (``comm.sums``):

``scaled`` (the default): one int64 per value. Each round, every model's parameter tensor
gets its own grid 2^e, agreed by all ranks through a max all-reduce of a bound on its
terms' magnitudes (:func:`segment_bounds`, :func:`grid_exponents`): with N terms, each is
below 2^62/N on its grid, so no order of summing them can overflow. A grid step is at
most N·2^-59 of the bound b (the largest term to within a factor of 2); each term is
rounded to it once (half to even), so the sum of N terms is within N²·2^-60·b of their
exact sum.

``limbs`` (distfl 0.1.0's): a fixed grid of 2^-64 and three signed 64-bit limbs of 32 bits
each (value = l2·2^32 + l1 + l0·2^-32, in units of 2^-32·2^-32). Range: |value| < 2^31 per
term; up to 2^31 terms before a limb could overflow. Kept so that run files written with
it resume to the same bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from distfl.errors import DivergedError

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


# --------------------------------------------------------------------------- one int64 per value

#: the formats of ``comm.sums``
FORMATS = ("scaled", "limbs")
#: no grid is finer than 2^MIN_EXPONENT (all-zero segments use it)
MIN_EXPONENT = -1000
#: a weighted client update of at least 2^MAX_BOUND_EXPONENT in magnitude is refused
MAX_BOUND_EXPONENT = 900
#: each term is at most 2^TERM_BITS / N in magnitude on its grid, so N terms sum below 2^63
TERM_BITS = 62


@dataclass(frozen=True)
class SumLayout:
    """How the step's exact sums travel: ``kind`` (one of :data:`FORMATS`) and the model's
    parameter tensors' sizes (``segments``), each of which gets its own grid."""

    kind: str
    segments: tuple[int, ...]

    @property
    def num_params(self) -> int:
        return sum(self.segments)

    @property
    def width(self) -> int:
        """int64 values per model in the reduce: the sums, then Σ n_k."""
        per_value = 1 if self.kind == "scaled" else NUM_LIMBS
        return per_value * self.num_params + 1

    def decode(self, row: torch.Tensor, exponents: torch.Tensor | None) -> torch.Tensor:
        """One model's reduced row (without its Σ n_k) -> the float64 sum [P]."""
        if self.kind == "limbs":
            return from_limbs(row.reshape(NUM_LIMBS, self.num_params))
        return from_scaled(row, exponents, self.segments)


def segment_bounds(
    new: torch.Tensor, start: torch.Tensor, counts: torch.Tensor, segments: tuple[int, ...]
) -> torch.Tensor:
    """A bound on |n_k (θ_k - θ)| per parameter tensor over this rank's clients: float64
    [L], at least half the largest exact magnitude (the float32 difference is within one
    ulp of the exact one, and the grid allows a factor of 2: see :func:`grid_exponents`).
    NaN and Inf give +Inf, so that every rank learns of them from the max all-reduce."""
    diff = (new - start.to(new.dtype)).abs_()
    per_client = torch.stack([part.amax(dim=1) for part in diff.split(segments, dim=1)], dim=1)
    scaled = per_client.to(torch.float64) * counts.to(per_client.device, torch.float64)[:, None]
    bound = scaled.amax(dim=0) if scaled.shape[0] else scaled.new_zeros(len(segments))
    return torch.nan_to_num(bound, nan=math.inf, posinf=math.inf).cpu()


def grid_exponents(bounds: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """The grid 2^e of each model and parameter tensor, from the all-reduced bounds [M, L]
    and the number of terms of each model [M]: with b < 2^E (b the bound, so every term is
    below 2^(E+1)) and N ≤ 2^c terms, e = E + 1 + c - 62 puts every term below 2^62/N
    on its grid, so that N of them sum below 2^63 whatever the order. Raises
    :class:`~distfl.errors.DivergedError` (a FloatingPointError) for NaN/Inf and for bounds
    of 2^900 or more, the same on every rank."""
    b = bounds.to(torch.float64)
    if not bool(torch.isfinite(b).all()):
        raise DivergedError(
            "a client update holds NaN or Inf: training diverged (a smaller train.lr?)"
        )
    if bool((b >= 2.0**MAX_BOUND_EXPONENT).any()):
        raise DivergedError(
            f"a weighted client update reaches 2^{MAX_BOUND_EXPONENT} in magnitude: training "
            "diverged (a smaller train.lr?)"
        )
    _, big_e = torch.frexp(b)  # b = f 2^E, 0.5 <= f < 1 (E = 0 for b = 0)
    n = terms.to(torch.int64).clamp(min=1)
    c = torch.tensor([(int(v) - 1).bit_length() for v in n.tolist()], dtype=torch.int64)
    e = big_e.to(torch.int64) + 1 + c[:, None] - TERM_BITS
    return torch.where(b > 0, e, torch.full_like(e, MIN_EXPONENT)).clamp(min=MIN_EXPONENT)


def element_scales(exponents: torch.Tensor, segments: tuple[int, ...]) -> torch.Tensor:
    """[L] grid exponents -> [P] float64 factors 2^-e, one per parameter."""
    return _powers_of_two([-int(e) for e in exponents.tolist()], segments)


def quantise_sum(
    new: torch.Tensor, start: torch.Tensor, counts: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """Σ_k round(n_k (θ_k - θ) 2^-e) over the rows of ``new`` [n, P]: int64 [P], on
    ``new``'s device. Each term is computed alone (the float64 difference of two float32
    values is exact; scaling by 2^-e is exact; n_k multiplies last; rounding is half to
    even), so it does not depend on which other terms share the call."""
    t = new.to(torch.float64) - start.to(new.device, torch.float64)
    t.mul_(scales.to(new.device)).mul_(counts.to(new.device, torch.float64)[:, None]).round_()
    return t.to(torch.int64).sum(dim=0)


def from_scaled(
    sums: torch.Tensor, exponents: torch.Tensor, segments: tuple[int, ...]
) -> torch.Tensor:
    """int64 sums [P] on the grids ``exponents`` [L] -> float64 [P] (the integer rounded to
    float64 once, then scaled by 2^e exactly)."""
    factors = _powers_of_two([int(e) for e in exponents.tolist()], segments)
    return sums.to(torch.float64) * factors.to(sums.device)


def _powers_of_two(exponents: list[int], segments: tuple[int, ...]) -> torch.Tensor:
    """[P] float64: 2^exponents[i] repeated segments[i] times (exact: math.ldexp)."""
    values = torch.tensor([math.ldexp(1.0, e) for e in exponents], dtype=torch.float64)
    return values.repeat_interleave(torch.tensor(segments, dtype=torch.int64))

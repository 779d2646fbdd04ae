"""Uniform numbers drawn from (seed, what, client, round) alone: a counter-based hash
(SplitMix64's finaliser over the four), so that a client's resources, availability and
dropouts cost nothing until the client is asked about, are the same at any world size and
any population size, and need no state to resume."""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

#: what a draw is for (one stream each)
SPEED, BANDWIDTH, PROFILE, AVAILABLE, PHASE, TRACE_CLIENT, DROPOUT = range(1, 8)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, what: int, clients, round_index: int = 0) -> np.ndarray:
    """float64 in [0, 1), one per client: a function of (seed, what, client, round) alone."""
    ids = np.asarray(clients, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * _GOLDEN + np.uint64(what))
        key = _mix(key ^ (np.uint64(round_index) * _GOLDEN + np.uint64(0x5851F42D4C957F2D)))
        h = _mix(key ^ _mix(ids * _GOLDEN + np.uint64(1)))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


__all__ = ["AVAILABLE", "BANDWIDTH", "DROPOUT", "PHASE", "PROFILE", "SPEED", "TRACE_CLIENT",
           "uniforms"]  # fmt: skip

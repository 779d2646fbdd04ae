"""Communication complexity: how many rounds, bytes and simulated seconds a run takes
until its loss first reaches a target (the decay the seed-004 paper reads off its loss
curves), from the columns of its /metrics and /metrics/evaluation tables."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def first_reaching(rounds, losses, target: float) -> int | None:
    """The first round whose loss is finite and at most ``target``; None when none is."""
    losses = np.asarray(losses, dtype=np.float64)
    hit = np.flatnonzero(np.isfinite(losses) & (losses <= target))
    return int(np.asarray(rounds)[hit[0]]) if len(hit) else None


def to_target(metrics: dict[str, Any], target: float) -> dict[str, float | int | None]:
    """``rounds``, ``bytes`` (the federation's, summed through that round) and ``sim_s``
    (the virtual clock at its end; None without one) until ``test_loss`` first reaches
    ``target``; all None when it never does (or ``target`` is not positive)."""
    none = {"rounds": None, "bytes": None, "sim_s": None}
    if not target > 0 or "test_loss" not in metrics:
        return none
    rounds = np.asarray(metrics["round"])
    t = first_reaching(rounds, metrics["test_loss"], target)
    if t is None:
        return none
    upto = rounds <= t
    sim = np.asarray(metrics.get("sim_elapsed_s", np.full(len(rounds), math.nan)), float)
    at = sim[np.flatnonzero(rounds == t)[0]] if len(sim) == len(rounds) else math.nan
    return {
        "rounds": t,
        "bytes": int(np.asarray(metrics["federation_bytes"])[upto].sum()),
        "sim_s": float(at) if math.isfinite(at) else None,
    }


def clusters_to_target(evaluation: dict[str, Any], target: float) -> dict[str, int | None]:
    """Each cluster's first round whose evaluated test loss is at most ``target`` (None:
    never), from /metrics/evaluation's rows (round, cluster, test_loss)."""
    if not target > 0:
        return {}
    clusters = [str(c) for c in evaluation.get("cluster", ())]
    rounds = np.asarray(evaluation.get("round", ()))
    losses = np.asarray(evaluation.get("test_loss", ()), dtype=np.float64)
    out: dict[str, int | None] = {}
    for cid in sorted(set(clusters)):
        mine = np.array([c == cid for c in clusters])
        out[cid] = first_reaching(rounds[mine], losses[mine], target)
    return out


__all__ = ["clusters_to_target", "first_reaching", "to_target"]

"""EMD-CFL's figure in ``distfl report``: the pairs' distances at the root against ε, and
the window of ε that recovers the ground-truth groups."""

from __future__ import annotations

import math

import numpy as np

from distfl import plot
from distfl.runfile.view import RunData


def epsilon_window(distances: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """The ε for which EMD-CFL's clusters are exactly the ground-truth groups: (lo, hi) such
    that every ε with lo < ε <= hi recovers them (empty when lo >= hi). lo is the largest
    mutual distance max(d_cc', d_c'c) of two clients of one group (all of them must be
    adjacent), hi the smallest of two clients of different groups (none of them may be);
    -inf for lo when every group has one client, +inf for hi with one group."""
    D = np.asarray(distances, dtype=np.float64)
    g = np.asarray(groups)
    mutual = np.maximum(D, D.T)
    off = ~np.eye(len(g), dtype=bool)
    same = (g[:, None] == g[None, :]) & off
    cross = g[:, None] != g[None, :]
    lo = float(mutual[same].max()) if same.any() else -math.inf
    hi = float(mutual[cross].min()) if cross.any() else math.inf
    return lo, hi


def emd_distances(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
    """EMD-CFL's mutual distances of same-group and cross-group pairs against ε."""
    root = next((n for n in data.hierarchy if n.parent == "" and "distances" in n.datasets), None)
    eps = plot.setting(data, "epsilon")
    if root is None or eps is None:
        return None
    D = np.asarray(root.datasets["distances"], dtype=np.float64)
    members = np.asarray(root.members, dtype=np.int64)
    if D.ndim != 2 or D.shape != (len(members), len(members)) or len(members) < 2:
        return None
    mutual = np.maximum(D, D.T)  # a pair is adjacent when both directions are below ε
    g = data.groups[members]
    upper = np.triu(np.ones(D.shape, dtype=bool), 1)
    same = upper & (g[:, None] == g[None, :])
    cross = upper & (g[:, None] != g[None, :])
    values = mutual[upper]
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    lo, hi = min(finite.min(), eps), max(finite.max(), eps)
    bins = np.linspace(lo, hi + 1e-12, 60)
    fig = plot.new_figure(8, 4.5)
    ax = fig.add_subplot()
    parts = []
    for mask, label, colour in ((same, "same group", "tab:blue"),
                                (cross, "different groups", "tab:orange")):  # fmt: skip
        v = mutual[mask]
        v = v[np.isfinite(v)]
        if v.size:
            below = float((v < eps).mean())
            ax.hist(v, bins=bins, color=colour, alpha=0.6,
                    label=f"{label}: {v.size} pairs, {below:.0%} below ε")  # fmt: skip
            parts.append(f"{below:.0%} of the {label} pairs")
    window_lo, window_hi = epsilon_window(D, g)
    if window_lo < window_hi:
        span = f"ε that recovers the groups: ({window_lo:.3g}, {window_hi:.3g}]"
        ax.axvspan(max(window_lo, lo), min(window_hi, hi), color="tab:green", alpha=0.15,
                   label=span)  # fmt: skip
        window = (
            f" Every ε in ({window_lo:.3g}, {window_hi:.3g}] (shaded) recovers the groups "
            "exactly: it lies above every same-group pair and at or below every cross-group one."
        )
    else:
        window = (
            f" No ε recovers the groups exactly: same-group pairs reach {window_lo:.3g}, "
            f"cross-group pairs go down to {window_hi:.3g}."
        )
    ax.axvline(eps, color="crimson", ls="--", lw=1.5, label=f"ε = {eps:g}")
    ax.set_xlabel("max(d_cc', d_c'c): EMD minus the reference τ, the larger of both ways")
    ax.set_ylabel("pairs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=plot.LEGEND_PT)
    ax.set_title("EMD-CFL: pair distances against ε")
    return fig, (
        "Every pair of clients' distance as the adjacency reads it (the larger of d_cc' and "
        "d_c'c: a pair is adjacent when both are below ε), for pairs of the same ground-truth "
        f"group and of different groups; {' and '.join(parts)} fall below ε = {eps:g}. The "
        "groups are recovered when ε separates the two histograms; an ε below most same-group "
        "pairs leaves clients apart, one above cross-group pairs merges groups." + window
    )

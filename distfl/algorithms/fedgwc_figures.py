"""FedGWC's figures in ``distfl report`` (:attr:`FedGWC.figures
<distfl.algorithms.fedgwc.FedGWC.figures>`): the MSE of each cluster's P against ε, the block
contrast of its P and W by ground-truth group, its split tests' Davies–Bouldin scores, and at
each split the spectral embedding of W and the score of each candidate number of clusters.
Imported by the report alone (matplotlib is imported when a figure is drawn)."""

from __future__ import annotations

import numpy as np

from distfl.report.data import RunData, SplitRecord, series
from distfl.report.figures import Drawn, Palette, new_figure, setting, split_markers


def mse(data: RunData, palette: Palette) -> Drawn | None:
    per_cluster = series(data.cluster_metrics, "mse")
    per_cluster = {c: (r, v) for c, (r, v) in per_cluster.items() if (v > 0).any()}
    if not per_cluster:
        return None
    eps, patience = setting(data, "epsilon"), setting(data, "patience")
    fig = new_figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in per_cluster.items():
        keep = v > 0
        ax.plot(r[keep], v[keep], color=palette.of(cid), lw=1.2, label=cid)
    if eps is not None:
        ax.axhline(eps, color="crimson", ls="--", lw=1.2, label=f"ε = {eps:g}")
    split_markers(ax, data)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("MSE of P between rounds")
    ax.grid(alpha=0.3, which="both")
    if len(per_cluster) <= 16:
        ax.legend(fontsize=7, loc="upper right", ncols=2)
    ax.set_title("Convergence of each cluster's interaction matrix")
    caption = "MSE between consecutive interaction matrices P of each cluster (log scale)"
    if eps is not None and patience is not None:
        caption += (
            f"; a cluster is tested for a split once it stays below ε = {eps:g} for "
            f"{patience} round(s)"
        )
    return fig, caption + "."


def contrast(data: RunData, palette: Palette) -> Drawn | None:
    """FedGWC's block contrast of P and W by ground-truth group over rounds."""
    panels = []
    for name, title in (("p", "interaction matrix P"), ("w", "affinity W")):
        within = series(data.cluster_metrics, f"{name}_within")
        if within:
            cross = series(data.cluster_metrics, f"{name}_cross")
            spread = series(data.cluster_metrics, f"{name}_spread")
            panels.append((title, within, cross, spread))
    if not panels:
        return None
    fig = new_figure(8, 3.2 * len(panels) + 0.8)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, within, cross, spread) in zip(axes, panels, strict=True):
        for cid, (r, v) in within.items():
            colour = palette.of(cid)
            ax.plot(r, v, color=colour, lw=1.3, label=f"{cid}: same group")
            if cid in spread:
                rs, sd = spread[cid]
                at = {int(x): y for x, y in zip(rs, sd, strict=True)}
                band = np.array([at.get(int(x), np.nan) for x in r])
                ax.fill_between(r, v - band, v + band, color=colour, alpha=0.15, lw=0)
            if cid in cross:
                rc, vc = cross[cid]
                ax.plot(rc, vc, color=colour, lw=1.3, ls="--", label=f"{cid}: across groups")
        split_markers(ax, data)
        ax.set_ylabel(f"mean entry of {title.split()[-1]}")
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if len(within) <= 6:
            ax.legend(fontsize=7, loc="best", ncols=2)
    axes[-1].set_xlabel("round")
    fig.suptitle("Does each cluster's P and W show its ground-truth groups?")
    return fig, (
        "Block contrast by ground-truth group, per cluster and round: the mean entry over "
        "pairs of clients of the same group (solid) and of different groups (dashed); the "
        "band is the mean standard deviation of a row's same-group entries. The spectral "
        "clustering can only find the groups where the solid line stands clear of the dashed "
        "one by more than the band; where they overlap, W holds no group structure and the "
        "Davies–Bouldin test rightly refuses a split. W is computed every round for clusters "
        "of up to 512 clients, above that only at split tests."
    )


def db_tests(data: RunData, palette: Palette) -> Drawn | None:
    """FedGWC's split tests: each test's best Davies–Bouldin score against the threshold
    and, with the calibrated test, against the Gaussian references' score."""
    db = series(data.cluster_metrics, "db")
    if not db:
        return None
    reference = series(data.cluster_metrics, "db_reference")
    threshold, ratio = setting(data, "db_threshold"), setting(data, "reference_ratio")
    fig = new_figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in db.items():
        ax.plot(r, v, "o", ms=4, color=palette.of(cid), label=f"{cid}: best DB")
        if cid in reference and ratio is not None:
            rr, vr = reference[cid]
            ax.plot(rr, ratio * vr, "x", ms=6, color=palette.of(cid),
                    label=f"{cid}: {ratio:g} × references' DB")  # fmt: skip
    if threshold is not None:
        ax.axhline(threshold, color="crimson", ls="--", lw=1.2, label=f"threshold {threshold:g}")
    split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel("Davies–Bouldin score")
    ax.grid(alpha=0.3)
    if len(db) <= 8:
        ax.legend(fontsize=7, loc="best", ncols=2)
    ax.set_title("Each split test: the best partition's score and what it must beat")
    caption = (
        "The best Davies–Bouldin score of each split test's spectral partitions (dots; lower "
        "is more clustered). A partition is proposed when the score is below the threshold"
    )
    if reference:
        caption += (
            "; it is made when consecutive tests propose the same one and its score is below "
            "the crosses, the given fraction of the median score of Gaussian references "
            "(one cloud with P's mean and covariance, no groups), drawn only when the other "
            "conditions hold (see the calibrated split test in the algorithms page)"
        )
    return fig, caption + "."


def split_embedding(data: RunData, split: SplitRecord, palette: Palette) -> Drawn | None:
    from matplotlib.lines import Line2D

    W = split.datasets.get("affinity")
    if W is None:
        return None
    xy = embedding_2d(W, data.config.run.seed + split.round)
    fig = new_figure(7.5, 5.5)
    ax = fig.add_subplot()
    kids = sorted(set(split.labels.tolist()))
    groups = sorted(set(split.groups.tolist()))
    for c in kids:
        for g in groups:
            keep = (split.labels == c) & (split.groups == g)
            if keep.any():
                ax.scatter(
                    xy[keep, 0],
                    xy[keep, 1],
                    color=palette.of(f"{split.id}.{c}"),
                    marker=palette.marker(g),
                    s=36,
                    edgecolors="black",
                    linewidths=0.4,
                    alpha=0.85,
                )
    ax.set_xlabel("spectral component 1")
    ax.set_ylabel("spectral component 2")
    ax.grid(alpha=0.3)
    colour = [
        Line2D(
            [], [], ls="", marker="o", color=palette.of(f"{split.id}.{c}"), label=f"{split.id}.{c}"
        )
        for c in kids
    ]
    shape = [
        Line2D([], [], ls="", marker=palette.marker(g), color="0.4", label=palette.name(g))
        for g in groups
    ]
    # beside the axes, where they hide no client
    kw = dict(fontsize=7, title_fontsize=7)
    fig.legend(handles=colour, title="cluster", loc="outside right upper", **kw)
    fig.legend(handles=shape, title="group", loc="outside right lower", **kw)
    ax.set_title(f"Split of {split.id} at round {split.round}: spectral embedding of W")
    return fig, (
        f"The members of cluster {split.id} in the 2-D spectral embedding of W at round "
        f"{split.round}: colour = the cluster chosen, marker = the ground-truth group."
    )


def split_db(data: RunData, split: SplitRecord, palette: Palette) -> Drawn | None:
    scores = split.datasets.get("db_scores")
    if scores is None or not len(scores):
        return None
    scores = np.asarray(scores, dtype=np.float64)
    ns = np.arange(2, 2 + len(scores))
    chosen = len(set(split.labels.tolist()))
    finite = np.isfinite(scores)
    fig = new_figure(6, 4)
    ax = fig.add_subplot()
    colours = ["tab:orange" if n == chosen else "tab:blue" for n in ns]
    heights = np.where(finite, scores, 0.0)
    ax.bar(ns, heights, color=colours, width=0.6)
    for n, ok in zip(ns, finite, strict=True):
        if not ok:
            ax.text(n, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.4")
    threshold = setting(data, "db_threshold")
    if threshold is not None:
        ax.axhline(threshold, color="crimson", ls="--", lw=1.2, label=f"threshold {threshold:g}")
    ax.set_xticks(ns)
    ax.set_xlabel("number of clusters n")
    ax.set_ylabel("Davies–Bouldin score (lower is better)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(
        f"Split of {split.id} at round {split.round}: DB per candidate n (chosen {chosen})"
    )
    return fig, (
        f"Davies–Bouldin score of the spectral clustering of W into n clusters when cluster "
        f"{split.id} was tested at round {split.round}; the lowest score below the threshold "
        f"wins (orange: n = {chosen}); n/a: not possible (too few clients)."
    )


def embedding_2d(W: np.ndarray, seed: int) -> np.ndarray:
    """[n, 2] coordinates of the members in the spectral embedding of W: its two leading
    non-trivial components (scikit-learn's ``SpectralEmbedding(n_components=2)`` on a
    precomputed affinity, i.e. FedGWC's embedding without its constant first column).
    With fewer than 3 members the second coordinate is 0."""
    from distfl.spectral import spectral_embedding

    n = W.shape[0]
    if n < 2:
        return np.zeros((n, 2))
    emb = spectral_embedding(np.asarray(W), min(3, n), seed)
    out = np.zeros((n, 2))
    cols = emb[:, 1:3]
    out[:, : cols.shape[1]] = cols
    return out

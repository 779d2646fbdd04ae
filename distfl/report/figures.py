"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no pyplot, no
display, no global state): each function draws one figure and returns it with its caption,
or None when the run holds nothing to draw; :func:`save` writes it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distfl.hierarchy import node_order
from distfl.report.data import (
    SPLIT_MATRICES,
    RunData,
    SplitRecord,
    boundaries,
    class_fractions,
    embedding_2d,
    group_mix,
    member_order,
    series,
    tree_layout,
)

DPI = 100
MARKERS = ("o", "^", "s", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


#: a figure and its caption
Drawn = tuple[Any, str]


def save(fig, path: Path, *, pdf: bool = False) -> None:
    """Render on the Agg canvas and write a 256-colour PNG (the figures are flat colours and
    colour maps: a palette keeps them as they look at about 40% of the RGB file's size),
    beside and renamed, so that a reader never sees half a figure."""
    import os

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3]
    image = Image.fromarray(np.ascontiguousarray(rgb)).quantize(
        256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    tmp = path.with_name(path.name + ".tmp")
    image.save(tmp, format="PNG", optimize=True)
    os.replace(tmp, path)
    if pdf:  # vector lines and text, for a paper (heatmaps stay images inside it)
        vector = path.with_suffix(".pdf")
        tmp = vector.with_name(vector.name + ".tmp")
        fig.savefig(tmp, format="pdf", metadata={"Creator": None, "Producer": None})
        os.replace(tmp, vector)


def _colour(i: int) -> Any:
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if i < 10 else colormaps["tab20"]
    return cmap(i % cmap.N)


class Palette:
    """One colour per cluster id (in hierarchy order) and per ground-truth group, the same
    in every figure of a report."""

    def __init__(self, data: RunData):
        ids = sorted({n.id for n in data.hierarchy}, key=node_order)
        leaves = [i for i in ids if i in set(data.leaves)]
        inner = [i for i in ids if i not in set(data.leaves)]
        self.cluster = {cid: _colour(i) for i, cid in enumerate(leaves + inner)}
        self.groups = data.group_names()

    def name(self, g: int) -> str:
        return self.groups[g] if 0 <= g < len(self.groups) else f"group {g}"

    def of(self, cid: str) -> Any:
        return self.cluster.get(cid, (0.5, 0.5, 0.5, 1.0))

    def group(self, g: int) -> Any:
        from matplotlib import colormaps

        return colormaps["Set2"](int(g) % 8)

    def marker(self, g: int) -> str:
        return MARKERS[int(g) % len(MARKERS)]


def _split_markers(ax, data: RunData) -> None:
    for node in data.hierarchy:
        if node.split_round >= 0:
            ax.axvline(node.split_round, color="0.6", lw=0.8, ls=":", zorder=0)
            ax.text(
                node.split_round,
                0.99,
                f"split {node.id} ",
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                color="0.35",
                va="top",
                ha="right",
                rotation=90,
            )


def accuracy(data: RunData, palette: Palette) -> Drawn | None:
    rounds = np.asarray(data.metrics.get("round", []))
    acc = np.asarray(data.metrics.get("accuracy", []), dtype=np.float64)
    ok = np.isfinite(acc)
    if not ok.any():
        return None
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    per_cluster = series(data.evaluation, "accuracy")
    for cid, (r, v) in per_cluster.items():
        ax.plot(r, v, color=palette.of(cid), lw=1, alpha=0.85, marker=".", ms=3, label=cid)
    ax.plot(rounds[ok], acc[ok], color="black", lw=2, marker="o", ms=3, label="federation")
    _split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel("balanced accuracy")
    ax.set_xlim(0, max(data.config.run.rounds, int(rounds.max(initial=1))))
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if len(per_cluster) <= 16:  # the federation first, then the clusters in id order
        ax.legend(
            handles[-1:] + handles[:-1],
            labels[-1:] + labels[:-1],
            fontsize=7,
            loc="lower right",
            ncols=2,
        )
    ax.set_title("Accuracy over rounds (federation and per cluster); dotted: splits")
    return fig, (
        "Balanced accuracy of the federation (black) and of each cluster's clients at each "
        "evaluation round; dotted lines mark the splits, labelled with the cluster that split."
    )


def _setting(data: RunData, key: str) -> Any:
    """The run's ``algorithm.<key>``, or None when its algorithm has no such key (an
    algorithm of one's own may record the same statistics without the same settings)."""
    return getattr(data.config.algorithm.params, key, None)


def mse(data: RunData, palette: Palette) -> Drawn | None:
    per_cluster = series(data.cluster_metrics, "mse")
    per_cluster = {c: (r, v) for c, (r, v) in per_cluster.items() if (v > 0).any()}
    if not per_cluster:
        return None
    eps, patience = _setting(data, "epsilon"), _setting(data, "patience")
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in per_cluster.items():
        keep = v > 0
        ax.plot(r[keep], v[keep], color=palette.of(cid), lw=1.2, label=cid)
    if eps is not None:
        ax.axhline(eps, color="crimson", ls="--", lw=1.2, label=f"ε = {eps:g}")
    _split_markers(ax, data)
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


def norms(data: RunData, palette: Palette) -> Drawn | None:
    mean = series(data.cluster_metrics, "mean_norm")
    peak = series(data.cluster_metrics, "max_norm")
    if not mean and not peak:
        return None
    eps1, eps2 = _setting(data, "eps1"), _setting(data, "eps2")
    fig = _figure(8, 6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax, table, eps, what in (
        (top, mean, eps1, "‖mean update‖ (ε₁)"),
        (bottom, peak, eps2, "max ‖update‖ (ε₂)"),
    ):
        for cid, (r, v) in table.items():
            ax.plot(r, v, color=palette.of(cid), lw=1.2, label=cid)
        if eps is not None:
            ax.axhline(eps, color="crimson", ls="--", lw=1.2, label=f"{eps:g}")
        _split_markers(ax, data)
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        if len(table) <= 16:
            ax.legend(fontsize=7, loc="upper right", ncols=2)
    bottom.set_xlabel("round")
    top.set_title("CFL's split criterion: mean update norm below ε₁ and max above ε₂")
    if eps1 is None or eps2 is None:
        return fig, "Update norms per cluster: the norm of its mean update and its largest."
    return fig, (
        "CFL's update norms per cluster: a cluster splits when the norm of its mean update "
        f"is below ε₁ = {eps1:g} and its largest client update above ε₂ = {eps2:g}."
    )


def statistic(data: RunData, name: str, palette: Palette) -> Drawn | None:
    """One per-cluster statistic of /metrics/clusters over rounds, a line per cluster: what
    the report shows of a statistic that no algorithm's own figure draws."""
    per_cluster = series(data.cluster_metrics, name)
    if not per_cluster:
        return None
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in per_cluster.items():
        ax.plot(r, v, color=palette.of(cid), lw=1.2, marker="o", ms=2.5, label=cid)
    _split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel(name)
    ax.set_xlim(0, max(data.config.run.rounds, data.rounds_done, 1))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    if len(per_cluster) <= 16:
        ax.legend(fontsize=7, loc="best", ncols=2, title="cluster", title_fontsize=7)
    ax.set_title(f"{name} per cluster over rounds; dotted: splits")
    return fig, (
        f"The statistic {name!r} the run's algorithm recorded for each cluster "
        f"(/metrics/clusters/{name}), per round: a point where the cluster trained and had it, "
        "none where it had not. Dotted lines mark the splits."
    )


def split_matrices(data: RunData, split: SplitRecord, palette: Palette) -> Drawn | None:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = [(k, t) for k, t in SPLIT_MATRICES if k in split.matrices]
    if not names:
        return None
    order = member_order(split.labels, split.groups)
    labels, groups = split.labels[order], split.groups[order]
    edges = boundaries(labels)
    n = len(order)
    present = sorted(set(groups.tolist()))
    cmap = ListedColormap([palette.group(g) for g in range(max(present) + 1)])
    strip = max(n * 0.035, 0.6)
    gap = strip * 0.3
    fig = _figure(5.2 * len(names), 5.2)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, (key, title) in zip(axes, names, strict=True):
        M = np.asarray(split.matrices[key], dtype=np.float64)[np.ix_(order, order)]
        finite = M[np.isfinite(M)]
        im = ax.imshow(
            M,
            cmap="viridis",
            interpolation="nearest" if n <= 400 else "antialiased",
            vmin=finite.min() if finite.size else 0,
            vmax=finite.max() if finite.size else 1,
        )
        g = groups[None, :].astype(float)
        lo, hi = -0.5 - gap - strip, -0.5 - gap
        kw = dict(cmap=cmap, vmin=-0.5, vmax=cmap.N - 0.5, interpolation="nearest")
        ax.imshow(g, extent=(-0.5, n - 0.5, hi, lo), **kw)
        ax.imshow(g.T, extent=(lo, hi, n - 0.5, -0.5), **kw)
        for e in edges if len(edges) <= 30 else ():  # more: the lines would hide the matrix
            ax.plot([e - 0.5, e - 0.5], [-0.5, n - 0.5], color="white", lw=1)
            ax.plot([-0.5, n - 0.5], [e - 0.5, e - 0.5], color="white", lw=1)
        ax.set_xlim(lo, n - 0.5)
        ax.set_ylim(n - 0.5, lo)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"{n} clients, by chosen cluster (white lines), then group (strips)")
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.75)
    fig.legend(
        handles=[Patch(color=palette.group(g), label=palette.name(g)) for g in present],
        loc="outside lower center",
        ncols=min(len(present), 6),
        fontsize=8,
        title="ground-truth group",
        title_fontsize=8,
    )
    fig.suptitle(f"Split of cluster {split.id} at round {split.round}")
    what = " and ".join(t for _, t in names)
    return fig, (
        f"Split of cluster {split.id} at round {split.round}: {what}, with clients ordered by "
        "the cluster chosen for them (white lines between clusters) and then by ground-truth "
        "group (the coloured strips)."
    )


def split_embedding(data: RunData, split: SplitRecord, palette: Palette) -> Drawn | None:
    from matplotlib.lines import Line2D

    W = split.matrices.get("affinity")
    if W is None:
        return None
    xy = embedding_2d(W, data.config.run.seed + split.round)
    fig = _figure(7.5, 5.5)
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
    scores = split.db_scores
    if scores is None or not len(scores):
        return None
    ns = np.arange(2, 2 + len(scores))
    chosen = len(set(split.labels.tolist()))
    finite = np.isfinite(scores)
    fig = _figure(6, 4)
    ax = fig.add_subplot()
    colours = ["tab:orange" if n == chosen else "tab:blue" for n in ns]
    heights = np.where(finite, scores, 0.0)
    ax.bar(ns, heights, color=colours, width=0.6)
    for n, ok in zip(ns, finite, strict=True):
        if not ok:
            ax.text(n, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.4")
    threshold = _setting(data, "db_threshold")
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


def tree(data: RunData, palette: Palette) -> Drawn | None:
    layout = tree_layout(data.hierarchy)
    if not layout:
        return None
    end = max(data.rounds_done, 1)
    width = max(6.0, min(0.6 * sum(1 for n in layout.values() if not n.children) + 3, 20))
    fig = _figure(width, 5)
    ax = fig.add_subplot()
    leaves = set(data.leaves)
    for node in layout.values():
        bottom = node.split if node.split >= 0 else end
        colour = palette.of(node.id) if node.id in leaves else "0.3"
        ax.plot([node.x, node.x], [node.created, bottom], color=colour, lw=2.5)
        if node.children:
            xs = [layout[c].x for c in node.children]
            ax.plot([min(xs), max(xs)], [node.split, node.split], color="0.3", lw=2.5)
            ax.text(
                node.x, node.split, f" {node.id} ({node.size})\n split r{node.split}",
                fontsize=7, va="bottom", ha="left", color="0.2",
            )  # fmt: skip
        else:
            ax.plot([node.x], [bottom], marker="o", color=colour, ms=6)
            ax.annotate(
                f"{node.id}\n({node.size})",
                (node.x, bottom),
                xytext=(0, -7),
                textcoords="offset points",
                fontsize=7,
                va="top",
                ha="center",
            )
    ticks = sorted({0, end} | {n.split for n in layout.values() if n.split >= 0})
    ax.set_yticks(ticks)
    ax.set_ylim(end + 0.15 * end + 2, -0.05 * end - 1)
    xs = [n.x for n in layout.values()]
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_xticks([])
    ax.set_ylabel("round")
    ax.grid(alpha=0.3, axis="y")
    state = "" if data.finished else f" (round {data.rounds_done} of {data.config.run.rounds})"
    ax.set_title(f"Cluster tree: id (clients), split rounds{state}")
    return fig, (
        "The cluster hierarchy over rounds: each split is labelled with the cluster's id, its "
        "number of clients and the round; each final cluster ends in a dot with its id and size."
    )


def classes(data: RunData, palette: Palette) -> Drawn | None:
    L = len(data.leaves)
    if L == 0 or data.class_counts.size == 0:
        return None
    fractions, totals = class_fractions(data.class_counts, data.assignment, L)
    names = data.group_names()
    mix = group_mix(data.groups, data.assignment, L, max(len(names), int(data.groups.max()) + 1))
    sizes = np.bincount(np.asarray(data.assignment, dtype=np.int64), minlength=L)
    C = fractions.shape[1]
    if L <= 12:
        fig = _figure(max(6.0, min(0.25 * C + 3, 16)), 1.5 + 1.4 * L)
        axes = fig.subplots(L, 1, sharex=True, squeeze=False)[:, 0]
        for i, ax in enumerate(axes):
            ax.bar(np.arange(C), fractions[i], color=palette.of(data.leaves[i]), width=0.8)
            mixed = ", ".join(f"{palette.name(g)}: {c}" for g, c in enumerate(mix[i]) if c)
            ax.set_title(
                f"{data.leaves[i]}: {sizes[i]} clients, {int(totals[i])} samples ({mixed or '-'})",
                fontsize=8,
                loc="left",
            )
            ax.set_ylim(0, max(fractions.max() * 1.1, 1e-9))
            ax.grid(alpha=0.3, axis="y")
            ax.tick_params(labelsize=7)
        axes[-1].set_xlabel("class")
        if C <= 30:
            axes[-1].set_xticks(np.arange(C))
        fig.supylabel("fraction of the cluster's samples", fontsize=8)
    else:
        fig = _figure(max(6.0, min(0.15 * C + 3, 16)), max(4.0, min(0.25 * L + 2, 16)))
        ax = fig.add_subplot()
        im = ax.imshow(fractions, aspect="auto", cmap="magma", interpolation="nearest")
        ax.set_yticks(np.arange(L), [f"{c} ({s})" for c, s in zip(data.leaves, sizes, strict=True)])
        ax.tick_params(labelsize=6)
        ax.set_xlabel("class")
        fig.colorbar(im, ax=ax, label="fraction of the cluster's samples")
    fig.suptitle("Class distribution of each final cluster")
    return fig, (
        "The class distribution of each final cluster (its clients' samples, train and test), "
        "with the number of its clients from each ground-truth group."
    )


# -- why a run did (not) split ------------------------------------------------------


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
    fig = _figure(8, 3.2 * len(panels) + 0.8)
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
        _split_markers(ax, data)
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
    threshold, ratio = _setting(data, "db_threshold"), _setting(data, "reference_ratio")
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in db.items():
        ax.plot(r, v, "o", ms=4, color=palette.of(cid), label=f"{cid}: best DB")
        if cid in reference and ratio is not None:
            rr, vr = reference[cid]
            ax.plot(rr, ratio * vr, "x", ms=6, color=palette.of(cid),
                    label=f"{cid}: {ratio:g} × references' DB")  # fmt: skip
    if threshold is not None:
        ax.axhline(threshold, color="crimson", ls="--", lw=1.2, label=f"threshold {threshold:g}")
    _split_markers(ax, data)
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


def membership(data: RunData, palette: Palette) -> Drawn | None:
    """Where each ground-truth group's clients are, round by round."""
    table = data.membership
    if not table or len(table.get("round", [])) == 0:
        return None
    clusters = np.array([str(c) for c in table["cluster"]], dtype=object)
    if len(set(clusters.tolist())) < 2 and len(data.leaves) < 2:
        return None
    rounds = np.asarray(table["round"], dtype=np.int64)
    group = np.asarray(table["group"], dtype=np.int64)
    count = np.asarray(table["clients"], dtype=np.float64)
    names = data.group_names()
    G = len(names)
    ids = sorted(set(clusters.tolist()), key=node_order)
    steps = np.unique(rounds)
    col = {r: i for i, r in enumerate(steps.tolist())}
    shown = min(G, 12)
    ncols = min(shown, 3)
    nrows = -(-shown // ncols)
    fig = _figure(4.0 * ncols + 1.5, 2.6 * nrows + 0.8)
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    for g in range(shown):
        ax = axes[g]
        share = np.zeros((len(ids), len(steps)))
        mine = group == g
        for i, cid in enumerate(ids):
            rows = mine & (clusters == cid)
            share[i, [col[int(r)] for r in rounds[rows]]] = count[rows]
        total = share.sum(axis=0)
        share = np.divide(share, total, out=np.zeros_like(share), where=total > 0)
        ax.stackplot(steps, share, colors=[palette.of(c) for c in ids], labels=ids, lw=0)
        ax.set_title(f"{names[g]} ({int(total.max())} clients)", fontsize=8, loc="left")
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[shown:]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    if len(ids) <= 16:
        fig.legend(handles, labels, fontsize=7, loc="outside right upper", title="cluster")
    fig.supxlabel("round", fontsize=8)
    fig.supylabel("share of the group's clients", fontsize=8)
    more = f" (the first 12 of {G} groups)" if G > shown else ""
    fig.suptitle("Which cluster holds each ground-truth group's clients" + more)
    return fig, (
        "For each ground-truth group, the share of its clients in each cluster at the end of "
        "every round: a group recovered is one colour, a group split over clusters or sharing "
        "its colour with another group is not. IFCA's and FeSEM's moves show here round by "
        "round; a collapse onto one model is one colour in every panel."
    )


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


def emd_distances(data: RunData, palette: Palette) -> Drawn | None:
    """EMD-CFL's mutual distances of same-group and cross-group pairs against ε."""
    root = next((n for n in data.hierarchy if n.parent == "" and "distances" in n.datasets), None)
    eps = _setting(data, "epsilon")
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
    fig = _figure(8, 4.5)
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
    ax.legend(fontsize=8)
    ax.set_title("EMD-CFL: pair distances against ε")
    return fig, (
        "Every pair of clients' distance as the adjacency reads it (the larger of d_cc' and "
        "d_c'c: a pair is adjacent when both are below ε), for pairs of the same ground-truth "
        f"group and of different groups; {' and '.join(parts)} fall below ε = {eps:g}. The "
        "groups are recovered when ε separates the two histograms; an ε below most same-group "
        "pairs leaves clients apart, one above cross-group pairs merges groups." + window
    )


# -- a suite -------------------------------------------------------------------------


def metric_bars(rows: Sequence[dict[str, Any]], metric: str, title: str) -> Drawn | None:
    """Grouped bars: one group per scenario, one bar per algorithm, the mean over seeds with
    the seeds' range as an error bar."""
    values: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        v = row.get(metric)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            continue
        values.setdefault((str(row["scenario"]), str(row["algorithm"])), []).append(float(v))
    if not values:
        return None
    scenarios = list(dict.fromkeys(str(r["scenario"]) for r in rows))
    algorithms = list(dict.fromkeys(str(r["algorithm"]) for r in rows))
    width = 0.8 / len(algorithms)
    fig = _figure(max(6.0, min(1.1 * len(scenarios) * max(1, len(algorithms) / 2) + 2, 20)), 4.5)
    ax = fig.add_subplot()
    x = np.arange(len(scenarios))
    for j, algo in enumerate(algorithms):
        mean, lo, hi = [], [], []
        for s in scenarios:
            v = values.get((s, algo), [])
            m = float(np.mean(v)) if v else math.nan
            mean.append(m)
            lo.append(m - min(v) if v else 0.0)
            hi.append(max(v) - m if v else 0.0)
        bars = ax.bar(
            x - 0.4 + width * (j + 0.5),
            mean,
            width=width,
            color=_colour(j),
            yerr=[lo, hi],
            capsize=2,
            label=algo,
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax.set_xticks(x, scenarios, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    if metric in ("rand", "ari", "accuracy"):  # scores of at most 1: show the whole scale
        low = min([0.0] + [min(v) for v in values.values()])
        ax.set_ylim(low - 0.05 if low < 0 else 0.0, 1.12)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, ncols=min(len(algorithms), 4), loc="upper left")
    ax.set_title(title)
    return fig, (
        f"{title}: mean over seeds per scenario and algorithm (error bars: the seeds' range)."
    )

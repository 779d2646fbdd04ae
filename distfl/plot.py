"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no pyplot, no
display, no global state): each function draws one figure and returns it with its caption,
or None when the run holds nothing to draw; :func:`save` writes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distfl.hierarchy import node_order
from distfl.runfile.view import (
    RunData,
    SplitRecord,
    boundaries,
    class_fractions,
    group_mix,
    member_order,
    series,
    tree_layout,
)

DPI = 100
#: the size of the report's legends and labels, in points: legible at the page's width
LEGEND_PT = 9
#: what a figure of the report says wrote it (a PNG's ``Software``, a PDF's ``Creator``):
#: the mark by which a later report knows the file for its own (:mod:`distfl.report.files`)
SOFTWARE = "distfl report"
MARKERS = ("o", "^", "s", "D", "v", "P", "X", "*", "<", ">", "h", "p")


def new_figure(width: float, height: float):
    """A matplotlib Figure of ``width`` × ``height`` inches on no canvas (:func:`save` draws
    it), with constrained layout: what every figure of the report, an algorithm's too, is
    drawn on."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


#: a figure and its caption
Drawn = tuple[Any, str]


def write_page(path: Path, data: str | bytes, *, replace: bool = False) -> None:
    """A page or figure of the report, written beside and linked in where nothing is (the
    report removed its earlier files first: :func:`distfl.report.files.prepare`); a file
    there is replaced only with ``replace``, and a symbolic link, a FIFO or a device is
    never written through or replaced."""
    from distfl.runfile.output import write_file

    write_file(path, data, replace=replace, label="the report's file",
               other="remove it, or give the report another --out")  # fmt: skip


def save(fig, path: Path, *, pdf: bool = False, replace: bool = False) -> None:
    """Render on the Agg canvas and write a 256-colour PNG (the figures are flat colours and
    colour maps: a palette keeps them as they look at about 40% of the RGB file's size),
    marked with :data:`SOFTWARE`, beside and put in place (:func:`write_page`), so that a
    reader never sees half a figure."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image, PngImagePlugin

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3]
    image = Image.fromarray(np.ascontiguousarray(rgb)).quantize(
        256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    png = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", SOFTWARE)
    image.save(png, format="PNG", optimize=True, pnginfo=info)
    write_page(path, png.getvalue(), replace=replace)
    if pdf:  # vector lines and text, for a paper (heatmaps stay images inside it)
        vector = io.BytesIO()
        fig.savefig(vector, format="pdf", metadata={"Creator": SOFTWARE, "Producer": None})
        write_page(path.with_suffix(".pdf"), vector.getvalue(), replace=replace)


#: the report's categorical colours after tab10's ten: ten more, each at least ΔE*76 = 29
#: from every colour before it (tab10's closest pair, purple and pink, is 27.7 apart) and
#: none too pale to see on white (L* at most 82)
MORE_COLOURS = ("#fdc086", "#a1d99b", "#f0027f", "#637939", "#a6761d", "#f7b6d2", "#aec7e8",
                "#fb8072", "#1b9e77", "#393b79")  # fmt: skip


def colour(i: int) -> Any:
    """The ``i``-th of the report's 20 categorical colours (RGBA): tab10's, then
    :data:`MORE_COLOURS`; the 21st is the first again."""
    from matplotlib import colormaps
    from matplotlib.colors import to_rgba

    i %= 10 + len(MORE_COLOURS)
    return colormaps["tab10"](i) if i < 10 else to_rgba(MORE_COLOURS[i - 10])


#: the line styles and bar hatches of :func:`style`, one per 20 entries
LINE_STYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx")


@dataclass(frozen=True)
class Style:
    """How one algorithm is drawn in a suite's figures: its colour, its curves' marker and
    line style, its bars' hatch."""

    colour: Any
    marker: str
    line: str
    hatch: str


def style(i: int) -> Style:
    """The ``i``-th algorithm's :class:`Style`: the 20 colours of :func:`colour` in turn,
    each 20 entries with the next line style and hatch, and the markers in turn: two of the
    first 60 entries that share a colour differ in line style, hatch and marker."""
    cycle = i // 20 % len(LINE_STYLES)
    return Style(colour(i), MARKERS[i % len(MARKERS)], LINE_STYLES[cycle], HATCHES[cycle])


def legend_columns(fig, entries: int) -> int:
    """The columns a legend of ``entries`` on the side of ``fig`` needs to fit its height
    (:func:`outside_legend`)."""
    rows = max(1, int((fig.get_figheight() * 72 - 3 * LEGEND_PT) / (1.8 * LEGEND_PT)))
    return max(1, -(-entries // rows))


def outside_legend(fig, handles, labels) -> Any:
    """The figure's legend on its right, outside every axes (the constrained layout makes
    room for it), in as many columns as keep it within the figure's height; widen the
    figure by :data:`LEGEND_COLUMN_IN` a column beyond the first to keep the axes' room."""
    return fig.legend(handles, labels, fontsize=LEGEND_PT, loc="outside right upper",
                      ncols=legend_columns(fig, len(labels)))  # fmt: skip


#: about the width of one column of a legend, in inches
LEGEND_COLUMN_IN = 1.5


class Palette:
    """One colour per cluster id (in hierarchy order) and per ground-truth group, the same
    in every figure of a report."""

    def __init__(self, data: RunData):
        ids = sorted({n.id for n in data.hierarchy}, key=node_order)
        leaves = [i for i in ids if i in set(data.leaves)]
        inner = [i for i in ids if i not in set(data.leaves)]
        self.cluster = {cid: colour(i) for i, cid in enumerate(leaves + inner)}
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


def split_markers(ax, data: RunData) -> None:
    for node in data.hierarchy:
        if node.split_round >= 0:
            ax.axvline(node.split_round, color="0.6", lw=0.8, ls=":", zorder=0)
            ax.text(
                node.split_round,
                0.99,
                f"split of {node.id} ",
                transform=ax.get_xaxis_transform(),
                fontsize=8,
                color="0.35",
                va="top",
                ha="right",
                rotation=90,
            )


def cluster_label(cid: str) -> str:
    """A cluster as a legend names it: ``cluster 0.1``."""
    return f"cluster {cid}"


def broken_at_splits(rounds: np.ndarray, values: np.ndarray, data: RunData):
    """``rounds`` and ``values`` with a NaN between two points that a split falls between
    (the line is not drawn across it: the clusters before and after are other models)."""
    splits = sorted({n.split_round for n in data.hierarchy if n.split_round >= 0})
    r, v = [], []
    for i, (x, y) in enumerate(zip(rounds.tolist(), values.tolist(), strict=True)):
        if i and any(rounds[i - 1] <= s < x for s in splits):
            r.append(np.nan)
            v.append(np.nan)
        r.append(x)
        v.append(y)
    return np.asarray(r, dtype=np.float64), np.asarray(v, dtype=np.float64)


def accuracy(data: RunData, palette: Palette) -> Drawn | None:
    rounds = np.asarray(data.metrics.get("round", []))
    acc = np.asarray(data.metrics.get("accuracy", []), dtype=np.float64)
    ok = np.isfinite(acc)
    if not ok.any():
        return None
    fig = new_figure(8, 4.5)
    ax = fig.add_subplot()
    per_cluster = series(data.evaluation, "accuracy")
    # the clusters under the federation, wide and with large markers: a cluster that holds
    # every client (the root before its split) shows around the federation's line
    for cid, (r, v) in per_cluster.items():
        ax.plot(r, v, color=palette.of(cid), lw=3, alpha=0.75, marker="o", ms=7,
                label=cluster_label(cid), zorder=2)  # fmt: skip
    fr, fv = broken_at_splits(rounds[ok], acc[ok], data)
    ax.plot(fr, fv, color="black", lw=1.3, ls="--", marker="x", ms=6, label="federation",
            zorder=3)  # fmt: skip
    worst = np.asarray(data.metrics.get("accuracy_worst", []), dtype=np.float64)
    low = np.isfinite(worst) if len(worst) == len(acc) else np.zeros(len(acc), dtype=bool)
    if low.any():  # (a file written before the column has none)
        wr, wv = broken_at_splits(rounds[low], worst[low], data)
        ax.plot(wr, wv, color="black", lw=1.0, ls=":", marker="v", ms=5,
                label="worst client", zorder=3)  # fmt: skip
    split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel("balanced accuracy")
    ax.set_xlim(0, max(data.config.run.rounds, int(rounds.max(initial=1))))
    ax.set_ylim(0, 1.02)  # a proportion: every run's figure on the same scale
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if len(per_cluster) <= 16:  # the federation (and its worst client) first, then the clusters
        n = len(per_cluster)
        ax.legend(handles[n:] + handles[:n], labels[n:] + labels[:n], fontsize=LEGEND_PT,
                  loc="lower right", ncols=2 if len(per_cluster) > 4 else 1)  # fmt: skip
    ax.set_title("Balanced accuracy over rounds: the federation and each cluster")
    return fig, (
        "Balanced accuracy of the federation (black, dashed: the mean over the evaluated "
        "clients; black, dotted: its worst client's) and of each cluster's clients "
        "(colours) at each evaluation round, on the full 0 to 1 scale. Grey vertical dotted "
        "lines mark the splits, labelled with the cluster that split; the federation's lines "
        "are not drawn across a split, where its clusters change. Read whether the split "
        "lifted the clients it separated, how far each cluster ends from the federation, and "
        "how far its worst client lags behind the mean."
    )


def setting(data: RunData, key: str) -> Any:
    """The run's ``algorithm.<key>``, or None when its algorithm has no such key (an
    algorithm of one's own may record the same statistics without the same settings)."""
    return getattr(data.config.algorithm.params, key, None)


def statistic(data: RunData, name: str, palette: Palette) -> Drawn | None:
    """One per-cluster statistic of /metrics/clusters over rounds, a line per cluster: what
    the report shows of a statistic that no algorithm's own figure draws."""
    per_cluster = series(data.cluster_metrics, name)
    if not per_cluster:
        return None
    fig = new_figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in per_cluster.items():
        ax.plot(r, v, color=palette.of(cid), lw=1.5, marker="o", ms=3, label=cluster_label(cid))
    split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel(name)
    ax.set_xlim(0, max(data.config.run.rounds, data.rounds_done, 1))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    if len(per_cluster) <= 16:
        ax.legend(fontsize=LEGEND_PT, loc="best", ncols=2 if len(per_cluster) > 4 else 1)
    ax.set_title(f"{name} per cluster over rounds; dotted: splits")
    return fig, (
        f"The statistic {name!r} the run's algorithm recorded for each cluster "
        f"(/metrics/clusters/{name}), per round: a point where the cluster trained and had it, "
        "none where it had not. Dotted lines mark the splits."
    )


def split_matrices(data: RunData, split: SplitRecord, palette: Palette) -> Drawn | None:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = list(split.matrices.items())  # (dataset, title), the algorithm's order
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
    fig = new_figure(5.2 * len(names), 5.2)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, (key, title) in zip(axes, names, strict=True):
        M = np.asarray(split.datasets[key], dtype=np.float64)[np.ix_(order, order)]
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


def tree(data: RunData, palette: Palette) -> Drawn | None:
    layout = tree_layout(data.hierarchy)
    if not layout:
        return None
    end = max(data.rounds_done, 1)
    leaf_count = sum(1 for n in layout.values() if not n.children)
    width = max(4.5, min(1.5 * leaf_count + 2, 20))
    fig = new_figure(width, 4.2)
    ax = fig.add_subplot()
    leaves = set(data.leaves)
    for node in layout.values():
        bottom = node.split if node.split >= 0 else end
        colour = palette.of(node.id) if node.id in leaves else "0.3"
        ax.plot([node.x, node.x], [node.created, bottom], color=colour, lw=3)
        if node.children:
            xs = [layout[c].x for c in node.children]
            ax.plot([min(xs), max(xs)], [node.split, node.split], color="0.3", lw=3)
            ax.annotate(
                f"cluster {node.id}: {node.size} clients\nsplit at round {node.split}",
                (node.x, node.split), xytext=(0, 6), textcoords="offset points",
                fontsize=LEGEND_PT, va="bottom", ha="center", color="0.15",
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
            )  # fmt: skip
        else:
            ax.plot([node.x], [bottom], marker="o", color=colour, ms=9)
            ax.annotate(
                f"cluster {node.id}\n{node.size} clients", (node.x, bottom), xytext=(0, -9),
                textcoords="offset points", fontsize=LEGEND_PT, va="top", ha="center",
            )  # fmt: skip
    ticks = sorted({0, end} | {n.split for n in layout.values() if n.split >= 0})
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=LEGEND_PT)
    ax.set_ylim(end * 1.22 + 2, -0.04 * end - 1)
    xs = [n.x for n in layout.values()]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_xticks([])
    ax.set_ylabel("round")
    ax.grid(alpha=0.3, axis="y")
    state = "" if data.finished else f" (round {data.rounds_done} of {data.config.run.rounds})"
    ax.set_title(f"Cluster tree over rounds{state}")
    return fig, (
        "The cluster hierarchy over rounds, top to bottom: each split is labelled with the "
        "cluster that split, its clients and the round; each final cluster ends in a dot with "
        "its id and size. Read when the clusters appeared and how the clients divided."
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
        fig = new_figure(max(6.0, min(0.25 * C + 3, 16)), 1.5 + 1.4 * L)
        axes = fig.subplots(L, 1, sharex=True, squeeze=False)[:, 0]
        for i, ax in enumerate(axes):
            ax.bar(np.arange(C), fractions[i], color=palette.of(data.leaves[i]), width=0.8)
            mixed = ", ".join(f"{palette.name(g)}: {c}" for g, c in enumerate(mix[i]) if c)
            ax.set_title(
                f"{cluster_label(data.leaves[i])}: {sizes[i]} clients, {int(totals[i])} samples "
                f"({mixed or '-'})", fontsize=LEGEND_PT + 1, loc="left",
            )  # fmt: skip
            ax.set_ylim(0, max(fractions.max() * 1.1, 1e-9))
            ax.grid(alpha=0.3, axis="y")
            ax.tick_params(labelsize=LEGEND_PT)
        axes[-1].set_xlabel("class")
        if C <= 30:
            axes[-1].set_xticks(np.arange(C))
        fig.supylabel("fraction of the cluster's samples", fontsize=LEGEND_PT + 1)
    else:
        fig = new_figure(max(6.0, min(0.15 * C + 3, 16)), max(4.0, min(0.25 * L + 2, 16)))
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
    fig = new_figure(4.0 * ncols + 1.5, 2.6 * nrows + 0.8)
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
        ax.stackplot(steps, share, colors=[palette.of(c) for c in ids],
                     labels=[cluster_label(c) for c in ids], lw=0)  # fmt: skip
        ax.set_title(f"{names[g]} ({int(total.max())} clients)", fontsize=LEGEND_PT + 1,
                     loc="left")  # fmt: skip
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=LEGEND_PT)
        ax.grid(alpha=0.3)
    for ax in axes[shown:]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    if len(ids) <= 16:
        fig.legend(handles, labels, fontsize=LEGEND_PT, loc="outside right upper")
    fig.supxlabel("round", fontsize=LEGEND_PT + 1)
    fig.supylabel("share of the group's clients", fontsize=LEGEND_PT + 1)
    more = f" (the first 12 of {G} groups)" if G > shown else ""
    fig.suptitle("Which cluster holds each ground-truth group's clients" + more)
    return fig, (
        "For each ground-truth group, the share of its clients in each cluster at the end of "
        "every round: a group recovered is one colour, a group split over clusters or sharing "
        "its colour with another group is not. Clients moving between clusters show here "
        "round by round; a collapse onto one model is one colour in every panel."
    )

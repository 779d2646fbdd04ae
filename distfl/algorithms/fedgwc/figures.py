"""FedGWC's figures in ``distfl report`` (:attr:`FedGWC.figures
<distfl.algorithms.fedgwc.FedGWC.figures>`): the MSE of each cluster's P against ε, the block
contrast of its P and W by ground-truth group, its split tests' Davies–Bouldin scores, and at
each split the spectral embedding of W and the score of each candidate number of clusters.
Imported by the report alone (matplotlib is imported when a figure is drawn)."""

from __future__ import annotations

import numpy as np

from distfl import plot
from distfl.runfile.view import RunData, SplitRecord, series


def mse(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
    per_cluster = series(data.cluster_metrics, "mse")
    per_cluster = {c: (r, v) for c, (r, v) in per_cluster.items() if (v > 0).any()}
    if not per_cluster:
        return None
    eps, patience = plot.setting(data, "epsilon"), plot.setting(data, "patience")
    fig = plot.new_figure(8, 4.5)
    ax = fig.add_subplot()
    for cid, (r, v) in per_cluster.items():
        keep = v > 0
        ax.plot(r[keep], v[keep], color=palette.of(cid), lw=1.5, label=plot.cluster_label(cid))
    if eps is not None:
        ax.axhline(eps, color="crimson", ls="--", lw=1.2, label=f"ε = {eps:g}")
    plot.split_markers(ax, data)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("MSE of P between rounds")
    ax.grid(alpha=0.3, which="both")
    if len(per_cluster) <= 16:
        ax.legend(
            fontsize=plot.LEGEND_PT, loc="upper right", ncols=2 if len(per_cluster) > 4 else 1
        )
    ax.set_title("Convergence of each cluster's interaction matrix")
    caption = "MSE between consecutive interaction matrices P of each cluster (log scale)"
    if eps is not None and patience is not None:
        caption += (
            f"; a cluster is tested for a split once it stays below ε = {eps:g} for "
            f"{patience} round(s)"
        )
    return fig, caption + "."


def contrast(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
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
    from matplotlib.patches import Patch

    fig = plot.new_figure(8, 3.4 * len(panels) + 0.8)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, within, cross, spread) in zip(axes, panels, strict=True):
        for cid, (r, v) in within.items():
            colour = palette.of(cid)
            ax.plot(r, v, color=colour, lw=1.5, label=f"{plot.cluster_label(cid)}: same group")
            if cid in spread:
                rs, sd = spread[cid]
                at = {int(x): y for x, y in zip(rs, sd, strict=True)}
                band = np.array([at.get(int(x), np.nan) for x in r])
                ax.fill_between(r, v - band, v + band, color=colour, alpha=0.15, lw=0)
            if cid in cross:
                rc, vc = cross[cid]
                ax.plot(rc, vc, color=colour, lw=1.5, ls="--",
                        label=f"{plot.cluster_label(cid)}: across groups")  # fmt: skip
        plot.split_markers(ax, data)
        ax.set_ylabel(f"mean entry of {title.split()[-1]}")
        ax.set_title(title, fontsize=plot.LEGEND_PT + 1, loc="left")
        ax.grid(alpha=0.3)

    axes[-1].set_xlabel("round")
    # one legend for both panels, below them, where it hides no line
    named: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            named.setdefault(label, handle)
    if len(named) <= 14:
        handles = list(named.values())
        handles.append(Patch(color="0.5", alpha=0.3,
                             label="band: ± a row's spread within its group"))  # fmt: skip
        fig.legend(handles=handles, loc="outside lower center", fontsize=plot.LEGEND_PT, ncols=3)
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


#: why a split test made no split, or that it made one: (marker, filled, legend text)
TEST_OUTCOMES = {
    "split": ("*", True, "split made"),
    "above": ("o", False, "above the threshold: no partition"),
    "references": ("X", True, "refused: not below the references' mark"),
    "waiting": ("s", False, "a first proposal: waits for the same one again"),
    "proposed": ("o", True, "proposed"),
}


def test_outcomes(
    data: RunData, cid: str, rounds, scores, reference: dict[int, float]
) -> list[str]:
    """Why each split test of cluster ``cid`` (its rounds and best scores; ``reference``:
    the references' median score by round, where they were drawn) did or did not
    split: ``split`` (the cluster split in that round), ``above`` (its score was not below
    ``db_threshold``), ``references`` (the Gaussian references were drawn and its score
    was not below ``reference_ratio`` times their median), ``waiting`` (below the threshold
    with ``stable_tests`` > 1 and no references drawn: the proposal waits for the next test
    to repeat it), else ``proposed``."""
    split_at = {n.split_round for n in data.hierarchy if n.id == cid and n.split_round >= 0}
    threshold, ratio = plot.setting(data, "db_threshold"), plot.setting(data, "reference_ratio")
    stable = plot.setting(data, "stable_tests") or 1
    out = []
    for t, score in zip(rounds.tolist(), scores.tolist(), strict=True):
        if int(t) in split_at:
            out.append("split")
        elif threshold is not None and not score < threshold:
            out.append("above")
        elif int(t) in reference and ratio is not None and not score < ratio * reference[int(t)]:
            out.append("references")
        elif stable > 1:
            out.append("waiting")
        else:
            out.append("proposed")
    return out


def db_tests(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
    """FedGWC's split tests: each test's best Davies–Bouldin score against the threshold
    and, with the calibrated test, against the Gaussian references' score; each marked
    with what came of it (:func:`test_outcomes`)."""
    from matplotlib.lines import Line2D

    db = series(data.cluster_metrics, "db")
    if not db:
        return None
    reference = series(data.cluster_metrics, "db_reference")
    threshold, ratio = plot.setting(data, "db_threshold"), plot.setting(data, "reference_ratio")
    fig = plot.new_figure(8, 5.6)
    ax = fig.add_subplot()
    seen: set[str] = set()
    for cid, (r, v) in db.items():
        colour = palette.of(cid)
        rr, vr = reference.get(cid, (np.zeros(0), np.zeros(0)))
        at = dict(zip(rr.astype(int).tolist(), vr.tolist(), strict=True))
        outcomes = test_outcomes(data, cid, r, v, at)
        for kind in dict.fromkeys(outcomes):
            marker, filled, _ = TEST_OUTCOMES[kind]
            keep = np.array([o == kind for o in outcomes])
            ax.plot(r[keep], v[keep], ls="", marker=marker, ms=12 if kind == "split" else 8,
                    color=colour, markerfacecolor=colour if filled else "white",
                    markeredgewidth=1.6, zorder=3)  # fmt: skip
            seen.add(kind)
        if at and ratio is not None:
            ax.plot(rr, ratio * vr, ls="", marker="_", ms=16, mew=2.5, color=colour, zorder=2)
            seen.add("mark")
    if threshold is not None:
        ax.axhline(threshold, color="crimson", ls="--", lw=1.2)
    plot.split_markers(ax, data)
    ax.set_xlabel("round")
    ax.set_ylabel("best Davies–Bouldin score (lower: more clustered)")
    ax.grid(alpha=0.3)
    ax.set_ylim(0, max(float(np.nanmax([v.max() for _, v in db.values()])), threshold or 0) * 1.15)
    handles = [Line2D([], [], ls="", marker="o", ms=8, color=palette.of(cid),
                      label=plot.cluster_label(cid)) for cid in db][:8]  # fmt: skip
    for kind, (marker, filled, text) in TEST_OUTCOMES.items():
        if kind in seen:
            face = "0.3" if filled else "white"
            handles.append(Line2D([], [], ls="", marker=marker, ms=8, color="0.3",
                                  markerfacecolor=face, label=text))  # fmt: skip
    if "mark" in seen:
        handles.append(Line2D([], [], ls="", marker="_", ms=14, mew=2.5, color="0.3",
                              label=f"{ratio:g} × the references' median: to beat"))  # fmt: skip
    if threshold is not None:
        handles.append(Line2D([], [], color="crimson", ls="--", label=f"threshold {threshold:g}"))
    fig.legend(handles=handles, loc="outside lower center", fontsize=plot.LEGEND_PT, ncols=3)
    ax.set_title("Split tests: the best score, what it had to beat, what came of it")
    caption = (
        "The best Davies–Bouldin score of each split test's spectral partitions, one marker "
        "per test in the cluster's colour, its shape saying what came of it: a star where "
        "the cluster split; hollow circles above the threshold (dashed red)"
    )
    stable = plot.setting(data, "stable_tests") or 1
    if stable > 1:
        caption += (
            f"; hollow squares below it whose partition waits for the next test to propose "
            f"it again ({stable} tests in a row must agree)"
        )
    if reference:
        caption += (
            "; the bars are the fraction of the median score of Gaussian references (one "
            "cloud with P's mean and covariance, no groups) that a proposal must beat, drawn "
            "only when the other conditions hold, and crosses the tests refused by it (see "
            "the calibrated split test in the algorithms page)"
        )
    return fig, caption + "."


def split_embedding(data: RunData, split: SplitRecord, palette: plot.Palette) -> plot.Drawn | None:
    from matplotlib.lines import Line2D

    W = split.datasets.get("affinity")
    if W is None:
        return None
    xy = embedding_2d(W, data.config.run.effective_sampling_seed() + split.round)
    fig = plot.new_figure(7.5, 5.5)
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
            [],
            [],
            ls="",
            marker="o",
            color=palette.of(f"{split.id}.{c}"),
            label=plot.cluster_label(f"{split.id}.{c}"),
        )  # fmt: skip
        for c in kids
    ]
    shape = [
        Line2D([], [], ls="", marker=palette.marker(g), color="0.4", label=palette.name(g))
        for g in groups
    ]
    # beside the axes, where they hide no client
    kw = dict(fontsize=plot.LEGEND_PT, title_fontsize=plot.LEGEND_PT)
    fig.legend(handles=colour, title="cluster", loc="outside right upper", **kw)
    fig.legend(handles=shape, title="group", loc="outside right lower", **kw)
    ax.set_title(f"Split of {split.id} at round {split.round}: spectral embedding of W")
    return fig, (
        f"The members of cluster {split.id} in the 2-D spectral embedding of W at round "
        f"{split.round}: colour = the cluster chosen, marker = the ground-truth group."
    )


def split_db(data: RunData, split: SplitRecord, palette: plot.Palette) -> plot.Drawn | None:
    scores = split.datasets.get("db_scores")
    if scores is None or not len(scores):
        return None
    scores = np.asarray(scores, dtype=np.float64)
    ns = np.arange(2, 2 + len(scores))
    chosen = len(set(split.labels.tolist()))
    finite = np.isfinite(scores)
    fig = plot.new_figure(6, 4)
    ax = fig.add_subplot()
    colours = ["tab:orange" if n == chosen else "tab:blue" for n in ns]
    heights = np.where(finite, scores, 0.0)
    ax.bar(ns, heights, color=colours, width=0.6)
    for n, ok in zip(ns, finite, strict=True):
        if not ok:
            ax.text(n, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.4")
    threshold = plot.setting(data, "db_threshold")
    if threshold is not None:
        ax.axhline(threshold, color="crimson", ls="--", lw=1.2, label=f"threshold {threshold:g}")
    ax.set_xticks(ns)
    ax.set_xlabel("number of clusters n")
    ax.set_ylabel("Davies–Bouldin score (lower is better)")
    ax.legend(fontsize=plot.LEGEND_PT)
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
    from distfl.algorithms.fedgwc.spectral import spectral_embedding

    n = W.shape[0]
    if n < 2:
        return np.zeros((n, 2))
    emb = spectral_embedding(np.asarray(W), min(3, n), seed)
    out = np.zeros((n, 2))
    cols = emb[:, 1:3]
    out[:, : cols.shape[1]] = cols
    return out

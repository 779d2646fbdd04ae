"""CFL's figure in ``distfl report``: each cluster's update norms against ε₁ and ε₂."""

from __future__ import annotations

from distfl import plot
from distfl.runfile.view import RunData, series


def norms(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
    mean = series(data.cluster_metrics, "mean_norm")
    peak = series(data.cluster_metrics, "max_norm")
    if not mean and not peak:
        return None
    eps1, eps2 = plot.setting(data, "eps1"), plot.setting(data, "eps2")
    fig = plot.new_figure(8, 6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax, table, eps, what in (
        (top, mean, eps1, "‖mean update‖ (ε₁)"),
        (bottom, peak, eps2, "max ‖update‖ (ε₂)"),
    ):
        for cid, (r, v) in table.items():
            ax.plot(r, v, color=palette.of(cid), lw=1.5, label=plot.cluster_label(cid))
        if eps is not None:
            ax.axhline(eps, color="crimson", ls="--", lw=1.2, label=f"{eps:g}")
        plot.split_markers(ax, data)
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        if len(table) <= 16:
            ax.legend(fontsize=plot.LEGEND_PT, loc="upper right", ncols=2 if len(table) > 4 else 1)
    bottom.set_xlabel("round")
    top.set_title("CFL's split criterion: mean update norm below ε₁ and max above ε₂")
    if eps1 is None or eps2 is None:
        return fig, "Update norms per cluster: the norm of its mean update and its largest."
    return fig, (
        "CFL's update norms per cluster: a cluster splits when the norm of its mean update "
        f"is below ε₁ = {eps1:g} and its largest client update above ε₂ = {eps2:g}."
    )

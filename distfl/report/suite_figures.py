"""The figures of a suite's report (``distfl report DIR``): a bar chart per metric, a group
of bars per scenario and a bar per algorithm, drawn with :mod:`distfl.plot`'s helpers."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np

from distfl.plot import (
    LEGEND_COLUMN_IN,
    LEGEND_PT,
    Drawn,
    legend_columns,
    new_figure,
    outside_legend,
    style,
)

#: what the charts call their metrics on the value axis (the table's column names
#: otherwise); WAS and WADB as the docs and the table name them
METRIC_NAMES = {
    "rand": "Rand index",
    "ari": "adjusted Rand index (ARI)",
    "was": "WAS",
    "wadb": "WADB",
    "accuracy": "final balanced accuracy",
    "accuracy_worst": "worst client's final balanced accuracy",
    "clusters": "clusters found",
    "first_split": "round of the first split",
}
#: the metrics that are proportions (at most 1): drawn on the whole scale
PROPORTIONS = ("rand", "ari", "accuracy", "accuracy_worst")
#: the metrics that count clusters: whole numbers, with the true number of groups drawn
COUNTS = ("clusters",)
#: where a run's score is undefined (WAS and WADB of a single cluster), the bar's place says so
UNDEFINED = "n/a"
#: the label of the line at each scenario's true number of groups
TRUE_GROUPS = "true number of groups"
#: the points of the title's font, and a character's mean width in ems (for wrapping)
TITLE_PT = LEGEND_PT + 2
EM_WIDTH = 0.6


def _values(rows: Sequence[dict[str, Any]], metric: str):
    """(scenario, algorithm) -> the metric's finite values over the seeds, for every pair
    that has a row (an empty list: undefined in each of its runs)."""
    values: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        v = row.get(metric)
        kept = values.setdefault((str(row["scenario"]), str(row["algorithm"])), [])
        if v is not None and not (isinstance(v, float) and not math.isfinite(v)):
            kept.append(float(v))
    return values


def _number(value: float, whole: bool) -> str:
    """A bar's label: a count as an integer (a mean over seeds with one decimal where it is
    not one), any other score with two decimals."""
    if whole:
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.2f}"


def _wrap(text: str, inches: float, points: float) -> str:
    """``text`` broken into lines that fit ``inches`` at a font of ``points``."""
    chars = max(8, int(inches * 72 / (EM_WIDTH * points)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=False)) or text


def _bars(ax, at, values, scenarios, algo: str, j: int, *, width, errors, whole, turn) -> None:
    """One algorithm's bars at ``at``: the mean over seeds (the seeds' range as an error
    bar), a label with its value, a thick line on the axis for a mean of 0 and
    :data:`UNDEFINED` where the algorithm has runs but no defined value (``turn``: upright,
    for a bar too narrow to hold it level)."""
    cells = [values.get((s, algo)) for s in scenarios]
    mean = np.array([np.mean(v) if v else math.nan for v in cells], dtype=np.float64)
    lo = [m - min(v) if v else 0.0 for m, v in zip(mean, cells, strict=True)]
    hi = [max(v) - m if v else 0.0 for m, v in zip(mean, cells, strict=True)]
    look = style(j)
    bars = ax.bar(at, mean, width=width, color=look.colour, hatch=look.hatch,
                  yerr=[lo, hi] if errors else None, capsize=3, label=algo, edgecolor="black",
                  linewidth=0.4)  # fmt: skip
    ax.bar_label(bars, labels=["" if math.isnan(m) else _number(m, whole) for m in mean],
                 fontsize=LEGEND_PT - 1, padding=2)  # fmt: skip
    zero = mean == 0
    if zero.any():  # a bar of height 0 is still a result: a thick line on the axis
        ax.hlines(np.zeros(zero.sum()), at[zero] - width * 0.45, at[zero] + width * 0.45,
                  color=look.colour, lw=4, zorder=3)  # fmt: skip
    for x, v in zip(at, cells, strict=True):
        if v is not None and not v:  # runs, none with a defined value
            ax.text(x, 0, UNDEFINED, ha="center", va="bottom", rotation=90 if turn else 0,
                    fontsize=LEGEND_PT, color=look.colour, fontweight="bold")  # fmt: skip


def _true_groups(ax, rows: Sequence[dict[str, Any]], scenarios: list[str]) -> None:
    """A dashed black line over each scenario's bars at its true number of groups."""
    label = TRUE_GROUPS
    for i, s in enumerate(scenarios):
        groups = {int(r["groups"]) for r in rows
                  if str(r["scenario"]) == s and r.get("groups") is not None}  # fmt: skip
        for g in sorted(groups):
            ax.plot([i - 0.45, i + 0.45], [g, g], color="black", ls="--", lw=1.5, zorder=4,
                    label=label, gid="true-groups")  # fmt: skip
            label = "_nolegend_"


def _scenario_ticks(ax, scenarios: list[str], inches: float) -> None:
    """Each scenario's name centred under its group of bars, broken at hyphens to fit its
    share of the width; a name that cannot be broken to fit is turned, its end at the
    group's centre."""
    share = inches / max(len(scenarios), 1)
    names = [_wrap(s, share, LEGEND_PT) for s in scenarios]
    chars = max(8, int(share * 72 / (EM_WIDTH * LEGEND_PT)))
    if all(len(line) <= chars for n in names for line in n.splitlines()):
        ax.set_xticks(np.arange(len(scenarios)), names, fontsize=LEGEND_PT)
    else:
        ax.set_xticks(np.arange(len(scenarios)), scenarios, fontsize=LEGEND_PT, rotation=30,
                      ha="right", rotation_mode="anchor")  # fmt: skip


def metric_bars(rows: Sequence[dict[str, Any]], metric: str, title: str) -> Drawn | None:
    """Grouped bars: one group per scenario, one bar per algorithm, the mean over seeds with
    the seeds' range as an error bar (none with one seed); a mean of 0 shows as a short
    thick line on the axis, an undefined score as :data:`UNDEFINED`; a count in whole
    numbers, with a line at each scenario's true number of groups. None when no run has
    a value."""
    values = _values(rows, metric)
    if not any(values.values()):
        return None
    scenarios = list(dict.fromkeys(str(r["scenario"]) for r in rows))
    algorithms = list(dict.fromkeys(str(r["algorithm"]) for r in rows))
    seeds = sorted({len(v) for v in values.values() if v})
    whole = metric in COUNTS
    inches = max(6.0, min(1.1 * len(scenarios) * max(1, len(algorithms) / 2) + 2, 20))
    fig = new_figure(inches, 4.8)
    # the legend's columns beyond the first widen the figure: the axes keep their room
    fig.set_figwidth(inches + LEGEND_COLUMN_IN * (legend_columns(fig, len(algorithms) + 1) - 1))
    ax = fig.add_subplot()
    x = np.arange(len(scenarios))
    width = 0.8 / len(algorithms)
    # a bar's width in inches, against the width of "n/a" level
    turn = width * (inches - 1.2) / len(scenarios) < 4 * EM_WIDTH * LEGEND_PT / 72
    for j, algo in enumerate(algorithms):
        _bars(ax, x - 0.4 + width * (j + 0.5), values, scenarios, algo, j, width=width,
              errors=seeds != [1], whole=whole, turn=turn)  # fmt: skip
    if whole:
        from matplotlib.ticker import MaxNLocator

        _true_groups(ax, rows, scenarios)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _scenario_ticks(ax, scenarios, inches - 1.2)  # (the value axis's labels take the rest)
    ax.set_xlim(-0.5, len(scenarios) - 0.5)  # every bar's place, those of n/a too
    ax.set_xlabel("scenario")
    ax.set_ylabel(METRIC_NAMES.get(metric, metric))
    if metric in PROPORTIONS:
        low = min([0.0] + [min(v) for v in values.values() if v])
        ax.set_ylim(low - 0.05 if low < 0 else 0.0, 1.15)
    else:
        ax.margins(y=0.12)  # room above the highest bar for its label
    ax.axhline(0, color="0.3", lw=0.8)
    ax.grid(alpha=0.3, axis="y")
    outside_legend(fig, *ax.get_legend_handles_labels())
    n = seeds[0] if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
    how = (
        "one seed, no error bars" if seeds == [1]
        else f"mean of {n} seeds; error bars: the lowest and highest seed"
    )  # fmt: skip
    # from the axes' left edge, in lines that end inside the figure whatever the legend takes
    ax.set_title(_wrap(f"{title} ({how})", inches - 1.2, TITLE_PT), fontsize=TITLE_PT, loc="left")
    return fig, (
        f"{title}: per scenario (groups of bars) and algorithm (colours), {how}; the number "
        f"on each bar is its mean, and {UNDEFINED} marks an algorithm whose runs have no "
        "value (WAS and WADB are undefined for a single cluster). Higher is better for the "
        "Rand index, the ARI and the accuracy; an ARI of 0 is a clustering no better than "
        "chance (one cluster for all)."
        + (f" The dashed line is each scenario's {TRUE_GROUPS}." if whole else "")
    )


def _scenario_runs(rows: Sequence[dict[str, Any]], scenario: str):
    """(algorithm, its /metrics columns, its loss target) of each run of ``scenario``,
    each run file read once."""
    from distfl.runfile.run import read

    out = []
    for row in rows:
        if str(row["scenario"]) != scenario or not row.get("file"):
            continue
        run = read(row["file"])
        table = run.metrics
        names = getattr(table, "columns", None)
        names = list(names) if names is not None else list(table.dtype.names or ())
        metrics = {c: np.asarray(table[c]) for c in names}
        out.append((str(row["algorithm"]), metrics, run.config.eval.loss_target))
    return out


def _curves(runs, x: str, y: str):
    """algorithm -> (x, mean y over its seeds) of ``runs`` (:func:`_scenario_runs`) at
    their evaluation rounds (``x``: ``round`` or ``sim_elapsed_s``; ``y``: ``test_loss``,
    or ``paper`` for the seed-004 paper's l_g, the mean in-sample plus the mean
    out-of-sample loss)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    by_algorithm: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for algorithm, m, _ in runs:
        if "test_loss" not in m or x not in m:
            continue
        if y == "paper":
            inside = np.asarray(m.get("loss_in_sample", ()), dtype=np.float64)
            outside = np.asarray(m.get("loss_out_of_sample", ()), dtype=np.float64)
            if not len(inside) or not np.isfinite(inside).any():
                continue
            values = inside + np.where(np.isfinite(outside), outside, 0.0)
        else:
            values = np.asarray(m["test_loss"], dtype=np.float64)
        xs = np.asarray(m[x], dtype=np.float64)
        keep = np.isfinite(values) & np.isfinite(xs)
        if keep.any():
            by_algorithm.setdefault(algorithm, []).append((xs[keep], values[keep]))
    for algo, found in by_algorithm.items():
        n = min(len(v) for _, v in found)
        out[algo] = (
            np.mean([xs[:n] for xs, _ in found], axis=0),
            np.mean([v[:n] for _, v in found], axis=0),
        )
    return out


def loss_curves(rows: Sequence[dict[str, Any]], scenario: str) -> Drawn | None:
    """The seed-004 paper's figure for one scenario of a suite (:func:`loss_figure`), of
    the run files of ``rows``, each algorithm in the style it has in every figure of the
    suite (its place among the algorithms of ``rows``)."""
    order = list(dict.fromkeys(str(r["algorithm"]) for r in rows))
    return loss_figure(_scenario_runs(rows, scenario), scenario, order=order)


def loss_figure(runs, scenario: str, *, order: Sequence[str] = ()) -> Drawn | None:
    """Each algorithm's mean test loss against the rounds and against the simulated time
    (when the runs have a clock), and the paper's l_g (in-sample plus out-of-sample loss,
    when the runs record coverage), one line per algorithm (the mean over its seeds, in its
    :func:`~distfl.plot.style`), one legend outside the panels; a dotted line at the runs'
    loss target. ``runs``: :func:`_scenario_runs`'s; ``order``: the algorithms whose place
    gives each its style (others after them). None when no run has two evaluations."""
    panels = [
        ("round", "test_loss", "round", "mean test loss"),
        ("sim_elapsed_s", "test_loss", "simulated seconds", "mean test loss"),
        ("round", "paper", "round", "in-sample + out-of-sample loss"),
    ]
    drawn = [(panels[0], _curves(runs, "round", "test_loss"))]
    for panel in panels[1:]:  # the clock's and the coverage's, where the runs have them
        if curves := _curves(runs, panel[0], panel[1]):
            drawn.append((panel, curves))
    if not any(len(xs) > 1 for _, c in drawn for xs, _ in c.values()):
        return None
    targets = {target for _, _, target in runs}
    target = max(targets) if targets else 0.0
    algorithms = list(dict.fromkeys([*order, *(a for _, c in drawn for a in c)]))
    fig = new_figure(5.0 * len(drawn), 4.2)
    entries = len({a for _, c in drawn for a in c}) + (target > 0)
    fig.set_figwidth(5.0 * len(drawn) + LEGEND_COLUMN_IN * legend_columns(fig, entries))
    legend: dict[str, Any] = {}
    for i, ((_, _, xlabel, ylabel), curves) in enumerate(drawn):
        ax = fig.add_subplot(1, len(drawn), i + 1)
        for algo, (xs, ys) in curves.items():
            look = style(algorithms.index(algo))
            (line,) = ax.plot(xs, ys, color=look.colour, ls=look.line, marker=look.marker,
                              markersize=4, label=algo)  # fmt: skip
            legend.setdefault(algo, line)
        if target > 0:
            line = ax.axhline(target, color="0.5", linestyle=":", linewidth=1)
            legend.setdefault(f"target {target:g}", line)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    outside_legend(fig, list(legend.values()), list(legend))
    fig.suptitle(f"{scenario}: loss against rounds" + (" and simulated time" if len(drawn) > 1
                                                       else ""))  # fmt: skip
    caption = (
        f"{scenario}: each algorithm's mean test loss over its seeds at each evaluation, "
        "against the rounds"
        + (", against the simulated seconds" if any(p[0] == "sim_elapsed_s" for p, _ in drawn)
           else "")
        + (", and the seed-004 paper's l_g (mean in-sample + mean out-of-sample loss)"
           if any(p[1] == "paper" for p, _ in drawn) else "")
        + (f"; the dotted line is the loss target {target:g}" if target > 0 else "")
    )  # fmt: skip
    return fig, caption

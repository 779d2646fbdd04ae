"""The suite's bar charts (``distfl report DIR``), read from matplotlib's artists: a score
that is undefined is marked where its bar would be, each scenario's name sits under its
bars, the title is whole inside the figure, the value axis names the metric as the docs
do, and the clusters chart counts in whole numbers with a line at the true number of
groups."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from distfl.report import SUITE_METRICS
from distfl.report.suite_figures import TRUE_GROUPS, UNDEFINED, metric_bars

SCENARIOS = ("default", "digits-mixed-rotations-and-labels", "tiny")
GROUPS = {"default": 2, "digits-mixed-rotations-and-labels": 4, "tiny": 3}
TITLES = dict(SUITE_METRICS)


def rows(seeds=(0, 1)):
    """A suite's table: a clustering algorithm that finds clusters (WAS and WADB defined)
    and one global model (a single cluster: WAS and WADB undefined)."""
    out = []
    for s in SCENARIOS:
        for algorithm in ("fedgwc", "fedavg"):
            for seed in seeds:
                single = algorithm == "fedavg"
                out.append({
                    "scenario": s, "algorithm": algorithm, "seed": seed, "groups": GROUPS[s],
                    "clusters": 1 if single else GROUPS[s] + seed,
                    "was": None if single else 0.4 + 0.1 * seed,
                    "wadb": None if single else 0.9 - 0.1 * seed,
                    "ari": 0.0 if single else 0.8,
                })  # fmt: skip
    return out


@functools.cache
def drawn(metric, seeds=(0, 1)):
    """The chart of ``metric`` over :func:`rows`, laid out (drawn once: no test changes it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig, caption = metric_bars(rows(seeds), metric, TITLES[metric])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # lays the figure out: the artists' places are final
    return fig, fig.axes[0], canvas.get_renderer(), caption


@pytest.mark.parametrize(("metric", "label"), [("was", "WAS"), ("wadb", "WADB")])
def test_the_value_axis_names_the_metric_as_the_docs_do(metric, label):
    _, ax, _, _ = drawn(metric)
    assert ax.get_ylabel() == label
    assert ax.get_xlabel() == "scenario"


@pytest.mark.parametrize("metric", ["was", "wadb"])
def test_an_undefined_score_is_marked_where_its_bar_would_be(metric):
    _, ax, _, caption = drawn(metric)
    marks = [t for t in ax.texts if t.get_text() == UNDEFINED]
    assert len(marks) == len(SCENARIOS)  # the global model's bar in each scenario
    fedavg = next(c for c in ax.containers if c.get_label() == "fedavg")
    centres = [bar.get_x() + bar.get_width() / 2 for bar in fedavg]
    assert sorted(m.get_position()[0] for m in marks) == pytest.approx(sorted(centres))
    assert all(np.isnan(bar.get_height()) for bar in fedavg)
    assert "nan" not in {t.get_text() for t in ax.texts}
    assert UNDEFINED in caption


def test_the_mark_of_the_last_bar_is_inside_the_axes():
    """One scenario whose last algorithm has no value: its mark is within the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    table = [r for r in rows(seeds=(0,)) if r["scenario"] == "tiny"]
    fig, _ = metric_bars(table, "was", TITLES["was"])
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    (mark,) = [t for t in ax.texts if t.get_text() == UNDEFINED]
    low, high = ax.get_xlim()
    assert low < mark.get_position()[0] < high


def test_no_mark_where_every_score_is_defined():
    _, ax, _, _ = drawn("ari")
    assert not [t for t in ax.texts if t.get_text() == UNDEFINED]


@pytest.mark.parametrize("metric", ["was", "wadb", "clusters", "ari"])
def test_each_scenario_name_is_under_its_bars_and_the_title_is_whole(metric):
    fig, ax, renderer, _ = drawn(metric)
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert [t.get_text().replace("\n", "") for t in labels] == list(SCENARIOS)
    bars = [b for c in ax.containers if hasattr(c, "patches") for b in c.patches]
    to_pixels = ax.transData.transform
    for i, label in enumerate(labels):
        mine = [b for b in bars if abs(b.get_x() + b.get_width() / 2 - i) < 0.45]
        left = to_pixels((min(b.get_x() for b in mine), 0))[0]
        right = to_pixels((max(b.get_x() + b.get_width() for b in mine), 0))[0]
        box = label.get_window_extent(renderer)
        assert left <= (box.x0 + box.x1) / 2 <= right, (label.get_text(), box, left, right)
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))  # side by side, apart
    page = fig.bbox
    text = ax.get_title(loc="left")
    assert text.replace("\n", " ").startswith(TITLES[metric])
    (title,) = [
        t for t in ax.get_children() if getattr(t, "get_text", None) and t.get_text() == text
    ]
    box = title.get_window_extent(renderer)
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, (box, page)


def test_cluster_counts_are_whole_numbers_with_a_line_at_the_true_groups():
    fig, ax, _, caption = drawn("clusters", seeds=(0,))
    labels = [t.get_text() for t in ax.texts if t.get_text()]
    assert sorted(labels) == sorted(["1", "1", "1", "2", "4", "3"]), labels
    ticks = [v for v in ax.get_yticks() if ax.get_ylim()[0] <= v <= ax.get_ylim()[1]]
    assert ticks and all(float(v).is_integer() for v in ticks)
    lines = [ln for ln in ax.lines if ln.get_gid() == "true-groups"]
    assert sorted(ln.get_ydata()[0] for ln in lines) == sorted(GROUPS.values())
    for i, s in enumerate(SCENARIOS):  # each across its scenario's bars, at its groups
        (line,) = [ln for ln in lines if ln.get_xdata()[0] < i < ln.get_xdata()[1]]
        assert list(line.get_ydata()) == [GROUPS[s]] * 2
    assert TRUE_GROUPS in [t.get_text() for t in fig.legends[0].get_texts()]
    assert TRUE_GROUPS in caption


def test_a_mean_over_seeds_that_is_not_whole_has_one_decimal():
    _, ax, _, _ = drawn("clusters")  # seeds 0 and 1: 2 and 3 clusters, 2.5 on average
    labels = {t.get_text() for t in ax.texts}
    assert {"1", "2.5", "4.5", "3.5"} <= labels


def test_twenty_colours_before_one_comes_again():
    """The report's categorical colours (clusters, algorithms): the first 20 pairwise
    unlike (tab20's dark shades are tab10's own colours: none of them twice)."""
    from looks import ALIKE, delta_e

    from distfl.plot import colour

    colours = [colour(i) for i in range(20)]
    close = [(i, j) for i in range(20) for j in range(i) if delta_e(colours[i], colours[j]) < ALIKE]
    assert not close, close


def test_25_styles_are_pairwise_distinct():
    """Each of 25 algorithms has a look of its own: two whose colours are alike differ in
    marker, line style and hatch (and so, in a figure, in each of them)."""
    from looks import told_apart

    from distfl.plot import style

    looks = [style(i) for i in range(25)]
    tuples = [(s.colour, s.marker, s.line, s.hatch) for s in looks]
    assert len(set(tuples)) == 25
    for i in range(25):
        for j in range(i):
            assert told_apart(tuples[i], tuples[j]), (i, j, tuples[i], tuples[j])


def many(n=25):
    """A suite's table of ``n`` algorithms on two scenarios, one seed."""
    return [{"scenario": s, "algorithm": f"method{i}", "seed": 0, "groups": 2,
             "clusters": 1 + i % 3, "ari": 0.03 * i}
            for s in ("default", "tiny") for i in range(n)]  # fmt: skip


def test_the_bars_of_25_algorithms_are_told_apart():
    """Each algorithm's bars (their colour and hatch, as drawn) unlike every other's."""
    from looks import told_apart

    fig, _ = metric_bars(many(), "ari", TITLES["ari"])
    ax = fig.axes[0]
    bars = {c.get_label(): c.patches[0] for c in ax.containers if hasattr(c, "patches")}
    assert list(bars) == [f"method{i}" for i in range(25)]
    looks = [(b.get_facecolor(), b.get_hatch() or "") for b in bars.values()]
    for i in range(25):
        for j in range(i):
            assert told_apart(looks[i], looks[j]), (i, j, looks[i], looks[j])


@pytest.mark.parametrize("n", [2, 25])
@pytest.mark.parametrize("metric", ["ari", "clusters"])
def test_the_bar_legend_is_outside_the_axes_and_inside_the_figure(tmp_path, metric, n):
    """After the figure is saved as the report saves it (its constrained layout), the
    legend's box is within the figure and clear of the axes: every entry legible."""
    from looks import assert_legend_outside

    from distfl.plot import save

    fig, _ = metric_bars(many(n), metric, TITLES[metric])
    save(fig, tmp_path / "bars.png")
    assert_legend_outside(fig, entries=n + (metric == "clusters"))

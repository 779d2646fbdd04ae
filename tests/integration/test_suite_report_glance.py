"""A suite's report reads at a glance: the loss figure of 25 algorithms tells every curve
apart and keeps its legend outside the panels and inside the figure as saved.

The run files are made in this process (``helpers.run_alone``): one run of the FLCL
Fig. 2 pool (two rounds, each evaluated, with the clock and the coverage: the figure's
three panels), which the 25 algorithms' rows of a suite table all read."""

from __future__ import annotations

import pytest
from looks import assert_legend_outside, told_apart

from distfl.report.suite_figures import loss_curves

pytestmark = pytest.mark.integration

RUN = "flcl-fig2--fedavg--s0.h5"


@pytest.fixture(scope="module")
def run_file(tmp_path_factory, helpers):
    directory = tmp_path_factory.mktemp("glance")
    helpers.run_alone(directory, "--preset", "flcl-fig2", "--set", 'algorithm.name="none"',
                      "--set", "run.rounds=2", "--set", "eval.every=1", "--set",
                      'run.progress="none"', "--out", RUN)  # fmt: skip
    return directory / RUN


def rows(run_file, n: int):
    return [{"scenario": "flcl-fig2", "algorithm": f"method{i}", "seed": 0, "file": run_file}
            for i in range(n)]  # fmt: skip


@pytest.mark.parametrize("n", [2, 25])
def test_the_loss_legend_is_outside_every_panel_and_inside_the_figure(run_file, tmp_path, n):
    """After the figure is saved as the report saves it (its constrained layout), its one
    legend, every algorithm and the loss target, is within the figure and over no panel."""
    from distfl.plot import save

    fig, _ = loss_curves(rows(run_file, n), "flcl-fig2")
    assert len(fig.axes) == 3  # rounds, simulated time, in- plus out-of-sample loss
    save(fig, tmp_path / "loss.png")
    assert_legend_outside(fig, entries=n + 1)


def test_the_curves_of_25_algorithms_are_told_apart(run_file):
    """Each algorithm's curve (colour, line style and marker, as drawn) unlike every
    other's, the same in every panel."""
    fig, _ = loss_curves(rows(run_file, 25), "flcl-fig2")
    panels = []
    for ax in fig.axes:
        lines = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_label().startswith("m")}
        assert list(lines) == [f"method{i}" for i in range(25)]
        panels.append([(ln.get_color(), ln.get_linestyle(), ln.get_marker())
                       for ln in lines.values()])  # fmt: skip
    assert panels[0] == panels[1] == panels[2]
    looks = panels[0]
    for i in range(25):
        for j in range(i):
            assert told_apart(looks[i], looks[j]), (i, j, looks[i], looks[j])

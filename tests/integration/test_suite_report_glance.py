"""A suite's report reads at a glance: the loss figure of 25 algorithms tells every curve
apart and keeps its legend outside the panels and inside the figure as saved, and a
directory of a ``distfl suite --table`` shows the paper's comparison on its page, one seed
as ``n = 1`` and rounds as whole numbers.

The run files are made in this process (``helpers.run_alone``): one run of the FLCL
Fig. 2 pool (two rounds, each evaluated, with the clock and the coverage: the figure's
three panels), which the 25 algorithms' rows of a suite table all read."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser

import pytest
from looks import assert_legend_outside, told_apart

from distfl.report.suite_figures import loss_curves
from distfl.tools.paper_tables import TABLES

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


class Tables(HTMLParser):
    """Each ``<table>`` of a page as rows of cell texts, with the ``<h2>`` before it."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.heading, self._text, self._in = "", None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append((self.heading, []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th", "h2"):
            self._text, self._in = "", tag

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._in == tag:
            self.tables[-1][1][-1].append(self._text)
        elif tag == "h2" and self._in == "h2":
            self.heading = self._text
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data


def test_the_paper_comparison_is_on_the_suite_page(run_file, helpers, tmp_path):
    """A directory of ``distfl suite --table flcl-fig2`` (its comparison's first line names
    the table): the page shows the paper's table beside the runs, computed from the run
    files, with the counts of seeds."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(run_file, suite / RUN)
    table = TABLES["flcl-fig2"]
    (suite / "comparison.md").write_text(f"{table.title}\n")
    proc = helpers.cli(tmp_path, "report", "suite", "--out", "rep")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = Tables()
    page.feed((tmp_path / "rep" / "index.html").read_text(encoding="utf-8"))
    (rows,) = [r for heading, r in page.tables if heading == table.title]
    head = ["method", "seeds"]
    for _, heading in table.columns:
        head += [f"{heading} (distfl)", f"{heading} (paper)"]
    assert rows[0] == head
    from distfl.runfile.run import read

    loss = read(suite / RUN).summary()["test_loss"]
    assert rows[1][:4] == ["fedavg", "1", f"{loss:.3f} (n = 1)", "-"]
    assert "± 0.00" not in (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")

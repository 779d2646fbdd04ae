"""The tables of the docs that sum a suite up over its seeds are that summary
(:mod:`distfl.tools.seed_summary`) of the suite's rows, kept beside the pages in
``docs/records/`` as ``distfl suite`` wrote them (its ``suite.csv``): a page cannot show a
mean, a spread or a worst seed that its rows do not give. The rows are checked to be those
of the command the page shows: one per job of it, each seed of its ``--seeds``.
"""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

import pytest

from distfl.cli import _parser
from distfl.tools.seed_summary import COLUMNS, summarize
from distfl.tools.suite import suite_arguments
from distfl.tools.suite_plan import default_scenarios

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "fidelity.md"
#: the header of a summary table, as it starts
HEADER = "| " + " | ".join(h for _, h in COLUMNS[:3]) + " |"
#: (the heading of the section) -> the rows its summary table sums up, and the number of
#: commands of the section whose jobs those rows are
SUMMARIES = {
    "## The suite on digits": ("suite-digits.csv", 1),
    "## FedGWC's calibrated split test": ("fidelity-digits-fedgwc.csv", 2),
    "### Fidelity on digits": ("fidelity-digits.csv", 1),
}
INTS = ("seed", "groups", "clusters", "first_split", "rounds_to_target", "bytes_to_target")


def read_rows(path: Path) -> list[dict]:
    """A suite.csv's rows with its numbers read back (an empty cell: None)."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            if key in ("scenario", "algorithm"):
                continue
            row[key] = None if value == "" else int(value) if key in INTS else float(value)
    return rows


def section(heading: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    level = heading.split()[0]
    ends = [text.find(f"\n{'#' * n} ", start + len(heading)) for n in range(1, len(level) + 1)]
    ends = [e for e in ends if e >= 0]
    return text[start : min(ends) if ends else len(text)]


def summary_table(text: str) -> list[list[str]]:
    """The cells of the section's first summary table (the header's columns only)."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(HEADER))
    out = []
    for ln in lines[at + 2 :]:
        if not ln.startswith("|"):
            break
        out.append([c.strip() for c in ln.strip().strip("|").split("|")][: len(COLUMNS)])
    return out


def commands(text: str) -> list[list[str]]:
    """The ``distfl suite`` commands of the section's code blocks (argv after distfl)."""
    out = []
    for block in text.split("```")[1::2]:
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line)
            if argv[:2] == ["distfl", "suite"]:
                out.append(argv[1:])
    return out


@pytest.mark.parametrize("heading", list(SUMMARIES))
def test_the_table_is_the_summary_of_its_rows(heading):
    name, n_commands = SUMMARIES[heading]
    rows = read_rows(ROOT / "docs" / "records" / name)
    text = section(heading)
    shown = summary_table(text)
    want = [[line[c] for c, _ in COLUMNS] for line in summarize(rows)]
    for line in want:
        line[0] = f"`{line[0]}`"
    assert shown == want


@pytest.mark.parametrize("heading", list(SUMMARIES))
def test_the_rows_are_the_jobs_of_the_commands_shown(heading):
    """Every job of the section's commands has its row (scenario, algorithm, seed), and
    no row is of another; the rows sum up over ten seeds or more."""
    name, n_commands = SUMMARIES[heading]
    rows = read_rows(ROOT / "docs" / "records" / name)
    text = section(heading)
    argvs = commands(text[: text.index(HEADER)])  # the commands shown above the table
    assert len(argvs) == n_commands, argvs
    jobs = set()
    for argv in argvs:
        kw = suite_arguments(_parser().parse_args(argv))  # as distfl suite reads them
        scenarios = kw["scenarios"] or default_scenarios()
        algorithms = [{"none": "fedavg"}.get(a, a) for a in kw["algorithms"]]
        seeds = kw["seeds"]
        assert len(seeds) >= 10, argv
        jobs |= {(s, a, seed) for s in scenarios for a in algorithms for seed in seeds}
    got = [(r["scenario"], r["algorithm"], r["seed"]) for r in rows]
    assert len(got) == len(set(got))
    assert set(got) <= jobs
    if n_commands == 1:
        assert set(got) == jobs
    by_pair: dict[tuple[str, str], set[int]] = {}
    for scenario, algorithm, seed in got:
        by_pair.setdefault((scenario, algorithm), set()).add(seed)
    assert all(len(s) >= 10 for s in by_pair.values()), by_pair
    assert all(r["ari"] is not None for r in rows), "a failed run among the rows"


def test_the_reading_of_a_section_and_its_table():
    text = "## A\n\n```\ndistfl suite x --seeds 0-9\n```\n\n" + HEADER + " x |\n"
    text += "|---|\n| `a` | b | 10 |\n\nend\n"
    assert summary_table(text) == [["`a`", "b", "10"]]
    assert commands(text) == [["suite", "x", "--seeds", "0-9"]]

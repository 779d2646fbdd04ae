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
#: (the heading of the section, the summary table's place among the section's) -> the
#: rows it sums up, and the number of commands (shown between it and the section's table
#: before it) whose jobs those rows are
SUMMARIES = {
    ("## The suite on digits", 0): ("suite-digits.csv", 1),
    ("## FedGWC's calibrated split test", 0): ("fidelity-digits-fedgwc.csv", 2),
    ("## FedGWC's calibrated split test", 1): ("fidelity-mnist5k-fedgwc.csv", 1),
    ("## FedGWC's calibrated split test", 2): ("fidelity-mnist5k-long.csv", 1),
    ("## FedGWC's calibrated split test", 3): ("fidelity-mnist5k-default600.csv", 1),
    ("## FedGWC on mnist5k: the calibrated test and the paper's", 0): (
        "fidelity-mnist5k-paper.csv",
        1,
    ),
    ("### Fidelity on mnist5k", 0): ("fidelity-mnist5k-rotated.csv", 1),
    ("### Fidelity on mnist5k", 1): ("fidelity-mnist5k-ifca-warm.csv", 1),
    ("### Fidelity on mnist5k", 2): ("fidelity-mnist5k-domains.csv", 1),
    ("### Fidelity on digits", 0): ("fidelity-digits.csv", 1),
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


def table_at(text: str, place: int) -> int:
    """Where the section's summary table of that place (0: the first) starts."""
    at = -1
    for _ in range(place + 1):
        at = text.index(HEADER, at + 1)
    return at


def above(text: str, place: int) -> str:
    """The text between the summary table of that place and the section's table before it
    (or its heading)."""
    at = table_at(text, place)
    before = text.rfind("\n|", 0, text.rfind("\n", 0, at))
    return text[max(before, 0) : at]


def summary_table(text: str, place: int = 0) -> list[list[str]]:
    """The cells of the section's summary table of that place (the header's columns only)."""
    lines = text[table_at(text, place) :].splitlines()
    at = 0
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


KEYS = list(SUMMARIES)
IDS = [f"{h.lstrip('# ')}-{i}" for h, i in KEYS]


@pytest.mark.parametrize("heading,place", KEYS, ids=IDS)
def test_the_table_is_the_summary_of_its_rows(heading, place):
    name, _ = SUMMARIES[(heading, place)]
    rows = read_rows(ROOT / "docs" / "records" / name)
    shown = summary_table(section(heading), place)
    want = [[line[c] for c, _ in COLUMNS] for line in summarize(rows)]
    for line in want:
        line[0] = f"`{line[0]}`"
    assert shown == want


@pytest.mark.parametrize("heading,place", KEYS, ids=IDS)
def test_the_rows_are_the_jobs_of_the_commands_shown(heading, place):
    """Every job of the commands shown above the table has its row (scenario, algorithm,
    seed), and no row is of another; the rows sum up over ten seeds or more."""
    name, n_commands = SUMMARIES[(heading, place)]
    rows = read_rows(ROOT / "docs" / "records" / name)
    argvs = commands(above(section(heading), place))
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


def test_every_summary_table_of_the_page_is_checked():
    text = PAGE.read_text(encoding="utf-8")
    shown = text.count("\n" + HEADER)
    assert shown == len(SUMMARIES), f"{shown} summary tables on the page, {len(SUMMARIES)} checked"


def test_the_reading_of_a_section_and_its_table():
    text = "## A\n\n```\ndistfl suite x --seeds 0-9\n```\n\n" + HEADER + " x |\n"
    text += "|---|\n| `a` | b | 10 |\n\nend\n"
    assert summary_table(text) == [["`a`", "b", "10"]]
    assert commands(above(text, 0)) == [["suite", "x", "--seeds", "0-9"]]
    two = text + "\n```\ndistfl suite y\n```\n\n" + HEADER + " x |\n|---|\n| `c` | d | 9 |\n"
    assert summary_table(two, 1) == [["`c`", "d", "9"]]
    assert commands(above(two, 1)) == [["suite", "y"]]

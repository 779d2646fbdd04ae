"""Every table of measured numbers a page shows is kept true one of two ways. A test computes
it again and compares it with the page (``TABLES`` names that test), or it is a dated record
of a measurement that the suite does not repeat: runs of 15 minutes to an hour, and timings
of a shared machine, which no run reproduces to the digit. A record says when it was
measured and shows the command that measured it, and that command is still one distfl takes
today: its arguments parse, every config it names builds, every script it runs exists.

A new table of numbers fails here until it is named in ``TABLES``; a named table that no page
shows any more fails too.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from docpage import FENCE

from distfl.cli import _config_from_args, _parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: a dated record of a measurement, held to its date and its command below
RECORD = "record"
#: (page, the start of the table's header line) -> the test file that computes the table
#: again and compares it with the page, or RECORD
TABLES = {
    ("docs/benchmarks.md", "| row | rounds/s"): RECORD,
    ("docs/benchmarks.md", "| model | row | rounds/s"): RECORD,
    ("docs/benchmarks.md", "| algorithm | model | K | cohort"): RECORD,
    ("docs/benchmarks.md", "| commit | launch to the first round"): RECORD,
    ("docs/benchmarks.md", "|      K | affinity s"): RECORD,
    ("docs/fidelity.md", "| seeds 0–19 | ARI | seeds with a client"): RECORD,
    ("docs/fidelity.md", "| seed | split at round | ARI, paper's"): RECORD,
    ("docs/fidelity.md", "| scenario | ARI, paper's mode | its worst seed"): RECORD,
    ("docs/fidelity.md", "| scenario | algorithm | seeds | clusters"): "test_docs_summaries.py",
    ("docs/fidelity.md", "| method | seeds | Avg Acc"): RECORD,
    ("docs/fidelity.md", "| dataset | FedGWC | seed"): RECORD,
    ("docs/fidelity.md", "| FedGWC | what the tests propose"): RECORD,
    ("docs/fidelity.md", "| pool | method | final test loss"): RECORD,
    ("docs/fidelity.md", "| algorithm | ARI, `default` | ARI, rare minority"): RECORD,
    ("docs/scale.md", "| K | clients a round | rounds"): RECORD,
    ("docs/scale.md", "| K | clients a round | memory check"): RECORD,
    ("docs/scale.md", "| algorithm | what it does at K = 2,714"): RECORD,
    ("docs/scale.md", "| K | split test s, before"): RECORD,
    ("docs/scale.md", "| K | clients a round | P | split test s"): RECORD,
    ("docs/scale.md", "| row | one-shot round"): RECORD,
    ("docs/scale.md", "| row | pre-trained"): RECORD,
    ("docs/scale.md", "| row | start-up s | s a round | rank-0"): RECORD,
    ("docs/scale.md", "| row | profiled by round 5"): RECORD,
    ("docs/scenarios.md", "| `model.name` | parameters | s per round"): RECORD,
    ("docs/scenarios.md", "| algorithm | clusters | Rand | ARI"): RECORD,
    ("docs/algorithms.md", "| federation | what W holds"): RECORD,
    ("docs/privacy.md", "| algorithm | privacy | z | ARI"): RECORD,
    ("docs/newcomers.md", "| method | seeds | Avg Acc, trained"): RECORD,
    # generated from the code, written by python -m distfl.tools.reference --write-docs
    ("docs/configuration.md", "| dataset | key | allowed"): "test_reference.py",
}
#: the fidelity table on digits is also computed again, on a slice, by this test
SLICED = {("docs/fidelity.md", "### Fidelity on digits"): "test_fidelity_table.py"}

SEPARATOR = re.compile(r"^\|[-: |]+\|$")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
INDENTED = re.compile(r"(?:^\n)((?:^    .*\S.*\n)+)", re.M)
INLINE = re.compile(r"`((?:distfl|python|torchrun) [^`]+)`")
NUMBER = re.compile(r"^[−\-+]?[\d,.]+(?:e-?\d+)?(?:×|%| ?s| ?[KMG]iB)?$")


def numeric(cell: str) -> bool:
    """A cell of numbers: ``0.953``, ``2/2/1``, ``1.06 (1.13)``, ``2.77 s, 2.37 s``,
    ``96.48 ± 0.59``, ``–``."""
    cell = re.sub(r"^round ", "", cell.strip().strip("`*"))
    parts = [p.strip() for p in re.split(r"[/,(±]|\)| of |(?<=\d)–(?=\d)", cell) if p.strip()]
    parts = [p for p in parts if p not in ("–", "—", "-")]
    return bool(parts) and all(NUMBER.match(p) for p in parts)


def tables(page: Path) -> list[tuple[str, str, str]]:
    """(header line, its section's text before it, the text before it back to the last
    table or heading) for each table of numbers on the page: a table whose cells after the
    first column are at least a quarter numbers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, heading, since = [], 0, 0
    for i, line in enumerate(lines):
        if line.startswith("#"):
            heading = since = i
        if not SEPARATOR.match(line) or i == 0:
            continue
        rows, j = [], i + 1
        while j < len(lines) and lines[j].startswith("|"):
            rows.append(lines[j].strip().strip("|").split("|"))
            j += 1
        cells = [c for row in rows for c in row[1:]]
        if cells and sum(map(numeric, cells)) >= len(cells) / 4:
            section = "\n".join(lines[heading : i - 1]) + "\n"
            found.append((lines[i - 1], section, "\n".join(lines[since : i - 1]) + "\n"))
        since = j
    return found


def commands(text: str) -> list[str]:
    """The commands a record's text shows: fenced or indented blocks (continuation lines
    joined) and inline code that starts with ``distfl``, ``python`` or ``torchrun``, other
    than a command's name alone (`distfl report`, which needs its run file)."""
    blocks = [m.group(2) for m in FENCE.finditer(text)]
    blocks += [re.sub(r"^    ", "", m.group(1), flags=re.M) for m in INDENTED.finditer(text)]
    out = []
    for block in blocks:
        out += [" ".join(c.split()) for c in re.sub(r"\\\n", " ", block).splitlines() if c.strip()]
    inline = [" ".join(m.group(1).split()) for m in INLINE.finditer(text.replace("\n", " "))]
    return out + [c for c in inline if len(c.split()) > 2 or complete(c)]


def parsed(argv: list[str]):
    """distfl's parsed arguments of ``distfl ARGV``; None where its parser refuses them."""
    try:
        return _parser().parse_args(argv)
    except SystemExit:
        return None


def complete(command: str) -> bool:
    """Whether distfl's parser takes ``command`` as it is."""
    return parsed(shlex.split(command)[1:]) is not None


def check_command(command: str) -> None:
    """Raises AssertionError where ``command`` is not one distfl takes today."""
    argv = shlex.split(command)
    while argv and argv[0] in ("/usr/bin/time", "-v"):
        argv = argv[1:]
    if argv[:3] == ["python", "-m", "distfl"]:
        argv = ["distfl", *argv[3:]]
    if argv[0] == "python" and len(argv) > 1 and argv[1] not in ("-m", "-c"):
        assert (ROOT / argv[1]).is_file(), f"{command}: no script {argv[1]}"
        return
    if argv[0] != "distfl":
        return  # torchrun or python -m: the launchers' own arguments
    args = parsed(argv[1:])
    assert args is not None, f"{command}: distfl's parser refuses it"
    if argv[1] == "suite":  # every job's config, as distfl suite plans them before a run
        from distfl.tools.suite import plan_jobs, suite_arguments

        kw = suite_arguments(args)
        plan_jobs(kw["scenarios"], kw["algorithms"], kw["seeds"], "/nonexistent",
                  kw["overrides"], kw["variants"])  # fmt: skip
    elif argv[1] == "run":  # the config distfl run builds from them
        _config_from_args(args)


def all_tables() -> list[tuple[str, str, str, str]]:
    """(page, header, section before it, text since the last table) of every table of
    numbers."""
    return [(str(page.relative_to(ROOT)), *t) for page in PAGES for t in tables(page)]


def named(page: str, header: str) -> str | None:
    """What ``TABLES`` says of the table."""
    return next((v for (p, h), v in TABLES.items() if p == page and header.startswith(h)), None)


def test_every_table_of_numbers_is_checked_or_a_record():
    found = all_tables()
    unnamed = sorted(
        f"{page}: {header[:60]!r}" for page, header, _, _ in found if named(page, header) is None
    )
    assert not unnamed, f"tables of numbers neither checked nor a record: {unnamed}"
    gone = [k for k in TABLES if not any(k[0] == p and h.startswith(k[1]) for p, h, _, _ in found)]
    assert not gone, f"named tables no page shows: {gone}"
    tests = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert {v for v in [*TABLES.values(), *SLICED.values()] if v != RECORD} <= tests


RECORDS = [t for t in all_tables() if named(t[0], t[1]) == RECORD]


@pytest.mark.parametrize(
    "page,header,section,text", RECORDS, ids=[f"{t[0]}-{i}" for i, t in enumerate(RECORDS)]
)
def test_a_record_is_dated_and_its_command_still_runs(page, header, section, text):
    """The date may open the section; the command is shown between the table and the one
    before it."""
    assert DATE.search(section), f"{page}: the record {header[:50]!r} says not when"
    shown = [c for c in commands(text) if " [--" not in c]  # a synopsis is no command
    assert shown, f"{page}: the record {header[:50]!r} shows no command"
    for command in shown:
        check_command(command)


def test_the_sliced_table_is_there():
    for (page, heading), _ in SLICED.items():
        assert heading in (ROOT / page).read_text(encoding="utf-8")


def test_the_reading_of_tables_and_commands():
    assert numeric("0.953") and numeric("2/2/1") and numeric("1.06 (1.13)")
    assert numeric("96.48 ± 0.59") and not numeric("ARI 0.80 ± 0.14")
    assert numeric("2.77 s, 2.37 s") and numeric("1,384,586") and numeric("12.93×")
    assert numeric("0.19–0.31") and numeric("round 1,634") and numeric("−0.004")
    assert numeric("4.2e-5") and not numeric("–/–/–")
    assert not numeric("LeNet-5") and not numeric("`lenet5`") and not numeric("–")
    text = (
        "Measured 2026-11-24:\n\n    distfl bench --scale \\\n      --json\n\n"
        "then `distfl run --preset digits`.\n"
    )
    assert commands(text) == ["distfl bench --scale --json", "distfl run --preset digits"]
    assert commands("`distfl bench` then `distfl report` of it") == ["distfl bench"]
    check_command("distfl run --preset digits --set run.rounds=3")
    with pytest.raises(Exception, match="unknown key"):
        check_command("distfl run --set run.roundz=3")
    with pytest.raises(AssertionError, match="parser refuses"):
        check_command("distfl bench --no-such-flag")
    with pytest.raises(AssertionError, match="no script"):
        check_command("python benchmarks/nope.py 1000")

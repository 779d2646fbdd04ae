"""``distfl suite --out DIR`` replaces nothing of the user's and writes through no link: a
file at ``--out``, a file of the user's at the table's, the comparison's or a log's path
(without ``--force``), and a symbolic link at any path the suite writes (with ``--force``
too) are refused in one line (exit code 2) before any run starts, and left as they were;
what a suite wrote itself (its table, its logs, a failed run's log) it replaces when it
runs again.

The suite command runs in this process (``helpers.cli``); its runs are processes of their
own (one tiny run, 2 rounds, where a test needs one at all)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cliproc import assert_one_line_error
from timing import limit

from distfl.tools.paper_tables import TABLES

pytestmark = pytest.mark.integration

TINY = """\
[data]
num_clients = 4
samples_per_client = 20
groups = [{count = 2, alpha = 1000.0}, {count = 2, alpha = 1000.0, permute_labels = true}]
[train]
local_steps = 1
[server]
clients_per_round = 2
[run]
rounds = 2
"""
# valid, but fails when it runs: digits has no class 12
CLASS_12 = TINY.replace("permute_labels = true", "classes = [3, 12]")
RUN = "tiny--fedavg--s0"


def suite(helpers, cwd: Path, *args: str, toml: str = "tiny.toml"):
    """``distfl suite tiny.toml --algorithms none --seeds 0 --out out ARGS`` from ``cwd``."""
    return helpers.cli(cwd, "suite", toml, "--algorithms", "none", "--seeds", "0",
                       "--out", "out", *args, timeout=limit(300))  # fmt: skip


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "out").mkdir()
    return tmp_path


def test_a_file_at_out_is_one_line(helpers, work):
    (work / "results").write_text("my results\n")
    proc = helpers.cli(work, "suite", "tiny.toml", "--algorithms", "none", "--seeds", "0",
                       "--out", "results", timeout=limit(60))  # fmt: skip
    assert_one_line_error(proc, "--out results", "a file of 11 bytes", "directory")
    assert proc.stdout == ""
    assert (work / "results").read_text() == "my results\n"


def test_a_directory_under_a_file_is_one_line(helpers, work):
    (work / "results").write_text("my results\n")
    proc = helpers.cli(work, "suite", "tiny.toml", "--algorithms", "none", "--seeds", "0",
                       "--out", "results/suite", timeout=limit(60))  # fmt: skip
    assert_one_line_error(proc, "results/suite")
    assert (work / "results").read_text() == "my results\n"


@pytest.mark.parametrize("name", ["suite.csv", "suite.json", f"{RUN}.log"])
def test_a_file_of_the_users_is_refused_before_any_run(helpers, work, name):
    mine = work / "out" / name
    mine.write_text("my notes\n")
    proc = suite(helpers, work)
    assert_one_line_error(proc, f"out/{name}", "--force")
    assert proc.stdout == ""
    assert sorted(os.listdir(work / "out")) == [name]  # nothing ran, nothing written
    assert mine.read_text() == "my notes\n"


def test_force_replaces_a_file_of_the_users(helpers, work):
    (work / "out" / "suite.csv").write_text("my notes\n")
    proc = suite(helpers, work, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (work / "out" / "suite.csv").read_text().startswith("scenario,algorithm,seed,")


@pytest.mark.parametrize("force", [False, True], ids=["", "force"])
@pytest.mark.parametrize("name", ["suite.csv", "suite.json", f"{RUN}.log", f"{RUN}.h5"])
def test_a_link_is_refused_before_any_run_even_with_force(helpers, work, name, force):
    target = work / "precious.txt"
    target.write_text("keep me\n")
    link = work / "out" / name
    link.symlink_to(target)
    proc = suite(helpers, work, *(["--force"] if force else []))
    assert_one_line_error(proc, f"out/{name}", "symbolic link")
    assert proc.stdout == ""
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "keep me\n"
    assert sorted(os.listdir(work / "out")) == [name]  # nothing ran, nothing written


def test_a_link_at_the_comparison_is_refused_before_any_run(helpers, work):
    target = work / "precious.md"
    target.write_text("keep me\n")
    link = work / "out" / "comparison.md"
    link.symlink_to(target)
    proc = helpers.cli(work, "suite", "--table", "flcl-fig2", "--algorithms", "none",
                       "--seeds", "0", "--out", "out", "--force", timeout=limit(60))  # fmt: skip
    assert_one_line_error(proc, "out/comparison.md", "symbolic link")
    assert link.is_symlink() and target.read_text() == "keep me\n"
    assert sorted(os.listdir(work / "out")) == ["comparison.md"]


def test_the_suites_own_files_are_written_again_and_an_edited_table_is_not(helpers, work):
    """A second suite replaces the table, the comparison and the logs the first wrote;
    a table changed since is the user's: refused without --force."""
    args = ["--table", "flcl-fig2", "--algorithms", "none", "--seeds", "0", "--set",
            "run.rounds=2", "--out", "out"]  # fmt: skip
    first = helpers.cli(work, "suite", *args, timeout=limit(300))
    assert first.returncode == 0, first.stdout + first.stderr
    out = work / "out"
    log = out / "flcl-fig2--fedavg--s0.log"
    assert log.read_text().startswith("distfl suite: the log of flcl-fig2 fedavg seed 0\n")
    title = TABLES["flcl-fig2"].title
    assert (out / "comparison.md").read_text().startswith(title + "\n")
    before = {n: (out / n).read_bytes() for n in ("suite.csv", "suite.json", "comparison.md")}
    again = helpers.cli(work, "suite", *args, timeout=limit(300))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "kept (finished before)" in again.stdout
    assert {n: (out / n).read_bytes() for n in before} == before
    (out / "comparison.md").write_text(before["comparison.md"].decode() + "my remark\n")
    edited = helpers.cli(work, "suite", *args, timeout=limit(300))
    assert_one_line_error(edited, "out/comparison.md", "--force")
    assert (out / "comparison.md").read_text().endswith("my remark\n")
    with (out / "suite.json").open("a") as fh:
        fh.write(" ")
    edited = helpers.cli(work, "suite", *args, timeout=limit(300))
    assert_one_line_error(edited, "out/suite.json", "--force")


def test_a_failed_runs_log_is_the_suites_to_write_again(helpers, work):
    (work / "class12.toml").write_text(CLASS_12)
    first = suite(helpers, work, toml="class12.toml")
    assert first.returncode == 1, first.stdout + first.stderr
    log = work / "out" / "class12--fedavg--s0.log"
    text = log.read_text()
    assert text.startswith("distfl suite: the log of class12 fedavg seed 0\n") and "12" in text
    assert "FAILED (distfl: error: " in first.stdout  # the run's own last line, not the head
    again = suite(helpers, work, toml="class12.toml")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "FAILED (distfl: error: " in again.stdout
    assert log.read_text().startswith("distfl suite: the log of ")

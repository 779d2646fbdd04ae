"""What README.md and docs/testing.md say of the suite's size and length is the record of
the last run of the whole suite on a fresh clone (docs/records/test-run.json, written by
scripts/fresh_clone_test.py with the sentence between the pages' ``<!-- test-run -->``
markers), and that record still describes the suite: its number of tests is within
:data:`DRIFT` of what pytest collects now, so that adding many tests without running the
script again fails here."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

from timing import limit

ROOT = Path(__file__).resolve().parents[2]
#: how far the record's count of tests may be from the count collected now
DRIFT = 0.05
COUNTS = ("passed", "failed", "errors", "skipped")


def _script():
    spec = importlib.util.spec_from_file_location(
        "fresh_clone_test", ROOT / "scripts" / "fresh_clone_test.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
RECORD = json.loads((ROOT / SCRIPT.RECORD).read_text(encoding="utf-8"))


def test_the_record_says_what_ran_where_and_adds_up():
    r = RECORD
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", r["date"]), r["date"]
    assert re.fullmatch(r"[0-9a-f]{7,40}", r["commit"]), r["commit"]
    assert r["tests"] > 0 and r["machine"] and 0 <= r["load"]["min"] <= r["load"]["max"]
    if r["provisional"]:  # figures from elsewhere: at least one length, and why
        assert r["note"] and (r["pytest_s"] or r["wall_s"]), r
        return
    assert len(r["commit"]) == 40
    assert sum(r[k] for k in COUNTS) == r["tests"], r
    assert 0 < r["pytest_s"] <= r["wall_s"] and isinstance(r["started_ignoring"], list), r
    assert r["exit_code"] == (0 if r["failed"] == r["errors"] == 0 else 1), r


def _marked(page: str) -> tuple[str, str]:
    """(the text between the page's markers, the page without it)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start, end = (re.escape(m) for m in SCRIPT.MARKERS)
    found = re.findall(f"{start}(.*?){end}", text, flags=re.S)
    assert len(found) == 1, f"{page}: {len(found)} pairs of markers, not one"
    return found[0], re.sub(f"{start}.*?{end}", "", text, flags=re.S)


def test_readme_and_the_testing_page_state_the_record():
    """Between the markers, the sentence the script makes of the record; elsewhere on the
    pages, no count of thousands of tests (a number left from an older run)."""
    for page in map(str, SCRIPT.PAGES):
        said, rest = _marked(page)
        assert " ".join(said.split()) == SCRIPT.summary(RECORD), (
            f"{page} says {said!r}; the record ({SCRIPT.RECORD}) says "
            f"{SCRIPT.summary(RECORD)!r}: python3 scripts/fresh_clone_test.py writes both"
        )
        stale = re.findall(r"\b\d,?\d{3} (?:tests|passed)\b", " ".join(rest.split()))
        assert not stale, f"{page}: counts of tests outside the record's sentence: {stale}"


def test_the_summary_of_a_measured_record():
    record = {"date": "2026-12-01", "commit": "0123456789" * 4, "tests": 2800,
              "passed": 2790, "failed": 0, "errors": 0, "skipped": 10, "pytest_s": 1830.4,
              "wall_s": 2100.0, "load": {"min": 1.98, "max": 6.04},
              "machine": "2 CPUs (X), 8 GiB"}  # fmt: skip
    assert SCRIPT.summary(record) == (
        "a fresh clone's `.ci/run` ran 2,800 tests (2,790 passed, 10 skipped) in 31 minutes"
        " of pytest (35 with the `.venv` set up), at a load average of 2.0–6.0 on 2 CPUs (X),"
        " 8 GiB (2026-12-01, commit 0123456)"
    )
    page = "before <!-- test-run -->old<!-- /test-run --> after"
    assert SCRIPT.replace_marked(page, "new") == (
        "before <!-- test-run -->new<!-- /test-run --> after"
    )


def test_the_records_count_is_what_pytest_collects_now():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist"],
        cwd=ROOT, capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip
    found = re.search(r"^(\d+) tests? collected", proc.stdout, re.M)
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    now = int(found.group(1))
    assert abs(RECORD["tests"] - now) <= DRIFT * now, (
        f"the record ({SCRIPT.RECORD}) counts {RECORD['tests']} tests, pytest collects {now}: "
        "run python3 scripts/fresh_clone_test.py and commit what it writes"
    )


def test_the_script_on_a_repository_of_two_tests(tmp_path):
    """``scripts/fresh_clone_test.py --repo R`` on a repository whose ``.ci/run`` is pytest
    on one test that passes and one that skips: the record's counts and commit, and the
    sentence written between the markers of both pages."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / ".ci" / "run").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m pytest -q -p no:cacheprovider "$@" two.py\n'
    )
    (repo / ".ci" / "run").chmod(0o755)
    (repo / "two.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    pytest.skip('b')\n"
    )
    for page in SCRIPT.PAGES:
        (repo / page).write_text(f"Tests: {SCRIPT.MARKERS[0]}old{SCRIPT.MARKERS[1]}.\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "two tests"]):
        subprocess.run([*git, *argv], check=True, capture_output=True, timeout=limit(30))
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=limit(30)).stdout.strip()  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fresh_clone_test.py"), "--repo", str(repo)],
        capture_output=True, text=True, timeout=limit(120),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((repo / SCRIPT.RECORD).read_text())
    got = (record["commit"], record["tests"], record["passed"], record["skipped"])
    assert got == (head, 2, 1, 1)
    assert record["exit_code"] == record["failed"] == record["errors"] == 0
    assert 0 <= record["pytest_s"] <= record["wall_s"] and not record["provisional"]
    for page in SCRIPT.PAGES:
        said = (repo / page).read_text()
        assert said == f"Tests: {SCRIPT.MARKERS[0]}{SCRIPT.summary(record)}{SCRIPT.MARKERS[1]}.\n"

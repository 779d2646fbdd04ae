"""``distfl suite --table``: EMD-CFL's Table 1 (its quick form, two rounds) runs every one
of its methods — the 16 of the paper's table (FedProx a variant of one global model) and
distfl's own beside them — in one command with the papers' protocol, at one process and
under torchrun with three ranks a run, to the same bits (``distfl compare``), and its
comparison (``OUT/comparison.md``) shows the suite's own values (one seed: ``n = 1``)
beside the paper's.

Each suite runs with a relative ``--out out`` from a directory of its own, so that the run
files of the two hold the same ``run.out`` and compare config and all."""

from __future__ import annotations

import csv

import pytest
from timing import limit

from distfl.tools.paper_tables import TABLES

pytestmark = pytest.mark.integration

TABLE = TABLES["emdcfl-table1-quick"]
#: two rounds, the second evaluated: PACFL's one-shot clustering is round 1's
SHORT = ["--set", "run.rounds=2", "--set", "eval.every=2"]


def suite(helpers, cwd, *extra: str):
    """``distfl suite`` of the whole table in ``cwd``, in this process (its jobs are
    processes of their own, torchrun's with ``--nproc 3``)."""
    return helpers.cli(cwd, "suite", "--table", TABLE.name, "--seeds", "0", "--out", "out",
                       *SHORT, *extra, timeout=limit(1800))  # fmt: skip


def test_table_one_at_one_process_and_under_torchrun(helpers, tmp_path):
    one, three = tmp_path / "one", tmp_path / "three"
    one.mkdir()
    three.mkdir()
    first = suite(helpers, one)
    assert first.returncode == 0, first.stdout + first.stderr
    second = suite(helpers, three, "--nproc", "3")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "each on 3 ranks (torchrun)" in second.stdout
    # the papers' protocol: the methods that take a number of clusters were given 4
    for method in ("pacfl", "ifca", "fedem", "fedsoft"):
        assert f"{method} (num_clusters)" in first.stdout, first.stdout
    # every row of the paper's table is one of distfl's methods
    assert "not methods of distfl" not in first.stdout
    files = sorted(p.name for p in (one / "out").glob("*.h5"))
    assert len(files) == len(TABLE.algorithms), files
    assert set(TABLE.rows) <= {name.split("--")[1] for name in files}
    for name in files:
        same = helpers.cli(tmp_path, "compare", str(one / "out" / name),
                           str(three / "out" / name), "--ignore", "timing")  # fmt: skip
        assert same.returncode == 0, f"{name}\n{same.stdout}{same.stderr}"
    # the comparison: ours (one seed: no deviation, n = 1) beside the paper's, from the
    # suite's rows
    with open(one / "out" / "suite.csv", newline="") as f:
        rows = {row["algorithm"]: row for row in csv.DictReader(f)}
    text = (one / "out" / "comparison.md").read_text()
    assert text in first.stdout
    paper = TABLE.rows
    for method in ("pacfl", "ifca", "fedprox", "fedsoft", "fedsac"):
        row = rows[method]
        acc, worst = 100 * float(row["accuracy"]), 100 * float(row["accuracy_worst"])
        avg_paper = "{:.2f} ± {:.2f}".format(*paper[method].values["accuracy"])
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {method} |"))
        assert f"| {acc:.2f} (n = 1) | {avg_paper} | {worst:.2f} (n = 1) |" in line, line
    # PACFL's one-shot clustering into the 4 rotations it was given finds them
    assert float(rows["pacfl"]["ari"]) == 1.0

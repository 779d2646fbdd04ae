"""``inspect``, ``status``, ``gather``, ``report`` and ``distfl.open`` read a run file through
one model (:class:`distfl.runfile.run.Run`), so they agree on every number they derive from it:
the clusters found, the final accuracy, WAS, WADB, Rand, ARI, the first split, the rounds.

Two files where the old readers disagreed: an IFCA run with 30 clusters for 40 clients
(13 leaves end empty: ``gather`` counted 17 clusters, ``inspect`` 30) that evaluates 10
clients (the accuracy of the last evaluation is not the mean of every client's last known
accuracy), and a stored FedGWC file with a split.
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest

import distfl
from distfl.report import write_run_report
from distfl.tools.gather import gather, run_status
from distfl.tools.inspection import inspect_run

pytestmark = pytest.mark.integration

STORED = Path(__file__).resolve().parents[1] / "data" / "runfiles-v0.1.0" / "fedgwc.h5"


@pytest.fixture(scope="module")
def ifca_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agree") / "ifca.h5"
    overrides = {
        "algorithm.name": "ifca",
        "algorithm.num_clusters": 30,
        "run.rounds": 6,
        "run.progress": "none",
        "eval.clients": 10,
        "eval.every": 3,
    }
    distfl.run(overrides=overrides, out=out, stream=io.StringIO())
    return out


def shown(x, digits: int) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def inspected(path: Path) -> dict:
    text = io.StringIO()
    inspect_run(path, text)
    out = text.getvalue()
    m = re.search(
        r"^final\s+(\d+) cluster\(s\)(?: \((\d+) leaves, (\d+) of them empty\))?; "
        r"federation balanced accuracy (\S+)$",
        out,
        re.M,
    )
    assert m, out
    splits = [int(r) for r in re.findall(r"split at round (\d+)", out)]
    truth = re.search(r"Rand index (\S+), ARI (\S+) against the (\d+) recorded groups", out)
    return {
        "round": int(re.search(r"round (\d+) of \d+", out)[1]),
        "clusters": int(m[1]),
        "leaves": int(m[2]) if m[2] else int(m[1]),
        "accuracy": m[4],
        "was": re.search(r"^WAS\s+(\S+)", out, re.M)[1],
        "wadb": re.search(r"^WADB\s+(\S+)", out, re.M)[1],
        "rand": truth[1],
        "ari": truth[2],
        "groups": int(truth[3]),
        "first_split": min(splits, default=None),
        "leaf_lines": len(re.findall(r"  leaf, accuracy ", out)),
    }


def gathered(path: Path, tmp_path: Path) -> dict:
    table = tmp_path / "gather.csv"
    assert gather([path], io.StringIO(), csv_path=table) == 0
    (row,) = list(csv.DictReader(table.open(encoding="utf-8")))
    return row


def reported(path: Path, tmp_path: Path) -> dict:
    index = write_run_report(path, tmp_path / "report")
    page = index.read_text(encoding="utf-8")
    table = page[page.index("<h2>Summary</h2>") :]
    table = table[: table.index("</table>")]
    heads = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", table)]
    return dict(zip(heads, cells, strict=True))


def exact(text: str):
    """A gather CSV cell as a number (empty: None)."""
    return None if text == "" else float(text)


@pytest.mark.parametrize("which", ["ifca", "stored-fedgwc"])
@pytest.mark.filterwarnings("ignore::distfl.errors.UnverifiedRunFile")  # the 0.1.0 file
def test_every_reader_derives_the_same_numbers(which, ifca_file, tmp_path):
    path = ifca_file if which == "ifca" else STORED
    run = distfl.open(path)
    s = run.summary()
    if which == "ifca":  # the file is what this test is about
        assert s["leaves"] == 30 and 0 < s["clusters"] < 30
        stale = np.nanmean(run.stored.clients["accuracy"])
        assert s["accuracy"] != stale, "the last evaluation's accuracy, not every client's"
    else:
        assert s["first_split"] is not None
    # distfl.open: the summary is the Run's own attributes
    assert s["clusters"] == run.num_clusters == len(set(run.assignment) - {""})
    assert s["leaves"] == len(run.leaves) == len(run.tree.leaves)
    assert s["accuracy"] == run.accuracy == float(np.asarray(run.metrics["accuracy"])[-1])
    assert s["first_split"] == run.first_split
    assert f"{s['clusters']} clusters" in repr(run)

    ins = inspected(path)
    assert ins["round"] == s["round"]
    assert (ins["clusters"], ins["leaves"], ins["leaf_lines"]) == (
        s["clusters"],
        s["leaves"],
        s["leaves"],
    )
    for key in ("accuracy", "was", "wadb", "rand", "ari"):
        assert ins[key] == shown(s[key], 3), key
    assert ins["groups"] == s["groups"] and ins["first_split"] == s["first_split"]

    row = gathered(path, tmp_path)
    assert int(row["clusters"]) == s["clusters"]
    assert (int(row["rounds_done"]), int(row["rounds"])) == (s["round"], s["rounds"])
    for key in ("accuracy", "was", "wadb", "rand", "ari", "first_split", "wall_s"):
        assert exact(row[key]) == s[key], key

    page = reported(path, tmp_path)
    assert int(page["clusters"]) == s["clusters"] and int(page["rounds_done"]) == s["round"]
    for key in ("accuracy", "was", "wadb", "rand", "ari", "wall_s"):
        assert page[key] == ("-" if s[key] is None else shown(s[key], 4)), key
    assert page["first_split"] == ("-" if s["first_split"] is None else str(s["first_split"]))

    status = io.StringIO()
    assert run_status(path, status) == (0 if s["finished"] else 1)
    assert f"round {s['round']} of {s['rounds']}" in status.getvalue()

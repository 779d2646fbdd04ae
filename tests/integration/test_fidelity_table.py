"""The fidelity table on digits (docs/fidelity.md) comes from the ``distfl suite`` command
printed above it: the table sums up the command's rows, kept in
docs/records/fidelity-digits.csv (tests/unit/test_docs_summaries.py), and here the command,
as written there, runs on a slice (its first scenario, seed 0, its algorithms and the
FedGWC variant; the IFCA and FeSEM variants, those algorithms with another ``init``, are
left out: the plan of a variant is tests/unit/test_suite_plan.py's), whose every run has
its row among the kept ones.

Where this machine's float kernels are those of the machine that measured the table
(tests/runfile.py), the clusters, Rand index and ARI of seed 0 are compared to the kept
row's; elsewhere a run may take another last bit and, near a threshold, another split,
so the comparison is of what does not hang on one: every row is there, the oracle recovers
the groups exactly and the one-cluster baseline finds one cluster.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from runfile import kernel_fingerprint
from timing import limit

from distfl.cli import _parser

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: the heading of the docs section whose command and table this test checks
PAGE = ROOT / "docs" / "fidelity.md"
HEADING = "### Fidelity on digits"
#: the float kernels of the machine that measured the table (kernel_fingerprint)
#: the variants the slice leaves out (another ``init`` of an algorithm the slice runs)
LEFT_OUT = ("ifca_random", "fesem_random")
MEASURED_ON = "959f544dd2550279c7f8d933003040892c262539440b78ffe22320866f5403ac"
#: the command's rows, as its suite wrote them
KEPT = ROOT / "docs" / "records" / "fidelity-digits.csv"


def docs_command() -> list[str]:
    """The command of the docs section (argv after ``distfl``)."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(HEADING)
    end = text.find("\n#", start + len(HEADING))
    section = text[start : end if end >= 0 else len(text)]
    block = section.index("```\n") + 4
    command = section[block : section.index("```", block)].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[:2] == ["distfl", "suite"], argv[:2]
    return argv[1:]


def kept_rows() -> dict[tuple[str, str, int], dict[str, str]]:
    """The command's rows as its suite wrote them, by (scenario, algorithm, seed)."""
    with KEPT.open(newline="", encoding="utf-8") as f:
        return {(r["scenario"], r["algorithm"], int(r["seed"])): r for r in csv.DictReader(f)}


def test_the_docs_table_is_what_its_command_computes(tmp_path):
    argv = docs_command()
    args = _parser().parse_args(argv)  # distfl's own reading of the command
    scenarios = args.scenarios
    assert len(scenarios) >= 2 and args.seeds == "0-9"
    algorithms = args.algorithms.split(",")
    kept = kept_rows()

    keep = scenarios[:1]
    sliced = [a for a in argv if a not in scenarios[1:]]
    algorithms = [a for a in algorithms if a not in LEFT_OUT]
    sliced[sliced.index("--algorithms") + 1] = ",".join(algorithms)
    for name in LEFT_OUT:  # and their --variant NAME=...
        at = next(i for i, a in enumerate(sliced) if a.startswith(f"{name}="))
        del sliced[at - 1 : at + 1]
    sliced[sliced.index("--seeds") + 1] = "0"
    sliced[sliced.index("--out") + 1] = str(tmp_path / "slice")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", *sliced],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=limit(600),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "slice" / "suite.json").read_text())["rows"]
    assert len(rows) == len(keep) * len(algorithms)
    assert all(r["seed"] == 0 and r["scenario"] in keep for r in rows)
    for r in rows:
        assert (r["scenario"], r["algorithm"], 0) in kept, r
        if r["algorithm"] == "oracle":
            assert r["clusters"] == r["groups"] and r["ari"] == pytest.approx(1.0)
        if r["algorithm"] == "fedavg":
            assert r["clusters"] == 1 and r["ari"] == 0.0
    if kernel_fingerprint() != MEASURED_ON:
        return  # another CPU's kernels: the digits printed need not be this machine's
    for r in rows:
        mine = kept[(r["scenario"], r["algorithm"], 0)]
        got = (r["clusters"], r["rand"], r["ari"])
        want = (int(mine["clusters"]), float(mine["rand"]), float(mine["ari"]))
        assert got == want, (r["scenario"], r["algorithm"])


def test_the_fingerprint_reads():
    assert re.fullmatch(r"[0-9a-f]{64}", MEASURED_ON)

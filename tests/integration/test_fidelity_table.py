"""The fidelity table on digits (docs/fidelity.md) comes from the ``distfl suite`` command
printed above it: the command, as written there, runs on a slice (its first scenario,
seed 0, its algorithms and the FedGWC variant; the IFCA and FeSEM variants, those
algorithms with another ``init``, are left out: the plan of a variant is
tests/unit/test_suite_plan.py's), and every row of the slice is the table's; every job of
the whole command has its row in the table.

Where this machine's float kernels are those of the machine that measured the table
(tests/runfile.py), the clusters, Rand index and ARI of seed 0 are compared to the digits
printed; elsewhere a run may take another last bit and, near a threshold, another split,
so the comparison is of what does not hang on one: every row is there, the oracle recovers
the groups exactly and the one-cluster baseline finds one cluster.
"""

from __future__ import annotations

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
MEASURED_ON = "d49721036564a483487776dc7d83ee38b184caa17bb5c0137993d6aacf2035c5"


def docs_section() -> tuple[list[str], list[dict[str, str]]]:
    """The command (argv after ``distfl``) and the table rows of the docs section."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(HEADING)
    end = text.find("\n#", start + len(HEADING))
    section = text[start : end if end >= 0 else len(text)]
    block = section.index("```\n") + 4
    command = section[block : section.index("```", block)].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[:2] == ["distfl", "suite"], argv[:2]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for ln in lines[2:]:
        cells = [c.strip().strip("`") for c in ln.strip("|").split("|")]
        rows.append(dict(zip(header, cells, strict=True)))
    return argv[1:], rows


def seed0(cell: str) -> str:
    """The first of a cell's per-seed values ``s0/s1/s2``."""
    return cell.split("/")[0].replace("−", "-")


def test_the_docs_table_is_what_its_command_computes(tmp_path):
    argv, table = docs_section()
    args = _parser().parse_args(argv)  # distfl's own reading of the command
    scenarios = args.scenarios
    assert len(scenarios) >= 2 and args.seeds == "0,1,2"
    algorithms = args.algorithms.split(",")
    shown = {(r["scenario"], r["algorithm"]) for r in table}
    named = {"none": "fedavg"}
    for s in scenarios:  # the table has a row for every job of the command
        assert {(s, named.get(a, a)) for a in algorithms} <= shown, s

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
    printed = {(r["scenario"], r["algorithm"]): r for r in table}
    for r in rows:
        if r["algorithm"] == "oracle":
            assert r["clusters"] == r["groups"] and r["ari"] == pytest.approx(1.0)
        if r["algorithm"] == "fedavg":
            assert r["clusters"] == 1 and r["ari"] == 0.0
    if kernel_fingerprint() != MEASURED_ON:
        return  # another CPU's kernels: the digits printed need not be this machine's
    for r in rows:
        mine = printed[(r["scenario"], r["algorithm"])]
        got = (str(r["clusters"]), f"{r['rand']:.3f}", f"{r['ari']:.3f}")
        want = (seed0(mine["clusters"]), seed0(mine["Rand"]), seed0(mine["ARI"]))
        assert got == want, (r["scenario"], r["algorithm"])


def test_the_table_cells_and_the_fingerprint_read():
    assert seed0("4/4/3") == "4" and seed0("−0.004/1") == "-0.004"
    assert re.fullmatch(r"[0-9a-f]{64}", MEASURED_ON)

"""Consecutive clean torchrun launches end cleanly: every one exits 0, writes its run file
and shows no abort ("terminate called ...", SIGABRT, torchrun's "exitcode: -6") and no
traceback in any process's output.

A short run of scripts/teardown_loop.py (real torchrun, 3 ranks, gloo); the same script
runs the 100-launch loop by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "teardown_loop.py")
RUNS = 4


def _loop_module():
    spec = importlib.util.spec_from_file_location("teardown_loop", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_consecutive_torchrun_launches_end_cleanly(helpers):
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--runs", str(RUNS), "--timeout", "90", "--json"],
        env=helpers.clean_env(), capture_output=True, text=True, timeout=RUNS * 90 + 30,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout.strip(), f"no summary:\n{proc.stderr}"
    summary = json.loads(proc.stdout)
    details = "\n\n".join(
        f"run {r['run']}: {r['outcome']}, exit {r['returncode']}\n{r['output'][-3000:]}"
        for r in summary["not_ok"]
    )
    assert summary["counts"]["ok"] == RUNS, f"{summary['counts']}\n{details}"
    assert summary["exit0"] == RUNS
    assert proc.returncode == 0, proc.stderr


def test_the_loop_counts_a_rank_that_aborts(helpers):
    """The loop's verdict on torchrun's own report of a rank that died of SIGABRT."""
    code = "import os; os.abort() if os.environ['RANK'] == '1' else None"
    proc = subprocess.run(
        [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "2",
         "--no-python", sys.executable, "-c", code],
        env=helpers.clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert _loop_module().classify(proc.returncode, output, True) == "abort", output

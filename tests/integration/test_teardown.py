"""Consecutive clean torchrun launches end cleanly: every one exits 0, writes its run file
and shows no abort ("terminate called ...", SIGABRT, torchrun's "exitcode: -6") and no
traceback in any process's output; a launch stopped by a signal ends as cleanly.

A short run of scripts/teardown_loop.py (two consecutive launches of real torchrun, 3 ranks,
gloo); the same script runs the 100-launch loop by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys

import h5py
import pytest
from timing import limit

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "teardown_loop.py")
RUNS = 2  # consecutive launches: the second starts after the first has torn down


def _loop_module():
    spec = importlib.util.spec_from_file_location("teardown_loop", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_consecutive_torchrun_launches_end_cleanly(helpers):
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--runs", str(RUNS), "--timeout", str(round(limit(90))),
         "--json"],
        env=helpers.clean_env(), capture_output=True, text=True,
        timeout=RUNS * round(limit(90)) + limit(30),
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
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(120),
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert _loop_module().classify(proc.returncode, output, True) == "abort", output


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_stop_under_launch_torchrun_ends_torchrun_cleanly(helpers, tmp_path, sig, code):
    """``launch/torchrun.sh`` signalled (a terminal's Ctrl-C reaches its whole process
    group): the ranks write the last completed round and exit 0, torchrun exits 0 with no
    traceback of its own, and the script's code is 0 (130 after a Ctrl-C)."""
    env = helpers.clean_env(NPROC="2", OUT="stopped.h5", PATH=os.path.dirname(sys.executable)
                            + os.pathsep + os.environ["PATH"])  # fmt: skip
    proc = subprocess.Popen(
        ["bash", os.path.join(ROOT, "launch", "torchrun.sh"), "--set", "run.rounds=100000",
         "--set", "eval.every=1", "--set", 'run.progress="lines"'],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = helpers.LineReader(proc.stdout), helpers.LineReader(proc.stderr)
        assert out.wait_for(lambda line: line.startswith("round "), limit(120)), err.text(0)
        os.killpg(proc.pid, sig)  # the script's group: not torchrun, in a session of its own
        try:
            status = proc.wait(timeout=limit(60))
        except subprocess.TimeoutExpired:  # say what was still running, and what it said
            ps = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,etime,args"],
                                capture_output=True, text=True).stdout  # fmt: skip
            left = [ln for ln in ps.splitlines() if "distfl" in ln or "torchrun" in ln]
            said = f"--- stdout\n{out.text(0)[-3000:]}\n--- stderr\n{err.text(0)}"
            pytest.fail(f"still running 60 s after {sig!r}:\n" + "\n".join([*left, said]))
        assert status == code, err.text()
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    name = signal.Signals(sig).name
    assert f"distfl: stopped by {name} after round " in out.text()
    for word in ("Traceback", "SignalException", "ChildFailedError"):
        assert word not in err.text(), err.text()
    with h5py.File(tmp_path / "stopped.h5", "r") as f:
        assert int(f["state"].attrs["round"]) >= 1

"""A round that raises keeps the run: the file holds the last completed round, the line
says where it failed and where the traceback is, and the resumed run ends bit for bit where
the run that never failed ends.

The algorithm is FedGWC wrapped by a plug-in that raises after its update has changed its
state (P, the Gaussian weights, the sampling generator) in the round named by
``FLAKY_ROUND``, so the file must hold the state from before that round, not a mix.

The runs that fail, are interrupted or are killed are processes of their own (their exit
code, their one line on stderr and their signals are what the tests are about); the run that
never fails and the resumes, whose files are only compared bit for bit, run in the test's
process (``helpers.run_alone`` and ``helpers.cli``), the plug-in imported there once for
the module and forgotten after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from runfile import assert_same_run, fedgwc_toml
from timing import limit

pytestmark = pytest.mark.integration

ROUNDS = 40  # FedGWC splits at rounds 19 and 29 in this scenario

PLUGIN = '''
import inspect
import os
import signal

from distfl.algorithms import register
from distfl.algorithms.fedgwc import FedGWC
from distfl.runtime.server import Server
from distfl.runtime.run_state import RunState


def _second_ctrl_c(cls, name, after):
    """A SIGINT to this process as ``cls.name`` ends (``after``) or begins: the second
    Ctrl-C of a user, arriving at that moment of the stop the first one began."""
    original = getattr(cls, name)

    def wrapped(*args, **kwargs):
        if not after:
            os.kill(os.getpid(), signal.SIGINT)
        out = original(*args, **kwargs)
        if after:
            os.kill(os.getpid(), signal.SIGINT)
        return out

    static = isinstance(inspect.getattr_static(cls, name), staticmethod)
    setattr(cls, name, staticmethod(wrapped) if static else wrapped)


if os.environ.get("SECOND_CTRL_C") == "restore":  # the abandoned round's state put back
    _second_ctrl_c(RunState, "put_back", after=True)
elif os.environ.get("SECOND_CTRL_C") == "stop_workers":  # the rounds' loop has ended
    _second_ctrl_c(Server, "stop_workers", after=False)


@register
class FlakyFedGWC(FedGWC):
    """FedGWC that raises at the end of the update of round FLAKY_ROUND."""

    name = "flaky_fedgwc"
    Params = FedGWC.Params

    def update(self, round_index, plan, reports):
        out = super().update(round_index, plan, reports)
        if os.environ.get("FLAKY_ROUND") == str(round_index):
            if os.environ.get("FLAKY_RAISE") == "KeyboardInterrupt":
                raise KeyboardInterrupt
            if os.environ.get("FLAKY_RAISE") == "SIGINT":  # a first Ctrl-C
                os.kill(os.getpid(), signal.SIGINT)
            raise RuntimeError(f"injected failure in round {round_index}")
        return out
'''


def _run(
    tmp, *args, fail_round: int | None = None, raise_: str = "RuntimeError", second: str = ""
) -> subprocess.CompletedProcess:
    names = ("FLAKY_ROUND", "FLAKY_RAISE", "SECOND_CTRL_C")
    env = {k: v for k, v in os.environ.items() if k not in names}
    if fail_round is not None:
        env["FLAKY_ROUND"] = str(fail_round)
        env["FLAKY_RAISE"] = raise_
    if second:
        env["SECOND_CTRL_C"] = second
    return subprocess.run(
        [sys.executable, "-m", "distfl", "run", *args], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=limit(600),
    )  # fmt: skip


def _resume(helpers, tmp, out) -> None:
    """``distfl run --resume OUT --trust-plugins`` in this process; it must exit 0."""
    proc = helpers.cli(tmp, "run", "--resume", str(out), "--trust-plugins")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def setup(tmp_path_factory, helpers):
    """The folder with the plug-in and its config, and the run that never fails (in this
    process, whose environment has no ``FLAKY_ROUND``: the plug-in is plain FedGWC here)."""
    tmp = tmp_path_factory.mktemp("failure")
    (tmp / "flaky.py").write_text(PLUGIN)
    config = fedgwc_toml(ROUNDS, progress="none").replace(
        'name = "fedgwc"', 'name = "flaky_fedgwc"'
    )
    config = config.replace("[run]\n", '[run]\nplugins = ["flaky.py"]\n', 1)
    (tmp / "flaky.toml").write_text(config)
    full = tmp / "full.h5"
    with helpers.plugins_forgotten():
        helpers.run_alone(tmp, "--config", "flaky.toml", "--out", str(full))
        yield tmp, full


@pytest.mark.parametrize("fail_round", [25, 1])
def test_a_round_that_raises_keeps_the_last_round_and_resumes_exactly(setup, helpers, fail_round):
    tmp, full = setup
    out = tmp / f"failed-{fail_round}.h5"
    proc = _run(tmp, "--config", "flaky.toml", "--out", str(out), fail_round=fail_round)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line, line
    trace = tmp / f"failed-{fail_round}.h5.traceback.txt"
    assert line == (
        f"distfl: error: round {fail_round} failed in flaky_fedgwc's update (RuntimeError: "
        f"injected failure in round {fail_round}); {out} holds round {fail_round - 1}: "
        f"continue with distfl run --resume {out}; the traceback is in {trace}"
    )
    if fail_round == 25:  # the line docs/checkpoints.md shows, for --out run.h5
        page = (Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md").read_text()
        shown = line.replace(str(trace), "run.h5.traceback.txt").replace(str(out), "run.h5")
        assert f"```\n{shown}\n```" in page, shown
    text = trace.read_text()
    assert "Traceback (most recent call last)" in text and "injected failure" in text
    with h5py.File(out, "r") as f:
        assert f["state"].attrs["round"] == str(fail_round - 1)
        assert len(f["metrics/round"]) == fail_round - 1
    _resume(helpers, tmp, out)
    assert_same_run(full, out)


def test_a_keyboard_interrupt_in_a_plug_in_keeps_every_completed_round(setup, helpers):
    """A KeyboardInterrupt raised by the algorithm's own code (as a second Ctrl-C raises
    it) in round 6, long before any periodic checkpoint: the file holds round 5 and
    resumes to the bits of the run that was never interrupted."""
    tmp, full = setup
    out = tmp / "interrupted.h5"
    proc = _run(tmp, "--config", "flaky.toml", "--out", str(out), fail_round=6,
                raise_="KeyboardInterrupt")  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == (
        f"distfl: interrupted in round 6 (flaky_fedgwc's update); {out} holds round 5: "
        f"continue with distfl run --resume {out}"
    )
    with h5py.File(out, "r") as f:
        assert f["state"].attrs["round"] == "5"
    _resume(helpers, tmp, out)
    assert_same_run(full, out)


@pytest.mark.parametrize("second", ["restore", "stop_workers"])
def test_a_second_ctrl_c_while_the_first_stops_the_run_keeps_every_completed_round(
    setup, helpers, second
):
    """A Ctrl-C in round 6 (long before any periodic checkpoint) gives the round up; a
    second one arrives before the file is written: while the round's state is put back, or
    as the rounds' loop has ended. The run exits 130 in one line, the file holds round 5
    and resumes to the bits of the run that was never interrupted."""
    tmp, full = setup
    out = tmp / f"twice-{second}.h5"
    proc = _run(tmp, "--config", "flaky.toml", "--out", str(out), fail_round=6,
                raise_="SIGINT", second=second)  # fmt: skip
    assert proc.returncode == 130, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("distfl: interrupted in round 6 ("), line
    assert line.endswith(f"{out} holds round 5: continue with distfl run --resume {out}"), line
    with h5py.File(out, "r") as f:
        assert f["state"].attrs["round"] == "5"
    _resume(helpers, tmp, out)
    assert_same_run(full, out)


def test_the_periodic_checkpoint_is_what_a_kill_leaves(setup, helpers):
    """``checkpoint.seconds``: a file appears during the run; SIGKILL (no signal handler
    runs) leaves it, and it resumes to the uninterrupted run's bits."""
    tmp, full = setup
    out = tmp / "killed.h5"
    env = {k: v for k, v in os.environ.items() if k != "FLAKY_ROUND"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "distfl", "run", "--config", "flaky.toml", "--out", str(out),
         "--set", "checkpoint.seconds=0.05"],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + limit(300)
        while not out.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=limit(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    with h5py.File(out, "r") as f:
        written = int(f["state"].attrs["round"])
    assert 1 <= written < ROUNDS
    _resume(helpers, tmp, out)
    assert_same_run(full, out)

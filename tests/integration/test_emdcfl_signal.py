"""A stop signal during EMD-CFL's one-shot round (round 1: every client trains and computes
its row of W1 distances, minutes with a CNN) is acted on between rows, and between the
local steps of a row's training: the workers leave
the rows not yet computed, the run stops after round 0 within seconds with its checkpoint
written, and resuming it gives the bits of the run that was never interrupted, alone and
in a world of three ranks. A signal that reaches a worker only stops the run too."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import h5py
import pytest
from runfile import assert_same_run
from timing import limit

pytestmark = pytest.mark.integration

#: round 1 takes about 12 s alone on the 2-core machine (40 clients × 300 local steps and a
#: row of 40 W1 each): the signal, 2 s after the lock, comes in the middle of it
ARGS = [
    "--preset", "rotated", "--set", 'algorithm.name="emdcfl"', "--set", "algorithm.steps=300",
    "--set", "run.rounds=2", "--set", 'run.progress="lines"',
]  # fmt: skip
#: how soon after the signal every process must have exited, on an idle core (scaled by
#: limit() as it is checked)
PROMPT_S = 30


@pytest.fixture(scope="module")
def reference(tmp_path_factory, helpers) -> Path:
    tmp = tmp_path_factory.mktemp("emdcfl-signal")
    helpers.run_alone(tmp, *ARGS, "--out", "ref.h5")  # the code of distfl run, here
    return tmp / "ref.h5"


def start(helpers, tmp_path: Path, out: str, world: int, args=ARGS) -> list[subprocess.Popen]:
    return helpers.start_ranks([*args, "--out", out], tmp_path, world)


def signal_in_round_one(
    helpers, tmp_path: Path, procs, targets, out: str, prompt: bool = True
) -> list[str]:
    """Wait until round 1 is under way (the writer's lock is taken before it), signal the
    ``targets`` and check that every process exits 0 (``prompt``: within PROMPT_S); the
    server's output."""
    try:
        readers = [(helpers.LineReader(p.stdout), helpers.LineReader(p.stderr)) for p in procs]
        deadline = time.monotonic() + limit(60)
        while not (tmp_path / f"{out}.lock").exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, readers[0][1].text(0)
            time.sleep(0.05)
        time.sleep(2.0)  # into the probe: the data are loaded, a few rows are done
        for i in targets:
            procs[i].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        for p, (_, err) in zip(procs, readers, strict=True):
            assert p.wait(timeout=limit(60)) == 0, err.text()
        assert not prompt or time.monotonic() - signalled < limit(PROMPT_S)
        return readers[0][0].text().splitlines()
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))


def assert_round_zero(path: Path) -> None:
    with h5py.File(path, "r") as f:
        assert int(f["state"].attrs["round"]) == 0
        assert len(f["metrics/round"]) == 0


@pytest.mark.parametrize("world", [1, 3])
def test_sigterm_in_the_one_shot_round_stops_promptly_and_resumes_exactly(
    helpers, tmp_path, reference, world
):
    procs = start(helpers, tmp_path, "cut.h5", world)
    lines = signal_in_round_one(helpers, tmp_path, procs, range(world), "cut.h5")
    assert any(line.startswith("distfl: stopped by SIGTERM after round 0/2") for line in lines)
    assert not any(line.startswith("round ") for line in lines)  # no round was completed
    assert_round_zero(tmp_path / "cut.h5")
    # the status and the resume: the commands' code, in this process
    status = helpers.cli(tmp_path, "status", "cut.h5")
    assert status.returncode == 1 and "stopped at round 0 of 2" in status.stdout
    resumed = helpers.cli(tmp_path, "run", "--resume", "cut.h5")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(tmp_path / "cut.h5", reference)


def test_a_signal_at_a_worker_only_stops_the_run(helpers, tmp_path):
    """The server learns of it from the worker's next message, after the worker's row: it
    stops the run after round 0, as promptly as the row allows (no bound on a loaded
    machine, where a row of 40 W1 distances takes seconds)."""
    procs = start(helpers, tmp_path, "cut.h5", 3)
    lines = signal_in_round_one(helpers, tmp_path, procs, [1], "cut.h5", prompt=False)
    assert any(
        line.startswith("distfl: stopped by a stop signal at a worker after round 0/2")
        for line in lines
    ), lines
    assert_round_zero(tmp_path / "cut.h5")


def test_a_signal_inside_one_clients_long_training_stops_promptly(helpers, tmp_path):
    """A million local steps for each client's ω_c (minutes for one row): the signal is
    acted on between two local steps, not after the row."""
    long = [a if a != "algorithm.steps=300" else "algorithm.steps=1000000" for a in ARGS]
    procs = start(helpers, tmp_path, "cut.h5", 1, args=long)
    lines = signal_in_round_one(helpers, tmp_path, procs, [0], "cut.h5")
    assert any(line.startswith("distfl: stopped by SIGTERM after round 0/2") for line in lines)
    assert_round_zero(tmp_path / "cut.h5")

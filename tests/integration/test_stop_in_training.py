"""A stop signal during a round's local training is acted on between two local steps: the
worker leaves the training, the server discards the round and writes the round before, and
the resumed run has the bits of a run that was never stopped. Alone, under torchrun with
every rank signalled, and with one worker rank signalled; and a round of a million local
steps (minutes) is given up within seconds."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from runfile import assert_same_run, stored_round
from timing import limit

pytestmark = pytest.mark.integration

#: FedGWC on digits; a round of 20 clients × 4,000 local steps takes seconds (``auto``: the
#: batched trainer), so a signal sent when round 1's line appears lands in round 2's
#: training
CONFIG = """\
[run]
seed = 1
rounds = 2
progress = "lines"
[train]
local_steps = {steps}
trainer = "{trainer}"
[algorithm]
name = "fedgwc"
"""
#: how soon after the signal every process must have exited, on an idle core (scaled by
#: limit() as it is checked; a signal at one worker alone reaches the server with that
#: worker's next message: no bound but the round's)
PROMPT_S = 10


def run(helpers, cwd: Path, *args: str):
    """``distfl run ARGS`` from ``cwd``, in this process (the command's code)."""
    return helpers.cli(cwd, "run", *args)


def start(
    helpers, cwd: Path, world: int, steps: int, trainer: str = "auto"
) -> list[subprocess.Popen]:
    (cwd / "long.toml").write_text(CONFIG.format(steps=steps, trainer=trainer))
    return helpers.start_ranks(["--config", "long.toml", "--out", "cut.h5"], cwd, world)


def stop_when(helpers, cwd: Path, procs, targets, ready, prompt: bool = True) -> list[str]:
    """Once ``ready(server's output reader)`` holds, SIGTERM the ``targets``; every process
    exits 0 (``prompt``: within PROMPT_S). The server's output lines."""
    try:
        readers = [(helpers.LineReader(p.stdout), helpers.LineReader(p.stderr)) for p in procs]
        assert ready(readers[0][0]), readers[0][1].text(0)
        for i in targets:
            procs[i].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        for p, (_, err) in zip(procs, readers, strict=True):
            assert p.wait(timeout=limit(120)) == 0, err.text()
        took = time.monotonic() - signalled
        assert not prompt or took < limit(PROMPT_S), f"the run took {took:.1f} s to stop"
        return readers[0][0].text().splitlines()
    finally:
        helpers.kill_tree(procs, marker=str(cwd))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, helpers) -> Path:
    tmp = tmp_path_factory.mktemp("stop-in-training")
    (tmp / "long.toml").write_text(CONFIG.format(steps=4000, trainer="auto"))
    proc = run(helpers, tmp, "--config", "long.toml", "--out", "ref.h5")
    assert proc.returncode == 0, proc.stderr
    return tmp / "ref.h5"


@pytest.mark.parametrize(
    ("world", "targets", "said"),
    [(1, [0], "SIGTERM"), (3, [0, 1, 2], "SIGTERM"), (3, [1], "a stop signal at a worker")],
    ids=["alone", "torchrun", "one-worker"],
)
def test_a_signal_in_round_twos_training_keeps_round_one_and_resumes_exactly(
    helpers, tmp_path, reference, world, targets, said
):
    procs = start(helpers, tmp_path, world, 4000)
    lines = stop_when(
        helpers, tmp_path, procs, targets,
        lambda out: out.wait_for(lambda line: line.startswith("round 1/2"), limit(300)),
        prompt=0 in targets,
    )  # fmt: skip
    # a run that finished round 2 first would hold round 2
    assert any(s.startswith(f"distfl: stopped by {said} after round 1/2") for s in lines), lines
    assert stored_round(tmp_path / "cut.h5") == 1
    resumed = run(helpers, tmp_path, "--resume", "cut.h5")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(tmp_path / "cut.h5", reference)


def test_a_round_of_a_million_local_steps_stops_within_seconds(helpers, tmp_path):
    """The sequential trainer (the batched one, ``auto``'s pick, holds every step's batch
    at once, and is refused this many steps by the capacity check)."""
    procs = start(helpers, tmp_path, 1, 1_000_000, trainer="sequential")

    def under_way(_out) -> bool:  # the writer's lock is taken before round 1
        deadline = time.monotonic() + limit(120)
        while not (tmp_path / "cut.h5.lock").exists():
            if time.monotonic() > deadline or procs[0].poll() is not None:
                return False
            time.sleep(0.05)
        time.sleep(2.0)  # into round 1's training
        return True

    lines = stop_when(helpers, tmp_path, procs, [0], under_way)
    assert any(s.startswith("distfl: stopped by SIGTERM after round 0/2") for s in lines), lines
    assert stored_round(tmp_path / "cut.h5") == 0

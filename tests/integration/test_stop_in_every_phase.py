"""A stop signal is acted on within seconds in every phase of a round, alone (W = 1) and in a
torchrun world of three ranks with every rank signalled (as torchrun and Slurm deliver it)
and, for the pooled work, under mpiexec:
the run exits 0 within STOP_S of the signal, its file holds the last completed round, and
the resumed run has the bits of a run that was never stopped.

The phases: a long evaluation (10,000 of 20,000 clients, the default sample), a long
update of the algorithm (a pure-Python loop that never looks at a flag), long pooled work
of the server (the references' kind, computed by the worker ranks under torchrun) and the
write of the run file. The training's phase is ``test_stop_in_training.py``'s.

The slow update, pooled work and write come from a plug-in written by this module: the
``none`` algorithm (FedAvg) whose update, when ``SLOW_PHASE`` names it, touches the file
``SLOW_MARK`` and then works for LONG_S (six times STOP_S). Its results do not depend on
``SLOW_PHASE``, so a run without it is the reference of every stopped run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run, stored_round
from timing import limit

pytestmark = pytest.mark.integration

#: how soon after the signal every process must have exited, on an idle core (scaled by
#: limit() as it is checked)
STOP_S = 10
#: how long the plug-in's slow phases last: far longer than STOP_S
LONG_S = 6 * limit(STOP_S)

PLUGIN = '''\
import os
import time
from pathlib import Path

import numpy as np

from distfl.algorithms import pooled, register
from distfl.algorithms.none import NoClustering

SLOW = os.environ.get("SLOW_PHASE", "")
MARK = os.environ.get("SLOW_MARK", "")
LONG_S = @LONG_S@


def begin():
    if MARK:
        Path(MARK).touch()


@pooled
def slow_piece(payload, i):
    """A second of work per piece in round 2, when the pooled work is to be slow."""
    if SLOW == "references" and int(payload["round"][0]) == 2:
        begin()
        time.sleep(1.0)
    return [float(payload["round"][0] + i)]


@register
class SlowPhases(NoClustering):
    name = "slow_phases"

    def update(self, round_index, plan, reports):
        pieces = 2 * int(LONG_S) if round_index == 2 else 2
        self.pool.map(slow_piece, {"round": np.array([round_index])}, pieces, 1)
        if SLOW == "update" and round_index == 2:
            begin()
            end = time.monotonic() + LONG_S
            while time.monotonic() < end:  # Python work that never looks at a flag
                sum(range(1000))
        self.slow_write = SLOW == "write" and round_index == 1
        return super().update(round_index, plan, reports)

    def state_dict(self):
        if getattr(self, "slow_write", False):  # the run file's write after round 1
            self.slow_write = False
            begin()
            time.sleep(3.0)
        return super().state_dict()
'''
PLUGIN = PLUGIN.replace("@LONG_S@", repr(float(LONG_S)))


def population(clients: int) -> list[str]:
    half = clients // 2
    return [
        "--set", 'data.dataset="gaussian"', "--set", f"data.num_clients={clients}",
        "--set", f"data.groups=[{{count = {half}, alpha = 1000.0}}, "
                 f"{{count = {clients - half}, alpha = 1000.0, permute_labels = true}}]",
        "--set", "server.clients_per_round=100", "--set", "run.plugins=['slow_phases.py']",
        "--set", 'algorithm.name="slow_phases"', "--set", 'run.progress="lines"',
    ]  # fmt: skip


#: the phases: (their population's arguments, the rounds, the round the signal lands in)
SMALL = [*population(2000), "--set", "run.rounds=3", "--set", "eval.every=3"]
#: above 10,000 clients an evaluation takes a sample of 10,000 (eval.clients = "auto")
LARGE = [*population(20000), "--set", "run.rounds=2", "--set", "eval.every=2"]
PHASES = {
    "evaluation": (LARGE, 1),
    "update": (SMALL, 1),
    "references": (SMALL, 1),
    "write": ([*SMALL, "--set", "checkpoint.every=1"], 1),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory, helpers) -> dict:
    """The runs never stopped, one per population (and the large one's output)."""
    tmp = tmp_path_factory.mktemp("stop-in-every-phase")
    (tmp / "slow_phases.py").write_text(PLUGIN)
    runs = {"small": (SMALL, "small.h5"), "large": (LARGE, "large.h5")}
    procs = helpers.launch_together(
        {name: helpers.distfl_cmd(*args, "--out", out) for name, (args, out) in runs.items()},
        cwd=tmp, timeout=limit(600),
    )  # fmt: skip
    assert all(out for out in procs.values()), procs
    paths = {name: tmp / out for name, (_, out) in runs.items()}
    return {**paths, "large_output": procs["large"]}


def test_above_10000_clients_the_default_evaluation_samples_10000(references):
    """``eval.clients = "auto"`` (the default) at K = 20,000, in the run the evaluation's
    phase is stopped in: the evaluation takes a sample of 10,000 clients, shows its
    progress while it runs, and the summary says what the accuracy is the mean of."""
    output = references["large_output"]
    assert "(mean over a sample of 10,000 of 20,000 clients)" in output
    assert "round 2/2 | evaluating " in output  # it took more than a second here
    with h5py.File(references["large"], "r") as f:
        assert f["metrics/evaluation/clients"][()].sum() == 10_000
        assert np.isfinite(f["clients/accuracy"][()]).sum() == 10_000


def ready_when(phase: str, cwd: Path, procs, out) -> bool:
    """Wait until the run is inside ``phase``: the evaluation's progress line, or the mark
    the plug-in's slow work touches."""
    if phase == "evaluation":
        return out.wait_for(lambda line: "evaluating" in line, limit(300)) is not None
    mark = cwd / "mark"
    deadline = time.monotonic() + limit(300)
    while not mark.exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("world", [1, 3], ids=["alone", "torchrun"])
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_signal_in_each_phase_is_acted_on_within_seconds(
    helpers, tmp_path, references, phase, world
):
    args, kept = PHASES[phase]
    (tmp_path / "slow_phases.py").write_text(PLUGIN)
    env = {"SLOW_PHASE": phase, "SLOW_MARK": str(tmp_path / "mark")}
    procs = helpers.start_ranks([*args, "--out", "cut.h5"], tmp_path, world, env=env)
    try:
        readers = [(helpers.LineReader(p.stdout), helpers.LineReader(p.stderr)) for p in procs]
        assert ready_when(phase, tmp_path, procs, readers[0][0]), readers[0][1].text(0)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        for p, (_, err) in zip(procs, readers, strict=True):
            assert p.wait(timeout=limit(120)) == 0, err.text()
        took = time.monotonic() - signalled
        lines = readers[0][0].text().splitlines()
    finally:
        helpers.kill_tree(procs, marker=str(tmp_path))
    assert took < limit(STOP_S), f"the run took {took:.1f} s to stop"
    assert any(s.startswith(f"distfl: stopped by SIGTERM after round {kept}/") for s in lines), (
        lines
    )
    assert stored_round(tmp_path / "cut.h5") == kept
    resumed = subprocess.run(
        helpers.distfl_cmd("--resume", "cut.h5", "--trust-plugins"), cwd=tmp_path,
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(600),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    reference = references["large" if phase == "evaluation" else "small"]
    assert_same_run(tmp_path / "cut.h5", reference)


def test_a_signal_in_pooled_work_under_mpiexec(helpers, tmp_path, references):
    """The same under mpiexec (MPI's collectives, the signal at mpiexec, which hands it to
    every rank), in the phase where the workers compute the server's pooled work."""
    mpiexec = helpers.venv_tool("mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip(f"no mpiexec next to {sys.executable}")
    pytest.importorskip("mpi4py")
    (tmp_path / "slow_phases.py").write_text(PLUGIN)
    env = helpers.clean_env(SLOW_PHASE="references", SLOW_MARK=str(tmp_path / "mark"))
    proc = subprocess.Popen(
        [mpiexec, "-n", "3", *helpers.distfl_cmd(*SMALL, "--out", "cut.h5")], cwd=tmp_path,
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = helpers.LineReader(proc.stdout), helpers.LineReader(proc.stderr)
        assert ready_when("references", tmp_path, [proc], out), err.text(0)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert proc.wait(timeout=limit(120)) == 0, err.text()
        took = time.monotonic() - signalled
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    assert took < limit(STOP_S), f"the run took {took:.1f} s to stop"
    assert "distfl: stopped by SIGTERM after round 1/3" in out.text()
    resumed = subprocess.run(
        helpers.distfl_cmd("--resume", "cut.h5", "--trust-plugins"), cwd=tmp_path,
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(600),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(tmp_path / "cut.h5", references["small"])


def test_a_kill_during_a_long_evaluation_loses_no_completed_round(helpers, tmp_path):
    """Rounds of a fraction of a second, then an evaluation of 10,000 clients (the sample
    of 20,000) that takes longer than ``checkpoint.seconds``: the rounds before it are
    written before it begins, so a SIGKILL during it (no handler runs) leaves them, and the
    run resumes from there. The evaluation's length, and the server's estimate of it, is a
    multiple of a round's (100 of a round's clients for each 1), on every machine; on a fast
    CPU it is 3 to 4 s, so ``checkpoint.seconds`` is 1, well below it. (An evaluation of
    2,000 clients ended within a second there, before its progress line.)"""
    (tmp_path / "slow_phases.py").write_text(PLUGIN)
    args = [*population(20000), "--set", "run.rounds=4", "--set", "eval.every=4",
            "--set", "checkpoint.seconds=1"]  # fmt: skip
    (proc,) = helpers.start_ranks([*args, "--out", "killed.h5"], tmp_path)
    try:
        out = helpers.LineReader(proc.stdout)
        err = helpers.LineReader(proc.stderr)
        began = out.wait_for(lambda line: "evaluating" in line, limit(300))
        assert began, out.text(0) + err.text(0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=limit(30))
    finally:
        helpers.kill_tree([proc], marker=str(tmp_path))
    assert stored_round(tmp_path / "killed.h5") == 3
    resumed = subprocess.run(
        helpers.distfl_cmd("--resume", "killed.h5", "--trust-plugins"), cwd=tmp_path,
        env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(600),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "round 4/4 | clusters 1" in resumed.stdout
    assert stored_round(tmp_path / "killed.h5") == 4

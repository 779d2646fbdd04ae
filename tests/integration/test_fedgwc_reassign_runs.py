"""FedGWC giving members back, in real runs: on the default federation with splits forced
early (a split test every round, no references), a ratio of 0.99 and an outlier factor of
1.01 (a client moves where another cluster's model fits it 1 % better, the other way round
for its cluster's members, and its loss is above theirs), members move.
The run is the same, bit for bit, in one process, under torchrun with 3 ranks, under
mpiexec with 3 ranks, and resumed from a file that ended in the round of its first move
(its tree and its fresh P read back). Each cluster's members after a move are the tree's,
and the statistics ``joined`` and ``left`` balance."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from runfile import assert_same_run
from timing import limit

import distfl

pytestmark = pytest.mark.integration

EARLY = ["--set", "run.seed=0", "--set", 'run.progress="none"', "--set", "algorithm.epsilon=1",
         "--set", "algorithm.patience=1", "--set", "algorithm.min_observations=2",
         "--set", "algorithm.reference_draws=0", "--set", "algorithm.stable_tests=1",
         "--set", "algorithm.n_max=2", "--set", "algorithm.reassign_ratio=0.99",
         "--set", "algorithm.reassign_outlier=1.01"]  # fmt: skip
ROUNDS = 60


def _rounds_with_moves(path) -> list[int]:
    run = distfl.open(path)
    if "joined" not in run.statistics:
        return []
    return sorted(set(np.asarray(run.statistic("joined")["round"]).tolist()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("reassign")
    every = [*EARLY, "--set", f"run.rounds={ROUNDS}"]
    single, three, mpi, resumed = (tmp / n for n in ("w1.h5", "w3.h5", "mpi3.h5", "resumed.h5"))
    helpers.run_alone(tmp, "--out", str(single), *every)
    helpers.launch_together({
        "torchrun": [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
                     "-m", "distfl", "run", "--out", str(three), *every],
        "mpiexec": [helpers.venv_tool("mpiexec"), "-n", "3", sys.executable, "-m", "distfl",
                    "run", "--comm", "mpi", "--out", str(mpi), *every],
    }, tmp, timeout=limit(400))  # fmt: skip
    # cut where the first move happened (its round is in the file), and go on from there
    cut = (_rounds_with_moves(single) or [ROUNDS // 2])[0]
    helpers.run_alone(tmp, "--out", str(resumed), *EARLY, "--set", f"run.rounds={cut}")
    proc = helpers.cli(tmp, "run", *every, "--resume", str(resumed))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{ROUNDS - cut} rounds in" in proc.stdout  # only the rounds left ran
    return single, three, mpi, resumed


def test_members_move_and_the_statistics_balance(runs):
    run = distfl.open(runs[0])
    assert _rounds_with_moves(runs[0])  # members moved
    joined, left = run.statistic("joined"), run.statistic("left")
    clusters = [c for c in np.asarray(joined).dtype.names if c != "round"]
    gained = np.nansum([np.asarray(joined[c], dtype=float) for c in clusters], axis=0)
    lost = np.nansum([np.asarray(left[c], dtype=float) for c in clusters], axis=0)
    np.testing.assert_array_equal(gained, lost)  # every mover left one cluster for another
    assert gained.min() >= 1
    # the leaves partition the clients, each of at least min_clients (3)
    assignment = np.asarray(run.assignment)
    assert set(assignment.tolist()) == set(run.leaves)
    assert min(np.count_nonzero(assignment == c) for c in run.leaves) >= 3


def test_the_same_moves_on_every_world_and_after_a_resume(runs):
    single, three, mpi, resumed = runs
    assert_same_run(single, three, tops=("hierarchy", "final", "metrics", "state"))
    assert_same_run(single, mpi, tops=("hierarchy", "final", "metrics", "state"))
    # (the cut run evaluated its last round, which the whole run need not have: the metrics
    # may differ there and only there, as any run's cut and resumed do)
    assert_same_run(single, resumed, tops=("hierarchy", "final", "state"))

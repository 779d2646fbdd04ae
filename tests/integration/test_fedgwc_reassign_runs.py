"""FedGWC giving members back, in real runs: on the default federation with splits forced
early (a split test every round, no references), a ratio of 0.99 and an outlier factor of
1.01 (a client moves where another cluster's model fits it 1 % better, the other way round
for its cluster's members, and its loss is above theirs), members move in several rounds; the run is
the same, bit for bit, in one process, under torchrun with 3 ranks, under mpiexec with 3
ranks, and resumed from a file that ended half-way. Each cluster's members after a move are
the tree's, and the statistics ``joined`` and ``left`` balance."""

from __future__ import annotations

import shutil
import subprocess
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("reassign")
    env = helpers.clean_env()
    every = [*EARLY, "--set", f"run.rounds={ROUNDS}"]
    single = tmp / "w1.h5"
    helpers.run_alone(tmp, "--out", str(single), *every)
    half = tmp / "half.h5"
    helpers.run_alone(tmp, "--out", str(half), *EARLY, "--set", f"run.rounds={ROUNDS // 2}")
    resumed = tmp / "resumed.h5"
    shutil.copy(half, resumed)
    proc = subprocess.run(
        [sys.executable, "-m", "distfl", "run", "--resume", str(resumed),
         "--set", f"run.rounds={ROUNDS}"],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(400),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    three = tmp / "w3.h5"
    proc = subprocess.run(
        [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3", "-m", "distfl",
         "run", "--out", str(three), *every],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(400),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mpi = tmp / "mpi3.h5"
    proc = subprocess.run(
        [helpers.venv_tool("mpiexec"), "-n", "3", sys.executable, "-m", "distfl", "run",
         "--comm", "mpi", "--out", str(mpi), *every],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(400),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return single, three, mpi, resumed


def test_members_move_and_the_statistics_balance(runs):
    run = distfl.open(runs[0])
    assert "joined" in run.statistics
    joined, left = run.statistic("joined"), run.statistic("left")
    rounds = np.asarray(joined["round"])
    assert len(rounds) >= 1
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
    # (the half run evaluated its last round, 30, which the whole run did not: the metrics
    # differ there and only there, as any run's cut and resumed do)
    assert_same_run(single, resumed, tops=("hierarchy", "final", "state"))

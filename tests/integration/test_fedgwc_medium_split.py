"""FedGWC's calibrated split test of a cluster above spectral.DENSE_EIGEN_UP_TO (512)
members, in real runs: the spectral embeddings come from ARPACK and the Gaussian
references' affinities are float32, and the run is the same bits in one process, under
torchrun with 3 ranks (the references drawn by the two worker ranks) and resumed from a
run file written before the test.

600 digits clients (450 with the true labels, 150 with permuted ones), 60 a round (dense
P), ``epsilon = 1`` and ``patience = 2``: the root is tested in round 2 and every round
after; ``db_threshold = 1e9`` so that each test proposes its best partition and draws its
references."""

from __future__ import annotations

import subprocess

import h5py
import numpy as np
import pytest
from runfile import assert_same, assert_same_run, read_run
from timing import limit

from distfl.algorithms import fedgwc
from distfl.algorithms.fedgwc import spectral

pytestmark = pytest.mark.integration

K = 600
ROUNDS = 3
ARGS = [
    "--set", "data.num_clients=600",
    "--set", "data.groups=[{count=450, alpha=1000.0}, "
             "{count=150, alpha=1000.0, permute_labels=true}]",
    "--set", "server.clients_per_round=60",
    "--set", 'run.progress="none"',
    "--set", "eval.every=1",  # the stopped run evaluates its last round: so does the other
    "--set", 'algorithm.interaction="dense"',
    "--set", "algorithm.epsilon=1.0",
    "--set", "algorithm.patience=2",
    "--set", "algorithm.min_observations=0",
    "--set", "algorithm.stable_tests=1",
    "--set", "algorithm.reference_draws=4",
    "--set", "algorithm.db_threshold=1e9",
]  # fmt: skip


def _run(helpers, cwd, *args, world: int = 1) -> None:
    """``distfl run ARGS``: in this process (the command's code) at ``world`` 1, torchrun's
    ranks otherwise."""
    if world == 1:
        proc = helpers.cli(cwd, "run", *args)
    else:
        torchrun = helpers.venv_tool("torchrun")
        cmd = [torchrun, "--standalone", "--nproc-per-node", str(world), "-m", "distfl", "run"]
        cmd += [*args, "--comm", "torch"]
        proc = subprocess.run(cmd, cwd=cwd, env=helpers.clean_env(), capture_output=True,
                              text=True, timeout=limit(600))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("medium")
    one, three, part = tmp / "w1.h5", tmp / "w3.h5", tmp / "part.h5"
    _run(helpers, tmp, "--out", str(one), "--set", f"run.rounds={ROUNDS}", *ARGS)
    _run(helpers, tmp, "--out", str(three), "--set", f"run.rounds={ROUNDS}", *ARGS, world=3)
    _run(helpers, tmp, "--out", str(part), "--set", "run.rounds=1", *ARGS)
    _run(helpers, tmp, "--resume", str(part), "--set", f"run.rounds={ROUNDS}", *ARGS)
    return one, three, part


def test_the_root_of_600_is_tested_with_references_on_the_iterative_path(runs):
    assert spectral.DENSE_EIGEN_UP_TO < K <= spectral.SMALL_K
    assert fedgwc.REFERENCE_FLOAT32_ABOVE < K
    with h5py.File(runs[0], "r") as f:
        clusters = f["metrics/clusters"]
        rounds = np.asarray(clusters["round"][()])
        ref = np.asarray(clusters["db_reference"][()], dtype=np.float64)
        db = np.asarray(clusters["db"][()], dtype=np.float64)
    # round 2's rows: the root alone (no test before it, so no split)
    (i,) = np.flatnonzero(rounds == 2)
    # round 2's test of all 600 clients proposed a partition and drew its references
    assert np.isfinite(db[i]) and np.isfinite(ref[i]) and ref[i] > 0


def test_the_same_bits_under_torchrun(runs):
    one, three, _ = runs
    assert_same_run(one, three, tops=("hierarchy", "final", "metrics"))


def test_resumed_before_the_test_equals_uninterrupted(runs):
    one, _, resumed = runs
    a, b = read_run(one), read_run(resumed)
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    assert_same(a, b)

"""FedGWC finds the embedded scenario's groups: the first split of the root separates the
clean clients from the label-permuted ones (Rand index 1.0), with the same hierarchy, bit
for bit, in one process, under torchrun with 3 ranks and under mpiexec with 3 ranks. Over
several ranks the split tests' Gaussian references are computed by the worker ranks
(/timing/workers' ``pooled``), in one process by rank 0."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from runfile import assert_same_run
from timing import limit

from distfl.metrics import rand_index

pytestmark = pytest.mark.integration

# the default preset, cut where the first split (round 239 for seed 0) has happened
ARGS = ["--set", "run.rounds=245", "--set", "run.seed=0", "--set", 'run.progress="none"']


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("fedgwc")
    env = helpers.clean_env()
    single = tmp / "w1.h5"
    helpers.run_alone(tmp, "--out", str(single), *ARGS)  # the code of distfl run, here
    torchrun = helpers.venv_tool("torchrun")
    three = tmp / "w3.h5"
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "3", "-m", "distfl", "run",
         "--out", str(three), *ARGS],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(400),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mpi = tmp / "mpi3.h5"
    proc = subprocess.run(
        [helpers.venv_tool("mpiexec"), "-n", "3", sys.executable, "-m", "distfl", "run",
         "--comm", "mpi", "--out", str(mpi), *ARGS],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(400),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return single, three, mpi


def test_first_split_separates_the_groups(runs):
    with h5py.File(runs[0], "r") as f:
        groups = f["clients/group"][()]
        root = f["hierarchy/0"]
        assert root.attrs["split_round"] > 0
        labels = root["labels"][()]
        scores = root["db_scores"][()]
        members = root["members"][()]
        children = sorted(n for n in f["hierarchy"] if f["hierarchy"][n].attrs["parent"] == "0")
        assert children == ["0.0", "0.1"]
        W = root["affinity"][()]
        P = root["interaction"][()]
        clusters = f["metrics/clusters"]
        at_split = (clusters["round"][()] == root.attrs["split_round"]) & (
            clusters["cluster"][()].astype(str) == "0"
        )
        db, reference = clusters["db"][at_split][0], clusters["db_reference"][at_split][0]
        tests = np.isfinite(clusters["db"][()]) & (clusters["cluster"][()].astype(str) == "0")
    assert rand_index(groups[members], labels) == 1.0
    assert scores.min() < 1.0 and np.argmin(scores) == 0  # two clusters chosen
    # the calibrated test: far below the Gaussian references, after an earlier test that
    # proposed it
    assert db == scores.min() and db < 0.5 * reference
    assert tests.sum() >= 2
    assert W.shape == P.shape == (40, 40)
    assert np.allclose(W, W.T) and np.allclose(np.diag(W), 1.0)


def test_same_hierarchy_in_one_process_and_under_torchrun_and_mpiexec(runs):
    assert_same_run(runs[0], runs[1], tops=("hierarchy", "final", "metrics"))
    assert_same_run(runs[0], runs[2], tops=("hierarchy", "final", "metrics"))


def _pooled(path):
    """{rank: references it drew over the run}, and the split tests that drew any."""
    with h5py.File(path, "r") as f:
        w = f["timing/workers"]
        ranks, pooled = w["rank"][()], w["pooled"][()]
        c = f["metrics/clusters"]
        tested = int(np.isfinite(c["db_reference"][()]).sum())
    return {int(r): int(pooled[ranks == r].sum()) for r in np.unique(ranks)}, tested


def test_the_references_are_drawn_by_the_worker_ranks(runs):
    """The split tests' references (15 a test at the defaults) are the same pieces in every
    world: rank 0 draws them all in one process; over 3 ranks, the two workers share them
    (8 and 7 a test) and rank 0 draws none."""
    one, tested = _pooled(runs[0])
    assert tested >= 1
    assert one == {0: 15 * tested}
    for path in runs[1:]:
        many, tested_there = _pooled(path)
        assert tested_there == tested
        assert many == {1: 8 * tested, 2: 7 * tested}


def test_inspect_shows_the_tree(runs, helpers, tmp_path):
    proc = helpers.cli(tmp_path, "inspect", str(runs[0]))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "0 " in out and "split at round" in out
    assert "├── 0.0" in out and "└── 0.1" in out
    assert "Rand index 1.000, ARI 1.000" in out
    assert "WAS" in out and "WADB" in out

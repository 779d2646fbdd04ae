"""IFCA and the oracle on rotation federations, as real ``distfl run`` processes.

The federation: 12 digits clients, 6 with upright images and 6 with images rotated by 180°.
IFCA with the true number of clusters (2) recovers the groups (adjusted Rand index 1.0) with
8 of the 12 clients per round, for seeds 0, 1 and 2, and runs bit for bit the same under
torchrun with 3 ranks (its probe step goes through real collectives). With 4 or 6 clients per
round seed 0 collapses instead (ARI 0): the round-1 probe puts 11 clients on cluster 1 and
only client 5 on cluster 0; when client 5 is not among the round's trained clients, cluster 0
keeps its random initialisation, cluster 1 (trained on both rotations) beats it for everyone
from round 2 on, and cluster 0 never trains. With 8 clients per round client 5 trains in
round 1 and the groups separate (ARI 1.0 after 20 rounds for seeds 0 to 9). The oracle is 1.0
by construction and reaches at least FedAvg's accuracy. The ``rotated`` preset (4 rotations ×
10 clients) with 4 IFCA clusters is run for 20 rounds and only what holds there is asserted.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 15
FEDERATION = [
    "--set", "data.groups=[{count=6, alpha=1000.0}, {count=6, alpha=1000.0, rotation=180.0}]",
    "--set", "data.num_clients=12",
    "--set", "server.clients_per_round=8",
    "--set", f"run.rounds={ROUNDS}",
    "--set", f"eval.every={ROUNDS}",
    "--set", 'run.progress="none"',
]  # fmt: skip
IFCA2 = [*FEDERATION, "--set", 'algorithm.name="ifca"', "--set", "algorithm.num_clusters=2"]
ROTATED = [
    "--preset", "rotated",
    "--set", 'algorithm.name="ifca"', "--set", "algorithm.num_clusters=4",
    "--set", "run.rounds=20", "--set", "eval.every=20", "--set", 'run.progress="none"',
]  # fmt: skip


def _seed(seed: int) -> list[str]:
    return ["--set", f"run.seed={seed}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("ifca")
    env = helpers.clean_env()
    torchrun = helpers.venv_tool("torchrun")
    jobs: dict[str, list[str]] = {
        f"ifca{s}": [sys.executable, "-m", "distfl", "run", *IFCA2, *_seed(s)] for s in (0, 1, 2)
    }
    jobs["ifca0-w3"] = [
        torchrun, "--standalone", "--nproc-per-node", "3",
        "-m", "distfl", "run", *IFCA2, *_seed(0),
    ]  # fmt: skip
    for name in ("oracle", "none"):
        jobs[name] = [
            sys.executable, "-m", "distfl", "run", *FEDERATION, *_seed(0),
            "--set", f'algorithm.name="{name}"',
        ]  # fmt: skip
    jobs["rotated"] = [sys.executable, "-m", "distfl", "run", *ROTATED, *_seed(0)]

    def run(name: str) -> subprocess.CompletedProcess:
        out = tmp / f"{name}.h5"
        return subprocess.run(
            [*jobs[name], "--out", str(out)],
            env=env, cwd=tmp, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(jobs, pool.map(run, jobs), strict=True))
    for name, proc in done.items():
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    return {name: tmp / f"{name}.h5" for name in jobs}


def _read(path: Path) -> tuple[np.ndarray, np.ndarray, float, list[str]]:
    with h5py.File(path, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        accuracy = float(f["metrics/accuracy"][-1])
        leaves = [s.decode() for s in f["final/leaves"][()]]
    return groups, assignment, accuracy, leaves


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ifca_recovers_the_rotation_groups(runs, seed):
    groups, assignment, accuracy, leaves = _read(runs[f"ifca{seed}"])
    assert leaves == ["0", "1"]
    assert adjusted_rand_index(groups, assignment) == 1.0, assignment
    assert accuracy > 0.7


def test_ifca_probe_bit_identical_under_torchrun(runs):
    assert_same_run(runs["ifca0"], runs["ifca0-w3"])


def test_ifca_keeps_both_models_and_trains_the_sampled_clients(runs):
    with h5py.File(runs["ifca0"], "r") as f:
        sizes = f["metrics/clusters/size"][()]
        sampled = f["metrics/clusters/sampled"][()]
        rounds = f["metrics/clusters/round"][()]
        models = f["final/models"][()]
    assert models.shape[0] == 2 and not np.array_equal(models[0], models[1])
    assert (sampled[rounds == 1].sum(), sampled[rounds == ROUNDS].sum()) == (8, 8)
    assert (sizes[rounds == ROUNDS] == 6).all()


def test_oracle_is_exact_and_at_least_fedavg(runs):
    groups, assignment, oracle_acc, leaves = _read(runs["oracle"])
    assert leaves == ["0", "1"]
    assert adjusted_rand_index(groups, assignment) == 1.0
    _, fedavg_assignment, fedavg_acc, _ = _read(runs["none"])
    assert (fedavg_assignment == 0).all()
    assert oracle_acc >= fedavg_acc, (oracle_acc, fedavg_acc)


def test_ifca_on_the_rotated_preset(runs):
    """Seed 0, 20 rounds: each rotation stays whole inside one cluster, but pairs of
    rotations share a cluster (0° with 180°, 90° with 270°): ARI 0.48."""
    groups, assignment, accuracy, leaves = _read(runs["rotated"])
    assert leaves == ["0", "1", "2", "3"]
    for g in np.unique(groups):
        assert len(set(assignment[groups == g])) == 1, (g, assignment)
    assert len(set(assignment)) >= 2
    assert adjusted_rand_index(groups, assignment) > 0.4
    assert accuracy > 0.5

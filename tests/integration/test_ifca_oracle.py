"""IFCA and the oracle on rotation federations: runs of ``distfl run``'s code in the test's
process (``distfl.run``), and real torchrun processes of 3 ranks.

The federation: 12 digits clients, 6 with upright images and 6 with images rotated by 180°.
IFCA with the true number of clusters (2) and its default start (``init = "kmeans++"``: the
models seeded by k-means of round 1's models) recovers the groups (adjusted Rand index 1.0)
with 8 of the 12 clients per round, for seeds 0, 1 and 2, and runs bit for bit the same
under torchrun with 3 ranks (its probe step goes through real collectives). With 4 clients
per round and the paper's start (``init = "random"``: each model from its own random
initialisation) seed 0 collapses (ARI 0): one model wins the round-1 probe for nearly every
client, the other never trains; the k-means++ start recovers the groups on the same run.
The oracle is 1.0 by construction and reaches at least FedAvg's accuracy. On the
``rotated`` preset (4 rotations × 10 clients) IFCA with 4 clusters and the default start
recovers the four rotations in 20 rounds (seed 0).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from runfile import assert_same_run
from timing import limit

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
    """The runs the tests read: those of 3 ranks under torchrun, in real processes (two at
    a time, in threads), and those of one process in this one (helpers.run_alone, the code
    of ``distfl run``) meanwhile."""
    tmp = tmp_path_factory.mktemp("ifca")
    env = helpers.clean_env()
    torchrun = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
                "-m", "distfl", "run"]  # fmt: skip
    warm = [*IFCA2, *_seed(0), "--set", "algorithm.fedavg_rounds=3"]
    four = [*IFCA2, "--set", "server.clients_per_round=4", *_seed(0)]
    ranks = {"ifca0-w3": [*torchrun, *IFCA2, *_seed(0)], "warm-w3": [*torchrun, *warm]}
    alone: dict[str, list[str]] = {f"ifca{s}": [*IFCA2, *_seed(s)] for s in (0, 1, 2)}
    for name in ("oracle", "none"):
        alone[name] = [*FEDERATION, *_seed(0), "--set", f'algorithm.name="{name}"']
    alone["rotated"] = [*ROTATED, *_seed(0)]
    alone["warm"] = warm
    for init in ("random", "kmeans++"):
        alone[f"four-{init}"] = [*four, "--set", f'algorithm.init="{init}"']

    def run(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*ranks[name], "--out", str(tmp / f"{name}.h5")],
            env=env, cwd=tmp, capture_output=True, text=True, timeout=limit(300),
        )  # fmt: skip

    with ThreadPoolExecutor(max_workers=2) as pool:
        launched = {name: pool.submit(run, name) for name in ranks}
        for name, args in alone.items():
            helpers.run_alone(tmp, *args, "--out", f"{name}.h5")
        for name, future in launched.items():
            proc = future.result()
            assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    return {name: tmp / f"{name}.h5" for name in [*alone, *ranks]}


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
    # round 1 seeds the models (every client trains from one model), later rounds sample 8
    assert sampled[rounds == 1].tolist() == [12, 0]
    assert sampled[rounds == ROUNDS].sum() == 8
    assert (sizes[rounds == ROUNDS] == 6).all()


def test_oracle_is_exact_and_at_least_fedavg(runs):
    groups, assignment, oracle_acc, leaves = _read(runs["oracle"])
    assert leaves == ["0", "1"]
    assert adjusted_rand_index(groups, assignment) == 1.0
    _, fedavg_assignment, fedavg_acc, _ = _read(runs["none"])
    assert (fedavg_assignment == 0).all()
    assert oracle_acc >= fedavg_acc, (oracle_acc, fedavg_acc)


def test_ifca_on_the_rotated_preset(runs):
    """Seed 0, 20 rounds, 4 clusters: the four rotations recovered exactly."""
    groups, assignment, accuracy, leaves = _read(runs["rotated"])
    assert leaves == ["0", "1", "2", "3"]
    assert adjusted_rand_index(groups, assignment) == 1.0, assignment
    assert accuracy > 0.8


def test_kmeanspp_start_recovers_where_the_papers_start_collapses(runs):
    """4 of 12 clients per round, seed 0: with random models the clients drift, round by
    round, onto the one model that trains on both rotations (ARI 0 at the end); seeded by
    k-means of round 1's models, the two rotations are recovered. /metrics/membership
    places all 12 clients in every round, and its last round is the final assignment."""
    groups, assignment, _, _ = _read(runs["four-random"])
    assert len(set(assignment.tolist())) == 1 and adjusted_rand_index(groups, assignment) == 0.0
    groups, assignment, _, leaves = _read(runs["four-kmeans++"])
    assert adjusted_rand_index(groups, assignment) == 1.0, assignment
    with h5py.File(runs["four-kmeans++"], "r") as f:
        m = {k: f["metrics/membership"][k][()] for k in ("round", "cluster", "group", "clients")}
    per_round = np.bincount(m["round"], weights=m["clients"])[1:]
    assert per_round.tolist() == [12.0] * ROUNDS
    last = m["round"] == ROUNDS
    table = sorted(zip([c.decode() for c in m["cluster"][last]], m["group"][last].tolist(),
                       m["clients"][last].tolist(), strict=True))  # fmt: skip
    final = np.zeros((len(leaves), 2), dtype=int)
    np.add.at(final, (assignment, groups), 1)
    rows, cols = np.nonzero(final)
    expect = sorted((leaves[i], int(g), int(final[i, g])) for i, g in zip(rows, cols, strict=True))
    assert table == expect


def test_ifca_fedavg_rounds_warm_up_then_seed(runs):
    """fedavg_rounds = 3: rounds 1-3 train the sampled 8 clients on cluster 0 alone (no
    probe), round 4 seeds (all 12), and the groups are still recovered; the same bits
    under torchrun."""
    with h5py.File(runs["warm"], "r") as f:
        sampled = f["metrics/clusters/sampled"][()]
        rounds = f["metrics/clusters/round"][()]
        groups, assignment = f["clients/group"][()], f["final/assignment"][()]
    for t in (1, 2, 3):
        assert sampled[rounds == t].tolist() == [8, 0], t
    assert sampled[rounds == 4].tolist() == [12, 0]
    assert adjusted_rand_index(groups, assignment) == 1.0, assignment
    assert_same_run(runs["warm"], runs["warm-w3"])

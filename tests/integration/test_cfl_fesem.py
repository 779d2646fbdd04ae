"""CFL and FeSEM in real runs on a federation of two rotation groups (digits, 5 clients
upright and 5 rotated by 180°, every client in every round).

CFL: with full-batch local steps (batch 60 = each client's train split) at lr 0.5 the root's
mean update falls below ε1 = 0.4 at round 10 or 11 while the largest client update is still
about 1.1 > ε2 = 0.9; the split separates the rotation groups exactly (ARI 1.0), and the
children, whose largest update drops below 0.8 one round after the split while their mean
is still above 0.4, do not split again. Seeds 0, 1 and 2 all behave so. The same run is
bit-identical under torchrun with 3 ranks and when stopped after the split and resumed.

FeSEM with its default start (``init = "kmeans++"``: every client trains once from one
model, k-means of those models seeds the centres) separates the rotation groups exactly
(ARI 1.0, seeds 0, 1, 2), and resumes exactly from a checkpoint. With the paper's start
(``init = "random"``: two centres from distinct random initialisations) the centres lie
about 11 apart in parameter space and a client's training moves it by about 1, so every
client stays with the centre it was first dealt to: no client ever moves and FeSEM keeps
its random initial assignment."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from runfile import assert_same, assert_same_run, read_run
from timing import limit

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

FEDERATION = [
    "--set", "data.groups=[{count=5, alpha=1000.0}, {count=5, alpha=1000.0, rotation=180.0}]",
    "--set", "data.num_clients=10",
    "--set", "server.clients_per_round=10",
    "--set", "train.lr=0.5",
    "--set", "train.batch_size=60",
    "--set", 'run.progress="none"',
    "--set", "eval.every=5",
]  # fmt: skip
ROUNDS = 20
CFL = [
    *FEDERATION,
    "--set", 'algorithm.name="cfl"',
    "--set", "algorithm.eps1=0.4",
    "--set", "algorithm.eps2=0.9",
    "--set", "algorithm.warmup=5",
    "--set", "run.seed=0",
]  # fmt: skip
FESEM = [*FEDERATION, "--set", 'algorithm.name="fesem"', "--set", "algorithm.num_clusters=2"]
FESEM_ROUNDS = 10
FESEM_RANDOM = [*FESEM, "--set", 'algorithm.init="random"']


def _torchrun(helpers, cwd, *args, world: int) -> subprocess.CompletedProcess:
    """``distfl run ARGS`` under torchrun with ``world`` ranks, in real processes."""
    torchrun = helpers.venv_tool("torchrun")
    cmd = [torchrun, "--standalone", "--nproc-per-node", str(world), "-m", "distfl", "run"]
    cmd += list(args)
    proc = subprocess.run(
        cmd, cwd=cwd, env=helpers.clean_env(), capture_output=True, text=True, timeout=limit(300)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _resume(helpers, cwd, *args) -> None:
    """``distfl run --resume ARGS`` in this process (helpers.cli: the command's code,
    without starting a Python that imports torch); it must exit 0."""
    proc = helpers.cli(cwd, "run", "--resume", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _parallel(helpers, cwd, jobs: list[tuple[list[str], int]]) -> None:
    """Independent runs: those of several ranks as real processes, two at a time, and
    meanwhile those of one process in this one (helpers.run_alone: the code of
    ``distfl run``, without starting a Python that imports torch)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        launched = [pool.submit(_torchrun, helpers, cwd, *args, world=w)
                    for args, w in jobs if w > 1]  # fmt: skip
        for args, world in jobs:
            if world == 1:
                helpers.run_alone(cwd, *args)
        for future in launched:
            future.result()


@pytest.fixture(scope="module")
def cfl_runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("cfl")
    full, three, part = tmp / "w1.h5", tmp / "w3.h5", tmp / "resumed.h5"
    _parallel(helpers, tmp, [
        (["--out", str(three), "--set", f"run.rounds={ROUNDS}", *CFL], 3),
        (["--out", str(full), "--set", f"run.rounds={ROUNDS}", *CFL], 1),
        (["--out", str(part), "--set", "run.rounds=15", *CFL], 1),
    ])  # fmt: skip
    _resume(helpers, tmp, str(part), "--set", f"run.rounds={ROUNDS}", *CFL)
    return full, three, part


def test_cfl_splits_the_rotation_groups_exactly(cfl_runs):
    with h5py.File(cfl_runs[0], "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        leaves = [x.decode() for x in f["final/leaves"][()]]
        root = f["hierarchy/0"]
        split_round = int(root.attrs["split_round"])
        mean_norm = float(root["mean_norm"][0])
        max_norm = float(root["max_norm"][0])
        similarity = root["similarity"][()]
        labels = root["labels"][()]
        children = {
            n: f["hierarchy"][n]["members"][()].tolist()
            for n in f["hierarchy"]
            if f["hierarchy"][n].attrs["parent"] == "0"
        }
        num_clusters = f["metrics/num_clusters"][()]
    assert adjusted_rand_index(groups, assignment) == 1.0
    assert leaves == ["0.0", "0.1"]  # one split, and the children stay whole
    assert 5 < split_round <= 12
    assert mean_norm < 0.4 < 0.9 < max_norm
    assert similarity.shape == (10, 10) and np.allclose(similarity, similarity.T)
    assert adjusted_rand_index(groups, labels) == 1.0
    # children hold global client ids: the upright clients are 0-4, the rotated ones 5-9
    assert sorted(children.values()) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert num_clusters.tolist() == [1] * (split_round - 1) + [2] * (ROUNDS - split_round + 1)


def test_cfl_same_bits_under_torchrun(cfl_runs):
    full, three, _ = cfl_runs
    assert_same_run(full, three, tops=("hierarchy", "final", "metrics"))


def test_cfl_resumed_after_the_split_equals_uninterrupted(cfl_runs):
    full, _, resumed = cfl_runs
    with h5py.File(full, "r") as f:
        assert int(f["hierarchy/0"].attrs["split_round"]) < 15  # the state holds children
    a, b = read_run(full), read_run(resumed)
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    assert_same(a, b)


@pytest.fixture(scope="module")
def fesem_runs(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("fesem")
    out = {seed: tmp / f"s{seed}.h5" for seed in (0, 1, 2)}
    jobs = [
        (["--out", str(out[seed]), "--set", f"run.seed={seed}",
          "--set", f"run.rounds={FESEM_ROUNDS}", *FESEM], 1)
        for seed in (0, 1, 2)
    ]  # fmt: skip
    out["random"] = tmp / "random.h5"
    jobs.append((["--out", str(out["random"]), "--set", f"run.rounds={FESEM_ROUNDS}",
                  *FESEM_RANDOM], 1))  # fmt: skip
    part = tmp / "resumed.h5"
    jobs.append((["--out", str(part), "--set", "run.rounds=5", *FESEM], 1))
    _parallel(helpers, tmp, jobs)
    _resume(helpers, tmp, str(part), "--set", f"run.rounds={FESEM_ROUNDS}", *FESEM)
    return out, part


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fesem_ends_with_two_non_empty_clusters(fesem_runs, seed):
    with h5py.File(fesem_runs[0][seed], "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        leaves = [x.decode() for x in f["final/leaves"][()]]
        models = f["final/models"][()]
        num_clusters = f["metrics/num_clusters"][()]
    assert leaves == ["0", "1"]
    assert sorted(set(assignment.tolist())) == [0, 1]  # both non-empty, nobody unassigned
    assert set(num_clusters.tolist()) == {2}
    assert models.shape[0] == 2 and not np.array_equal(models[0], models[1])
    assert np.isfinite(models).all()
    assert adjusted_rand_index(groups, assignment) == 1.0, assignment


def test_fesem_paper_start_keeps_its_random_assignment(fesem_runs):
    """init = "random": after round 1 (whose E-step is the first move) no client changes
    centre, round after round (/metrics/membership)."""
    with h5py.File(fesem_runs[0]["random"], "r") as f:
        m = f["metrics/membership"]
        rounds, cluster, group = m["round"][()], m["cluster"][()], m["group"][()]
        clients = m["clients"][()]
        leaves = [x.decode() for x in f["final/leaves"][()]]
    table = {r: sorted(zip(cluster[rounds == r].tolist(), group[rounds == r].tolist(),
                           clients[rounds == r].tolist(), strict=True))
             for r in range(1, FESEM_ROUNDS + 1)}  # fmt: skip
    assert all(table[r] == table[1] for r in table), table
    assert leaves == ["0", "1"]


def test_fesem_resumed_equals_uninterrupted(fesem_runs):
    runs, resumed = fesem_runs
    assert_same(read_run(runs[0]), read_run(resumed))

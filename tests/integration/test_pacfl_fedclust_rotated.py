"""PACFL and FedClust find the rotated-digits groups in one shot, a client first seen later
joins its group, and each run is the same bits under torchrun (3 ranks, gloo) and when
stopped half-way and resumed from its run file.

The one-shot round clusters 24 of the 40 clients (``probe_clients``), so that the rounds
after it probe newcomers: their cluster comes from the rows kept on the server, which a
resumed run reads back from ``/state``."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same_run
from timing import limit

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 4
COMMON = (
    "--preset", "rotated",
    "--set", "data.samples_per_client=300",
    "--set", "algorithm.probe_clients=24",
    "--set", "eval.every=2",
    "--set", 'run.progress="none"',
)  # fmt: skip
# Rotated digits, 4 rotations x 10 clients (seed 0): the smallest principal angle between
# the data subspaces (p = 3) stays below 4.1 degrees within a rotation and above 6.8
# across; the final-layer weights after 40 local steps of the MLP lie within 0.41 of each
# other within a rotation and 0.74 apart across (all 40 clients; after 100 steps, 1.1 and
# 2.2: the training the test runs is what costs, so it takes the 40 steps and λ = 0.55).
ALGORITHMS = {
    "pacfl": ("--set", 'algorithm.name="pacfl"', "--set", "algorithm.threshold=5.5"),
    "fedclust": (
        "--set",
        'algorithm.name="fedclust"',
        "--set",
        "algorithm.steps=40",
        "--set",
        "algorithm.threshold=0.55",
    ),  # fmt: skip
}


def args(name: str, rounds: int = ROUNDS) -> tuple[str, ...]:
    return (*COMMON, *ALGORITHMS[name], "--set", f"run.rounds={rounds}")


@pytest.fixture(scope="module", params=sorted(ALGORITHMS))
def runs(request, tmp_path_factory, helpers):
    """(algorithm, W=1 run, torchrun W=3 run, W=1 run stopped after round 2 and resumed)."""
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    single, multi, resumed = helpers.alone_torchrun_resumed(
        tmp, lambda rounds: args(name, rounds=rounds), ROUNDS
    )
    return name, single, multi, resumed


def test_groups_found_in_one_shot_and_newcomers_join_theirs(runs):
    name, single, _, _ = runs
    with h5py.File(single, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        root = f["hierarchy/0"]
        assert int(root.attrs["split_round"]) == 1
        clients = root["clients"][()]
        labels = root["labels"][()]
        distances = root["distances"][()]
        leaves = [x.decode() if isinstance(x, bytes) else str(x) for x in f["final/leaves"][()]]
    # four clusters, then the leaf where the clients not yet sampled wait
    assert leaves == ["0.0", "0.1", "0.2", "0.3", "0.4"]
    assert len(clients) == 24 and distances.shape == (24, 24)
    assert adjusted_rand_index(groups[clients], labels) == 1.0
    # the clients not in the one-shot round that were sampled since joined their group
    placed = assignment < 4
    newcomers = np.setdiff1d(np.flatnonzero(placed), clients)
    assert len(newcomers) > 0 and not np.isin(clients, np.flatnonzero(~placed)).any()
    assert adjusted_rand_index(groups[placed], assignment[placed]) == 1.0


def test_torchrun_gives_the_same_bits(runs):
    _, single, multi, _ = runs
    assert_same_run(single, multi)


def test_resume_gives_the_same_bits(runs):
    _, single, _, resumed = runs
    assert_same_run(single, resumed)


@pytest.mark.parametrize(
    ("preset", "items", "needle"),
    [
        ("rotated", ('algorithm.name="pacfl"', "algorithm.num_basis=65"),
         "algorithm.num_basis = 65: must be at most the 64 features of a sample"),
        # every one of a million clients in the one-shot round: 24 bytes a pair, 22 TiB
        ("digits", ("data.num_clients=1000000", 'algorithm.name="pacfl"'),
         "algorithm pacfl keeps K×K matrices (24 bytes per pair of clients), 22352.2 GiB for "
         "1,000,000 clients"),
        ("rotated", ('algorithm.name="fedclust"', "algorithm.num_clusters=41"),
         "algorithm.num_clusters = 41: must be -1 (the threshold), 0 (the number of data "
         "groups) or 1 to the one-shot round's 40 clients"),
    ],
)  # fmt: skip
def test_an_impossible_value_is_refused_in_one_line_before_any_work(helpers, tmp_path, preset,
                                                                    items, needle):  # fmt: skip
    sets = [a for item in items for a in ("--set", item)]
    out = tmp_path / "refused.h5"
    proc = helpers.cli(tmp_path, "run", "--preset", preset, *sets, "--out", str(out))
    assert_one_line_error(proc, needle)
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_distance_blocks_spread_over_the_ranks_give_the_same_bits(helpers, tmp_path, name):
    """130 clients in the one-shot round: three pooled blocks of 64 rows, which the two
    worker ranks of a torchrun world compute (one process computes them itself)."""
    sets = ("--preset", "digits", "--set", "data.num_clients=130",
            "--set", "data.samples_per_client=40", "--set", "run.rounds=2",
            "--set", "eval.every=2", "--set", 'run.progress="none"',
            "--set", f'algorithm.name="{name}"')  # fmt: skip
    single, multi = tmp_path / "w1.h5", tmp_path / "w3.h5"
    torchrun = [
        helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
        "-m", "distfl", "run", *sets, "--out", str(multi), "--comm", "torch",
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        ranks = pool.submit(subprocess.run, torchrun, env=helpers.clean_env(),
                            capture_output=True, text=True, timeout=limit(400))  # fmt: skip
        helpers.run_alone(tmp_path, *sets, "--out", str(single))
        p3 = ranks.result()
    assert p3.returncode == 0, p3.stdout + p3.stderr
    with h5py.File(multi, "r") as f:
        assert f["hierarchy/0/distances"].shape == (130, 130)
        pooled = f["timing/workers/pooled"][()]
    assert pooled.sum() >= 3  # the worker ranks computed the blocks
    assert_same_run(single, multi)

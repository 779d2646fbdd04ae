"""CFL-GP finds the rotated-digits groups from the clients' gradient profiles (the true
number of clusters given, as EMD-CFL's Table 1 gives it), and its run is the same bits under
torchrun (3 ranks, gloo) and when stopped half-way and resumed from its run file.

Every client is sampled every round (the paper's full participation, 40 a round); period 2,
so rounds 1 and 3 are clustering rounds: round 1 clusters the gradients of the criterion
model 0, round 3 adds those of model 1 and clusters again; the resumed run reads the
profiles back from ``/state``."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same_run

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 4
ARGS = (
    "--preset", "rotated",
    "--set", "data.samples_per_client=300",
    "--set", "server.clients_per_round=40",
    "--set", 'algorithm.name="cflgp"',
    "--set", "algorithm.num_clusters=0",
    "--set", "algorithm.period=2",
    "--set", "eval.every=2",
    "--set", 'run.progress="none"',
)  # fmt: skip


def args(rounds: int = ROUNDS) -> tuple[str, ...]:
    return (*ARGS, "--set", f"run.rounds={rounds}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """(W=1 run, torchrun W=3 run, W=1 run stopped after round 2 and resumed)."""
    tmp = tmp_path_factory.mktemp("cflgp")
    single, multi, resumed = helpers.alone_torchrun_resumed(tmp, args, ROUNDS)
    return single, multi, resumed


def test_the_gradient_profiles_find_the_four_rotations(runs):
    single, _, _ = runs
    with h5py.File(single, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        leaves = [x.decode() if isinstance(x, bytes) else str(x) for x in f["final/leaves"][()]]
        clusters = f["metrics/clusters"]
        rounds, clustered = clusters["round"][()], clusters["clustered"][()]
        profiled = clusters["profiled"][()]
    assert leaves == ["0", "1", "2", "3"]
    assert adjusted_rand_index(groups, assignment) == 1.0
    # both clustering rounds gave a result over all 40 profiled clients; others record none
    for t in (1, 3):
        assert (clustered[rounds == t] == 1.0).all() and profiled[rounds == t].sum() == 40
    assert np.isnan(clustered[(rounds == 2) | (rounds == 4)]).all()


def test_the_run_file_size_check_counts_the_profiles(runs):
    """The profiles /state keeps (M whole gradients a profiled client) are within what the
    algorithm declares for them, and the run file within the size check's estimate."""
    from distfl.algorithms.cflgp import CFLGP
    from distfl.runfile.reader import read_run_file
    from distfl.runtime.capacity import algorithm_params, run_file_bytes

    single, _, _ = runs
    config = read_run_file(single).config
    with h5py.File(single, "r") as f:
        held = f["state/algorithm/profile"].size * 8
        num_params = f["final/models"].shape[1]
    params = algorithm_params(config)  # num_clusters = 0: the 4 groups, as the run took it
    assert params.num_clusters == 4
    declared = CFLGP.state_bytes(params, num_clients=40, clients_per_round=40, rounds=ROUNDS,
                                 num_params=num_params)  # fmt: skip
    assert 0 < held <= declared
    assert single.stat().st_size <= run_file_bytes(config)


def test_torchrun_gives_the_same_bits(runs):
    single, multi, _ = runs
    assert_same_run(single, multi)


def test_resume_gives_the_same_bits(runs):
    single, _, resumed = runs
    assert_same_run(single, resumed)


def test_with_half_the_clients_a_round_missing_blocks_take_the_mean(helpers, tmp_path):
    """20 of 40 clients a round, 10 rounds: clients profiled in different clustering rounds
    hold different blocks; with a missing block taken as the mean of those that have it the
    rotations are found (with zeros there this federation reached ARI 0.60)."""
    out = tmp_path / "half.h5"
    sets = [a if a != "server.clients_per_round=40" else "server.clients_per_round=20"
            for a in args(rounds=10)]  # fmt: skip
    helpers.run_alone(tmp_path, *sets, "--out", str(out))
    with h5py.File(out, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        counts = f["state/algorithm/counts"][()]
    assert (counts == 0).any()  # some blocks were imputed
    assert adjusted_rand_index(groups, assignment) == 1.0


@pytest.mark.parametrize(
    ("preset", "items", "needle"),
    [
        ("rotated", ("algorithm.num_clusters=41",),
         "algorithm.num_clusters = 41: must be 0 (the number of data groups) or 1 to "
         "data.num_clients (40)"),
        ("rotated", ("algorithm.period=0",), "algorithm.period = 0: must be 1 to 1,000,000 rounds"),
        # 200,000 a round: the five clustering rounds profile all 1,000,000 clients, whose
        # Gram matrix and eigenvectors take 16 bytes a pair
        ("digits", ("data.num_clients=1000000", "server.clients_per_round=200000"),
         "algorithm cflgp keeps K×K matrices (16 bytes per pair of clients), 14901.6 GiB for "
         "1,000,000 clients"),
        # the whole-gradient profiles of the 1,000 clients the clustering rounds can profile
        # count as client models (4 blocks of 17 million parameters each, twice)
        ("digits", ("data.num_clients=20000", "server.clients_per_round=200",
                    "model.hidden=[4096, 4096]"),
         "the round's 16,600 client models"),
    ],
)  # fmt: skip
def test_an_impossible_value_is_refused_in_one_line_before_any_work(helpers, tmp_path, preset,
                                                                    items, needle):  # fmt: skip
    sets = [a for item in ('algorithm.name="cflgp"', *items) for a in ("--set", item)]
    out = tmp_path / "refused.h5"
    proc = helpers.cli(tmp_path, "run", "--preset", preset, *sets, "--out", str(out))
    assert_one_line_error(proc, needle)
    assert not out.exists()

"""FlexCFL finds the rotated-digits groups from its pre-training round (EDC and k-means,
given the true number of groups), clients first drawn later join theirs by cold start,
and the run is the same bits under torchrun (3 ranks, gloo) and when stopped half-way and
resumed from its run file.

Pre-training takes 24 of the 40 clients (``pretrain_scale`` 6 × 4 groups), so that the
rounds after it cold-start newcomers against the groups' latest updates, which a resumed
run reads back from ``/state``; η = 0.1 exercises the inter-group aggregation and
``migrate`` the migration rule (every drawn client sends its model)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from runfile import assert_same_run

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 4
SETS = (
    "--preset", "rotated",
    "--set", "data.samples_per_client=300",
    "--set", 'algorithm.name="flexcfl"',
    "--set", "algorithm.num_clusters=0",  # the true number of groups, 4
    "--set", "algorithm.pretrain_scale=6",
    "--set", "algorithm.eta=0.1",
    "--set", "algorithm.migrate=true",  # every drawn client's model travels, none moves
    "--set", "eval.every=2",
    "--set", 'run.progress="none"',
)  # fmt: skip


def args(rounds: int = ROUNDS) -> tuple[str, ...]:
    return (*SETS, "--set", f"run.rounds={rounds}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, helpers):
    """(W=1 run, torchrun W=3 run, W=1 run stopped after round 2 and resumed)."""
    tmp = tmp_path_factory.mktemp("flexcfl")
    single, multi, resumed = helpers.alone_torchrun_resumed(tmp, args, ROUNDS)
    return single, multi, resumed


def test_groups_found_by_edc_and_newcomers_cold_start_into_theirs(runs):
    single, _, _ = runs
    with h5py.File(single, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        leaves = [x.decode() if isinstance(x, bytes) else str(x) for x in f["final/leaves"][()]]
        clusters = f["metrics/clusters"]
        rank = clusters["edc_rank"][()]
        cluster = [x.decode() if isinstance(x, bytes) else str(x) for x in clusters["cluster"][()]]
        rounds = clusters["round"][()]
        cold = clusters["cold_started"][()]
        migrated = clusters["migrated"][()] if "migrated" in clusters else np.zeros(0)
    # four groups, then the leaf where the clients not yet drawn wait
    assert leaves == ["0", "1", "2", "3", "4"]
    waiting = leaves.index("4")
    first = (rounds == 1) & (np.array(cluster) == "4")
    assert rank[first].size == 1 and rank[first][0] >= 4  # a finite rank: a result
    placed = assignment != waiting
    assert placed.sum() > 24  # the 24 pre-training clients and newcomers since
    assert np.nansum(cold) == placed.sum() - 24
    assert adjusted_rand_index(groups[placed], assignment[placed]) == 1.0
    # the clients keep their data: no update points to another group than the client's own
    assert np.nansum(migrated) == 0


def test_torchrun_gives_the_same_bits(runs):
    single, multi, _ = runs
    assert_same_run(single, multi)


def test_resume_gives_the_same_bits(runs):
    single, _, resumed = runs
    assert_same_run(single, resumed)


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (("algorithm.num_clusters=41",),
         "algorithm.num_clusters = 41: must be 0 (the number of data groups) or 1 to "
         "data.num_clients (40)"),
        (("algorithm.eta=2",), "algorithm.eta = 2.0: must be between 0 and 1"),
    ],
)  # fmt: skip
def test_an_impossible_value_is_refused_in_one_line_before_any_work(helpers, tmp_path, items,
                                                                    needle):  # fmt: skip
    sets = [a for item in items for a in ("--set", item)]
    out = tmp_path / "refused.h5"
    proc = helpers.cli(tmp_path, "run", "--preset", "rotated", "--set",
                       'algorithm.name="flexcfl"', *sets, "--out", str(out))  # fmt: skip
    assert_one_line_error(proc, needle)
    assert not out.exists()

"""FedGWC at its defaults where the population is far larger than the cohort: 400 digits
clients, 10 a round (2.5%), 300 with the true labels and 100 that see them through one
permutation. ``auto`` picks observed entries and the round's reward here; the split test
waits until every client was sampled 3 times, then splits the root into the two groups
(ARI ≥ 0.9), in a real one-process run. What the run file shows of the rule: P kept as
observed entries (keys and values in /state), the valley test's statistics of the split
test, and no cluster of clients the test had not seen."""

from __future__ import annotations

import subprocess

import h5py
import numpy as np
import pytest
from timing import limit

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 240  # the split comes at round 226 for seed 0 (measured)


def _distfl(helpers, *args):
    proc = subprocess.run(
        helpers.distfl_cmd(*args), env=helpers.clean_env(), capture_output=True, text=True,
        timeout=limit(600),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory, helpers):
    out = tmp_path_factory.mktemp("sparse") / "sparse.h5"
    args = [
        "--set", 'algorithm.name="fedgwc"',
        "--set", "data.num_clients=400",
        "--set", "data.groups=[{count = 300, alpha = 1000.0}, "
                 "{count = 100, alpha = 1000.0, permute_labels = true}]",
        "--set", "server.clients_per_round=10",
        "--set", f"run.rounds={ROUNDS}",
        "--set", f"eval.every={ROUNDS}",
        "--set", "run.seed=0",
        "--set", 'run.progress="none"',
        "--out", str(out),
    ]  # fmt: skip
    helpers.run_alone(out.parent, *args)  # the code of distfl run, in this process
    return out


def test_the_defaults_split_the_groups(run):
    with h5py.File(run, "r") as f:
        groups = f["clients/group"][()]
        assignment = f["final/assignment"][()]
        root = f["hierarchy/0"]
        split_round = int(root.attrs["split_round"])
        children = sorted(n for n in f["hierarchy"] if f["hierarchy"][n].attrs["parent"] == "0")
    assert 0 < split_round <= ROUNDS
    assert children == ["0.0", "0.1"]
    assert adjusted_rand_index(groups, assignment) >= 0.9


def test_the_rule_is_the_observed_entries_and_the_valley_test(run):
    with h5py.File(run, "r") as f:
        state = f["state/algorithm"]
        leaves = [n for n in state["clusters"]]
        assert leaves and all("P_keys" in state["clusters"][n] for n in leaves)
        assert all("P" not in state["clusters"][n] for n in leaves)  # no K×K array
        c = f["metrics/clusters"]
        tested = np.isfinite(c["db"][()])
        first_test = int(c["round"][()][tested].min())
        # the split's test: a valley between the two proposed clusters deeper than the
        # uniform references' deepest
        at = tested & (c["round"][()] == int(f["hierarchy/0"].attrs["split_round"]))
        assert c["valley"][at][0] > c["valley_reference"][at][0]
    # no test before every client had been sampled 3 times: with 10 of 400 a round that
    # takes at least 3 · 400 / 10 rounds
    assert first_test >= 3 * 400 // 10


# ----------------------------------------------- above BLOCKS_ABOVE: P as the rounds that made it

LARGE_ROUNDS = 20


def _large_args(rounds: int, *out: str) -> list[str]:
    """2,100 digits clients (above BLOCKS_ABOVE), 10 a round, a split test from the
    first round (ε = 1, no wait for observations)."""
    return [
        "--set", 'algorithm.name="fedgwc"',
        "--set", "algorithm.epsilon=1.0",
        "--set", "algorithm.min_observations=0",
        "--set", "data.num_clients=2100",
        "--set", "data.groups=[{count = 1575, alpha = 1000.0}, "
                 "{count = 525, alpha = 1000.0, permute_labels = true}]",
        "--set", "server.clients_per_round=10",
        "--set", f"run.rounds={rounds}",
        "--set", f"eval.every={LARGE_ROUNDS // 2}",
        "--set", "run.seed=0",
        "--set", 'run.progress="none"',
        *out,
    ]  # fmt: skip


def test_a_large_cluster_keeps_its_rounds_and_resumes_to_the_bit(helpers, tmp_path):
    """The root of 2,100 clients keeps P as its rounds' sampled positions and rewards (no
    entry one by one), its split tests run on them, and a run stopped half-way and resumed
    from that state ends bit for bit where the uninterrupted run ends."""
    from runfile import assert_same_run

    full, half = tmp_path / "full.h5", tmp_path / "half.h5"
    helpers.run_alone(tmp_path, *_large_args(LARGE_ROUNDS, "--out", str(full)))
    helpers.run_alone(tmp_path, *_large_args(LARGE_ROUNDS // 2, "--out", str(half)))
    with h5py.File(half, "r") as f:
        root = f["state/algorithm/clusters/0"]
        assert {"P_pos", "P_first", "P_ptr", "P_multi_keys"} <= set(root)
        assert "P_keys" not in root and "P" not in root
        assert len(root["P_ptr"]) == LARGE_ROUNDS // 2 + 1  # one slice a round
        c = f["metrics/clusters"]
        assert np.isfinite(c["db"][()]).any()  # the tests ran on the rounds
    _distfl(helpers, *_large_args(LARGE_ROUNDS, "--resume", str(half)))
    assert_same_run(full, half)

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

from distfl.metrics import adjusted_rand_index

pytestmark = pytest.mark.integration

ROUNDS = 240  # the split comes at round 226 for seed 0 (measured)


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
    proc = subprocess.run(
        helpers.distfl_cmd(*args), env=helpers.clean_env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
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

"""What ``distfl run`` says of a key that takes no effect: a refused key is one line
``distfl: error: ...`` and exit code 2 before anything runs; a key the algorithm alone
leaves without effect (a scenario is meant for every algorithm) is one line
``distfl: warning: ...`` as the run starts, and the run goes on."""

from __future__ import annotations

import pytest
from cliproc import assert_one_line_error

pytestmark = pytest.mark.integration

#: a federation of six clients, three rounds
TINY = ("run.rounds=3", "data.num_clients=6", "data.samples_per_client=40",
        "train.local_steps=2", "eval.every=3", 'run.progress="none"')  # fmt: skip


def test_the_command_refuses_a_key_without_effect_in_one_line(helpers, tmp_path):
    proc = helpers.cli(tmp_path, "run", "--preset", "digits", "--set", "server.momentum=0.5",
                       "--out", tmp_path / "r.h5")  # fmt: skip
    assert_one_line_error(proc, "server.momentum = 0.5 has no effect with server.aggregator")
    assert not (tmp_path / "r.h5").exists()


def test_the_command_warns_of_a_key_the_algorithm_alone_leaves(helpers, tmp_path):
    sets = [x for item in (*TINY, 'algorithm.name="cfl"', "server.clients_per_round=2",
                           "run.sampling_seed=4") for x in ("--set", item)]  # fmt: skip
    proc = helpers.cli(tmp_path, "run", "--preset", "digits", *sets, "--out", tmp_path / "r.h5")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("distfl: warn")]
    assert warnings == [
        "distfl: warning: server.clients_per_round = 2 has no effect with algorithm.name = "
        "'cfl': every member of a cluster trains and reports every round, whatever the "
        "cohort size",
        "distfl: warning: run.sampling_seed = 4 has no effect with algorithm.name = 'cfl': it "
        "draws nothing: every member of a cluster trains every round",
    ]
    assert (tmp_path / "r.h5").exists()

"""``train.batches = "counter"`` in real runs: the default job (FedGWC on digits) gives the
same bits in one process, under torchrun (3 ranks, gloo), under mpiexec (3 ranks) and
stopped after round 2 and resumed; and it trains on other batches than ``stream`` (the
same config otherwise), to an accuracy of the same order."""

from __future__ import annotations

import numpy as np
import pytest
from runfile import assert_same_run, read_run

pytestmark = pytest.mark.integration

ROUNDS = 6


def args(rounds: int, batches: str = "counter") -> tuple[str, ...]:
    return ("--preset", "digits", "--set", f"run.rounds={rounds}", "--set", "eval.every=2",
            "--set", 'run.progress="none"', "--set", f'train.batches="{batches}"')  # fmt: skip


def test_the_same_bits_alone_under_torchrun_mpiexec_and_resumed(tmp_path, helpers):
    runs = helpers.alone_torchrun_resumed(tmp_path, args, ROUNDS)
    config = tmp_path / "c.toml"
    config.write_text('[run]\nprogress = "none"\n')
    mpi = helpers.launch_script("mpiexec.sh", tmp_path / "mpi.h5", config, *args(ROUNDS))
    for other in (*runs[1:], mpi):
        assert_same_run(runs[0], other)
    stream = tmp_path / "stream.h5"
    helpers.run_alone(tmp_path, *args(ROUNDS, "stream"), "--out", str(stream))
    a, b = read_run(runs[0]), read_run(stream)
    assert not np.array_equal(a["metrics/train_loss_last"], b["metrics/train_loss_last"])
    acc_a, acc_b = a["metrics/accuracy"][-1], b["metrics/accuracy"][-1]
    assert abs(acc_a - acc_b) < 0.15, (acc_a, acc_b)

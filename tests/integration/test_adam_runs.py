"""Runs with Adam and AdamW as the local optimiser: a run stopped after round k and resumed
from its run file ends bit for bit where the uninterrupted run ends (every client's
optimiser starts fresh each round, so the run file holds all a resume needs), and an AdamW
run under torchrun (3 ranks) writes the bits of the same run in one process."""

from __future__ import annotations

import os
import subprocess

import pytest
from runfile import assert_same_run
from timing import limit

from distfl.cli import main
from distfl.runfile.reader import read_run_file

pytestmark = pytest.mark.integration

ROUNDS = 4
# IFCA on two groups (one of permuted labels): its cluster models and assignments are
# state a resume must restore besides the models
TOML = """\
[run]
seed = 5
rounds = {rounds}
progress = "none"
[data]
num_clients = 8
samples_per_client = 40
groups = [{{count = 4, alpha = 1000.0}}, {{count = 4, alpha = 1000.0, permute_labels = true}}]
[train]
optimizer = "{optimizer}"
lr = 0.01
weight_decay = 0.01
prox_mu = 0.1
local_steps = 3
[server]
clients_per_round = 4
[algorithm]
name = "ifca"
num_clusters = 2
[eval]
every = 2
"""


def config(tmp_path, optimizer: str):
    path = tmp_path / f"{optimizer}.toml"
    path.write_text(TOML.format(rounds=ROUNDS, optimizer=optimizer))
    return path


def test_an_adam_run_resumed_after_round_k_has_the_uninterrupted_bits(helpers, tmp_path):
    toml = config(tmp_path, "adam")
    helpers.run_alone(tmp_path, "--config", str(toml), "--out", "full.h5")
    helpers.run_alone(tmp_path, "--config", str(toml), "--out", "part.h5",
                      "--set", f"run.rounds={ROUNDS // 2}")  # fmt: skip
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["run", "--resume", "part.h5", "--set", f"run.rounds={ROUNDS}"]) == 0
    finally:
        os.chdir(here)
    assert_same_run(tmp_path / "full.h5", tmp_path / "part.h5")
    stored = read_run_file(tmp_path / "part.h5", state=False).config
    assert (stored.train.optimizer, stored.run.rounds) == ("adam", ROUNDS)


def test_an_adamw_run_under_torchrun_has_the_bits_of_one_process(helpers, tmp_path):
    toml = config(tmp_path, "adamw")
    helpers.run_alone(tmp_path, "--config", str(toml), "--out", "one.h5")
    cmd = [helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
           "-m", "distfl", "run", "--config", str(toml), "--out", "three.h5"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=helpers.clean_env(), capture_output=True,
                          text=True, timeout=limit(600))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(tmp_path / "one.h5", tmp_path / "three.h5")

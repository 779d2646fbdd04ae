"""No completed round is lost to a worker killed before the first periodic checkpoint: a
worker rank killed (SIGKILL) under mpiexec, whose launcher then kills every rank, long
before the first periodic checkpoint leaves the file written after the first round;
``distfl status`` says the run stopped early and ``--resume`` completes it.

The run that never fails and the resume run in the test's process (``helpers.cli``; the
plug-in imported once for the module and forgotten after it), the launched world is real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from runfile import assert_same_run, fedgwc_toml, stored_round
from timing import limit

pytestmark = pytest.mark.integration

ROUNDS = 12
FAIL_ROUND = 7

PLUGIN = '''
import dataclasses
import os

import numpy as np

from distfl.algorithms import pooled, register
from distfl.algorithms.fedgwc import FedGWC
from distfl.algorithms.ifca import IFCA
from distfl.algorithms.losses_client import LossesClient
from distfl.errors import ConfigError


class PluginsOwn(BaseException):
    """A plug-in's own BaseException (what ``except Exception`` lets through)."""


RAISED = {
    "SystemExit(0)": lambda: SystemExit(0),
    "SystemExit(3)": lambda: SystemExit(3),
    "ConfigError": lambda: ConfigError("the plug-in refuses this round"),
    "PluginsOwn": lambda: PluginsOwn("a plug-in's own exception"),
}


def _raise_in(round_index):
    """What RAISE names, in round RAISE_ROUND, on rank RAISE_RANK (torchrun's RANK; any
    rank when unset)."""
    rank = os.environ.get("RAISE_RANK")
    if os.environ.get("RAISE_ROUND") == str(round_index) and (
        rank is None or os.environ.get("RANK") == rank
    ):
        raise RAISED[os.environ["RAISE"]]()


@register
class RaisingFedGWC(FedGWC):
    """FedGWC that raises at the end of its update of round RAISE_ROUND."""

    name = "raising_fedgwc"
    Params = FedGWC.Params

    def update(self, round_index, plan, reports):
        out = super().update(round_index, plan, reports)
        self.updated = round_index
        if os.environ.get("RAISE_IN") == "piece":
            self.pool.map(piece, {"round": np.array([round_index])}, 4, 1)
        else:
            _raise_in(round_index)
        return out

    def state_dict(self):
        """SystemExit(0) once the update of round STATE_RAISES has been made."""
        after = os.environ.get("STATE_RAISES")
        if after and getattr(self, "updated", 0) >= int(after):
            raise SystemExit(0)
        return super().state_dict()


@pooled
def piece(payload, i):
    """A pooled piece of RaisingFedGWC's update: its index, or RAISE in piece 2 of round
    RAISE_ROUND."""
    if i == 2:
        _raise_in(int(payload["round"][0]))
    return np.array([float(i)])


class RaisingLosses(LossesClient):
    """IFCA's client half, raising while it answers the probe of round RAISE_ROUND."""

    def run(self, op, client, models, args):
        _raise_in(args[0])
        return super().run(op, client, models, ())


@register
class RaisingIFCA(IFCA):
    """IFCA whose probe tells the client half its round."""

    name = "raising_ifca"
    Params = IFCA.Params
    client = RaisingLosses

    def plan_probe(self, round_index):
        request = super().plan_probe(round_index)
        if request is None:
            return None
        return dataclasses.replace(request, args=(round_index,))
'''

IFCA_TOML = """\
[run]
seed = 5
rounds = {rounds}
progress = "none"
plugins = ["raising.py"]
[data]
num_clients = 12
samples_per_client = 40
groups = [{{count = 6, alpha = 1000.0}}, {{count = 6, alpha = 1000.0, permute_labels = true}}]
[train]
local_steps = 3
[server]
clients_per_round = 6
[algorithm]
name = "raising_ifca"
num_clusters = 2
init = "random"
[eval]
every = 2
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory, helpers):
    """The folder with the plug-in and its configs, and the runs that never fail (in this
    process, whose environment names no RAISE_ROUND)."""
    tmp = tmp_path_factory.mktemp("plugin-failures")
    (tmp / "raising.py").write_text(PLUGIN)
    config = fedgwc_toml(ROUNDS, progress="none").replace(
        'name = "fedgwc"', 'name = "raising_fedgwc"'
    )
    (tmp / "fedgwc.toml").write_text(
        config.replace("[run]\n", '[run]\nplugins = ["raising.py"]\n', 1)
    )
    (tmp / "ifca.toml").write_text(IFCA_TOML.format(rounds=8))
    with helpers.plugins_forgotten():
        helpers.run_alone(tmp, "--config", "fedgwc.toml", "--out", str(tmp / "full.h5"))
        yield tmp


def _round_of(line: str) -> int:
    """The round of a progress line (``round      3/100000 | ...``), 0 for another line."""
    return int(line.split()[1].split("/")[0]) if line.startswith("round ") else 0


def test_a_worker_killed_under_mpiexec_before_the_first_checkpoint_leaves_the_file(setup, helpers):
    """An open-ended run (mpiexec, 3 ranks) whose rank 2 is killed after round 3, long
    before the first periodic checkpoint (checkpoint.seconds = 300): MPICH kills every
    rank, so no rank writes then; the file written after the first round is there, says it
    stopped early, and resumes (alone, to 12 rounds) to the bits of the run never killed."""
    mpiexec = helpers.venv_tool("mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip(f"no mpiexec next to {sys.executable}")
    pytest.importorskip("mpi4py")
    tmp = setup
    out = tmp / "killed.h5"
    args = ["--config", "fedgwc.toml", "--set", "run.rounds=100000", "--set", "eval.every=1",
            "--set", 'run.progress="lines"', "--set", "comm.timeout_s=3600",
            "--out", str(out)]  # fmt: skip
    full = tmp / "full-eval.h5"
    helpers.run_alone(tmp, "--config", "fedgwc.toml", "--set", "eval.every=1", "--out", str(full))
    proc = subprocess.Popen(
        [mpiexec, "-n", "3", *helpers.distfl_cmd(*args)], cwd=tmp, env=helpers.clean_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = helpers.LineReader(proc.stdout), helpers.LineReader(proc.stderr)
        third = stdout.wait_for(lambda line: _round_of(line) >= 3, limit(120))
        assert third is not None, stderr.text(0)
        (rank2,) = helpers.pids_with(str(out), env_item="PMI_RANK=2")
        os.kill(rank2, signal.SIGKILL)
        proc.wait(timeout=limit(60))
        deadline = time.monotonic() + limit(10)
        while helpers.pids_with(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        helpers.kill_tree([proc], marker=str(out))
    assert proc.returncode != 0
    printed = [_round_of(line) for line in stdout.text().splitlines() if _round_of(line)]
    kept = stored_round(out)  # the file is there, one /metrics row per round it holds
    assert 1 <= kept <= printed[-1], (kept, printed)
    status = helpers.cli(tmp, "status", str(out))
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout == f"{out}: stopped at round {kept} of 100000 (resume with --resume)\n"
    proc = helpers.cli(tmp, "run", "--resume", str(out), "--trust-plugins",
                       "--set", f"run.rounds={ROUNDS}")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(full, out)

"""No completed round is lost to what a plug-in raises, or to a worker killed before the
first periodic checkpoint.

- an algorithm plug-in's update raising in round 7 at W = 1, with what ``except Exception``
  does not catch (SystemExit with code 0 and 3, a BaseException of the plug-in's own) and
  with a distfl UserError (ConfigError): the run exits non-zero (a UserError with its own
  code, 2) in one line, the file holds rounds 1..6 and ``--resume`` ends on the bits of
  the run that never failed; a plug-in whose state cannot be read (``state_dict`` raising
  SystemExit(0)) or put back (``load_state_dict``) leaves the file written after round 1 as
  it was;
- the client half of an algorithm plug-in raising on worker rank 2 of a real torchrun world
  of 3: the worker reports it to the server, which writes the last completed round; one
  line names the rank and what it raised, with the UserError's exit code; so for a pooled
  piece of the server's work calling ``sys.exit(0)`` on a worker;
- a worker rank killed (SIGKILL) under mpiexec, whose launcher then kills every rank, long
  before the first periodic checkpoint: the file written after the first round is there,
  ``distfl status`` says the run stopped early and ``--resume`` completes it.

The runs that fail in one process and the resumes run in the test's process
(``helpers.cli``; the plug-in imported once for the module and forgotten after it), but
for the SystemExit(0), whose exit code is the point, the launched worlds and the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runfile import assert_same_run, fedgwc_toml, stored_round
from timing import limit

import distfl

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
from distfl.algorithms.common.losses_client import LossesClient
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

    def load_state_dict(self, state):
        """SystemExit(0) where LOAD_RAISES is set."""
        if os.environ.get("LOAD_RAISES"):
            raise SystemExit(0)
        return super().load_state_dict(state)


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

#: what each raised exception shows in the line, and the run's exit code
SHOWN = {
    "SystemExit(0)": ("SystemExit: 0", 1),
    "SystemExit(3)": ("SystemExit: 3", 1),
    "ConfigError": ("ConfigError: the plug-in refuses this round", 2),
    "PluginsOwn": ("PluginsOwn: a plug-in's own exception", 1),
}

DISTFL_DIR = os.path.dirname(os.path.abspath(distfl.__file__))
PAGE = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"


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
        helpers.run_alone(tmp, "--config", "ifca.toml", "--out", str(tmp / "ifca-full.h5"))
        yield tmp


def _resumed(helpers, tmp, out: Path, full: Path) -> None:
    """``distfl run --resume OUT --trust-plugins`` (in this process) exits 0 and ends on
    the bits of ``full``."""
    proc = helpers.cli(tmp, "run", "--resume", str(out), "--trust-plugins")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_same_run(full, out)


def _on_the_page(line: str, out: Path) -> None:
    """``line``, with ``out`` shown as ``run.h5``, is a block of docs/checkpoints.md."""
    trace = f"{out}.traceback.txt"
    shown = line.replace(trace, "run.h5.traceback.txt").replace(str(out), "run.h5")
    assert f"```\n{shown}\n```" in PAGE.read_text(), shown


def _round_of(line: str) -> int:
    """The round of a progress line (``round      3/100000 | ...``), 0 for another line."""
    return int(line.split()[1].split("/")[0]) if line.startswith("round ") else 0


def _the_line(out: Path, cause: str, fail_round: int, phase: str) -> str:
    trace = out.with_name(out.name + ".traceback.txt")
    return (
        f"distfl: error: round {fail_round} failed in {phase} ({cause}); {out} holds round "
        f"{fail_round - 1}: continue with distfl run --resume {out}; the traceback is in {trace}"
    )


@pytest.mark.parametrize("raised", ["SystemExit(0)", "SystemExit(3)", "ConfigError", "PluginsOwn"])
def test_what_a_plug_in_raises_in_a_round_keeps_every_completed_round(setup, helpers, raised):
    """Round 7's update raises: exit code 1 (2 for the ConfigError, a SystemExit's own code
    never), one line, the file holds rounds 1..6 (long before any periodic checkpoint) and
    resumes to the bits of the run that never failed."""
    tmp = setup
    out = tmp / f"failed-{raised}.h5"
    args = ["run", "--config", "fedgwc.toml", "--out", str(out)]
    env = {"RAISE_ROUND": str(FAIL_ROUND), "RAISE": raised}
    if raised == "SystemExit(0)":  # the exit code of the process itself
        proc = subprocess.run(
            [sys.executable, "-m", "distfl", *args], cwd=tmp, capture_output=True, text=True,
            env={**helpers.clean_env(), **env}, timeout=limit(300),
        )  # fmt: skip
    else:
        proc = helpers.cli(tmp, *args, env=env)
    shown, code = SHOWN[raised]
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stderr.strip() == _the_line(out, shown, FAIL_ROUND, "raising_fedgwc's update")
    trace = out.with_name(out.name + ".traceback.txt").read_text()
    assert shown.split(":")[0] in trace and "Traceback (most recent call last)" in trace
    assert stored_round(out) == FAIL_ROUND - 1
    _resumed(helpers, tmp, out, tmp / "full.h5")


def test_a_state_that_cannot_be_read_leaves_the_file_as_it_was(setup, helpers):
    """The plug-in's ``state_dict`` raises SystemExit(0) once round 3 is updated: in the copy
    before round 4, then in the failure's own write. The file written after round 1 stays
    as it was, the line says so (exit code 1), and it resumes to the bits of the run that
    never failed."""
    tmp = setup
    out = tmp / "unsaved.h5"
    args = ["run", "--config", "fedgwc.toml", "--out", str(out)]
    proc = helpers.cli(tmp, *args, env={"STATE_RAISES": "3"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert line == (
        "distfl: error: round 4 failed in the copy of the last completed round (SystemExit: "
        f"0); {out} could not be written (SystemExit: 0); {out} holds round 1: continue with "
        f"distfl run --resume {out}; the traceback is in {out}.traceback.txt"
    )
    _on_the_page(line, out)
    assert stored_round(out) == 1
    _resumed(helpers, tmp, out, tmp / "full.h5")


def test_a_state_that_cannot_be_put_back_is_never_written(setup, helpers):
    """Round 7's update raises a ConfigError, and the plug-in's ``load_state_dict`` raises
    SystemExit(0) as the copy of round 6 is put back: the state, a mix of both rounds, is
    not written; the file written after round 1 stays, the line says so (exit code 2), and
    it resumes to the bits of the run that never failed."""
    tmp = setup
    out = tmp / "mixed.h5"
    env = {"RAISE_ROUND": str(FAIL_ROUND), "RAISE": "ConfigError", "LOAD_RAISES": "1"}
    proc = helpers.cli(tmp, "run", "--config", "fedgwc.toml", "--out", str(out), env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f"distfl: error: round {FAIL_ROUND} failed in raising_fedgwc's update (ConfigError: "
        f"the plug-in refuses this round); round {FAIL_ROUND - 1} could not be put back "
        f"(SystemExit: 0); {out} holds round 1: continue with distfl run --resume {out}; the "
        f"traceback is in {out}.traceback.txt"
    )
    assert stored_round(out) == 1
    _resumed(helpers, tmp, out, tmp / "full.h5")


def test_a_worker_whose_plug_in_raises_under_torchrun_keeps_every_completed_round(setup, helpers):
    """IFCA's client half raises a ConfigError on rank 2 while it answers round 4's probe,
    in a real torchrun world of 3: the worker tells the server, which writes round 3; the
    only line of distfl names the rank and what it raised (no traceback of distfl's), every
    rank exits 2, and the file resumes (alone) to the bits of the run that never failed."""
    tmp = setup
    out = tmp / "worker.h5"
    cmd = [
        helpers.venv_tool("torchrun"), "--standalone", "--nproc-per-node", "3",
        "-m", "distfl", "run", "--config", "ifca.toml", "--out", str(out), "--comm", "torch",
    ]  # fmt: skip
    env = helpers.clean_env(RAISE_ROUND="4", RAISE="ConfigError", RAISE_RANK="2")
    proc = subprocess.Popen(
        cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=limit(300))
    finally:
        helpers.kill_tree([proc], marker=str(out))
    assert proc.returncode != 0, output
    lines = [line for line in output.splitlines() if line.startswith("distfl:")]
    cause = "rank 2: ConfigError: the plug-in refuses this round"
    assert lines == [_the_line(out, cause, 4, "the probe")], output
    _on_the_page(lines[0], out)
    # torchrun prints its own traceback and failure summary; none may come from distfl
    assert f'File "{DISTFL_DIR}' not in output, output
    assert "exitcode: 2" in output and "exitcode: 1" not in output, output
    trace = out.with_name(out.name + ".traceback.txt").read_text()
    # the worker's own traceback, through the plug-in's file
    assert "rank 2:" in trace and "raising.py" in trace and "refuses this round" in trace
    assert stored_round(out) == 3
    _resumed(helpers, tmp, out, tmp / "ifca-full.h5")


def test_a_pooled_piece_that_exits_on_a_worker_keeps_every_completed_round(setup, helpers):
    """Piece 2 of the pooled work in round 7's update calls ``sys.exit(0)`` on its worker
    (rank 1 of a world of 3 ranks, started as torchrun starts them): the worker tells the
    server, which writes round 6 and says so in rank 0's one line (exit code 1); the
    workers exit 0 and say nothing."""
    tmp = setup
    out = tmp / "pooled.h5"
    env = {"RAISE_ROUND": str(FAIL_ROUND), "RAISE": "SystemExit(0)", "RAISE_IN": "piece"}
    procs = helpers.start_ranks(
        ["--config", "fedgwc.toml", "--out", str(out)], tmp, 3, env=env
    )  # fmt: skip
    try:
        outs = [p.communicate(timeout=limit(300)) for p in procs]
    finally:
        helpers.kill_tree(procs, marker=str(out))
    assert [p.returncode for p in procs] == [1, 0, 0], [err for _, err in outs]
    phase = "raising_fedgwc's update"
    assert outs[0][1].strip() == _the_line(out, "rank 1: SystemExit: 0", FAIL_ROUND, phase)
    assert [err for _, err in outs[1:]] == ["", ""]
    assert stored_round(out) == FAIL_ROUND - 1
    _resumed(helpers, tmp, out, tmp / "full.h5")


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

"""The launch scripts run in the repository's .venv as ./run.sh does, with nothing
activated (a PATH without the venv: /usr/bin:/bin); with DISTFL_NO_VENV=1 they use the
environment on PATH and, where it lacks the command they need, stop with one line saying
how to get one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BARE = "/usr/bin:/bin"
TINY = ["--preset", "digits", "--set", "run.rounds=1", "--set", "data.num_clients=4",
        "--set", "server.clients_per_round=2", "--set", 'run.progress="none"']  # fmt: skip


def launch(helpers, script: str, cwd: Path, *args: str, **env: str):
    return subprocess.run(
        ["bash", str(ROOT / "launch" / script), *args], cwd=cwd,
        env=helpers.clean_env(PATH=BARE, **env), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=limit(300),
    )  # fmt: skip


@pytest.mark.skipif(sys.prefix != str(ROOT / ".venv"), reason="the tests run in another venv")
def test_torchrun_sh_runs_without_an_activated_venv(helpers, tmp_path):
    proc = launch(helpers, "torchrun.sh", tmp_path, *TINY, NPROC="1", OUT="w1.h5")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with h5py.File(tmp_path / "w1.h5", "r") as f:
        assert int(f.attrs["world_size"]) == 1


@pytest.mark.parametrize(
    ("script", "command"),
    [("local.sh", "distfl"), ("torchrun.sh", "torchrun"), ("mpiexec.sh", "no-such-python"),
     ("torchrun_multinode.sh", "torchrun")],
)  # fmt: skip
def test_without_the_venv_a_missing_command_is_one_line(helpers, tmp_path, script, command):
    proc = launch(helpers, script, tmp_path, DISTFL_NO_VENV="1", PYTHON="no-such-python",
                  NNODES="1", NODE_RANK="0", MASTER_ADDR="127.0.0.1")  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"{script}: {command} not found on PATH (DISTFL_NO_VENV is set: the environment "
        "you activated is used); activate the one where distfl is installed, or unset "
        "DISTFL_NO_VENV to use the repository's .venv"
    ]
    assert proc.stdout == "" and not list(tmp_path.iterdir())

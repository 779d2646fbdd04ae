"""The README's first quick-start command runs the main job and writes the run file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from timing import limit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)


@pytest.mark.skipif(
    not (VENV / ".distfl-stamp").exists(),
    reason="the suite runs outside the venv that ./test.sh makes; ./run.sh would build another",
)
def test_run_sh_prints_summary_and_writes_file(tmp_path):
    out = tmp_path / "quick.h5"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["DISTFL_VENV"] = str(VENV)
    proc = subprocess.run(
        ["bash", str(ROOT / "run.sh"), "--out", str(out), "--set", "run.rounds=3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit(300),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "final balanced accuracy" in proc.stdout
    assert "client-steps/s" in proc.stdout and "bytes moved per round" in proc.stdout
    with h5py.File(out, "r") as f:
        assert list(f["metrics/round"][()]) == [1, 2, 3]
        assert {"clients", "metrics", "final", "hierarchy"} <= set(f)


def test_console_script_and_module_agree(tmp_path):
    script = Path(sys.executable).parent / "distfl"
    a = subprocess.run([str(script), "keys"], capture_output=True, text=True, timeout=limit(60))
    b = subprocess.run(
        [sys.executable, "-m", "distfl", "keys"], capture_output=True, text=True, timeout=limit(60)
    )
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout
    for key in ("run.seed", "data.groups", "server.clients_per_round", "checkpoint.every"):
        assert key in a.stdout


def test_a_short_run_imports_nothing_it_does_not_use(tmp_path):
    """A round of the default job imports torch, NumPy and h5py, and none of scikit-learn,
    SciPy, POT, matplotlib, pandas, tensorboard or mpi4py: its start-up is torch's import
    and little more (docs/benchmarks.md, "Start-up")."""
    code = (
        "import sys\n"
        "from distfl.cli import main\n"
        "code = main(['run', '--set', 'run.rounds=1', '--set', 'run.progress=\"none\"',"
        " '--out', 'one.h5'])\n"
        "print(code, *sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=limit(300))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    status, *modules = proc.stdout.splitlines()[-1].split()
    assert status == "0" and {"torch", "numpy", "h5py"} <= set(modules)
    unused = {"sklearn", "scipy", "ot", "matplotlib", "pandas", "tensorboard", "mpi4py"}
    assert unused.isdisjoint(modules), sorted(unused & set(modules))

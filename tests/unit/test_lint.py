"""The code passes ruff (configured in pyproject.toml); ruff comes with the dev extra."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from timing import limit

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean():
    ruff = Path(sys.executable).parent / "ruff"
    exe = str(ruff) if ruff.exists() else shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (pip install 'distfl[dev]')")
    proc = subprocess.run(
        [exe, "check", "--output-format", "concise", "distfl", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit(120),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

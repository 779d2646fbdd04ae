"""Checks shared by the tests that run the ``distfl`` command as a process."""

from __future__ import annotations

import subprocess


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit code 2, no traceback, exactly one ``distfl: error: ...`` line on stderr holding
    every needle; returns that line."""
    err = proc.stderr
    assert proc.returncode == 2, f"exit code {proc.returncode}, stderr:\n{err}"
    assert "Traceback" not in err, err
    line = err.strip()
    assert line, "nothing on stderr"
    assert "\n" not in line, f"more than one line on stderr:\n{err}"
    assert line.startswith("distfl: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line

"""Checks shared by the tests that run the ``distfl`` command, as a process or through
``distfl.cli.main`` in the test's own."""

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


def assert_main_one_line_error(capsys, code: int, *needles: str) -> str:
    """As :func:`assert_one_line_error` for ``distfl.cli.main`` called in this process:
    ``code`` is what it returned, stderr what ``capsys`` caught."""
    err = capsys.readouterr().err
    return assert_one_line_error(
        subprocess.CompletedProcess(args=["distfl"], returncode=code, stderr=err), *needles
    )

"""The tests' time limits: the session's factor (tests/timing.py), and no limit in tests/
written as bare seconds, which a busy machine would overrun."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import timing

TESTS = Path(__file__).resolve().parents[1]

#: calls whose (keyword or second positional) argument is a limit in seconds
WAITS = {"wait_for": 1, "deadline": 0}


def _seconds(node: ast.AST) -> bool:
    """A number, or arithmetic on numbers only: seconds written out, not scaled."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _seconds(node.left) and _seconds(node.right)
    if isinstance(node, ast.UnaryOp):
        return _seconds(node.operand)
    return False


def _clock(node: ast.AST) -> bool:
    """``time.monotonic()``, ``time.time()`` or ``time.perf_counter()``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("monotonic", "time", "perf_counter")
    )


def bare_limits(source: str) -> list[int]:
    """The lines of ``source`` where a time limit is bare seconds: ``timeout=N`` (a call's
    keyword or a default), ``wait_for(pred, N)``, ``deadline(N)``, ``clock() + N``, and a
    comparison of ``clock() - t0`` with ``N``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "timeout" and _seconds(kw.value):
                    lines.append(node.lineno)
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            at = WAITS.get(name)
            if at is not None and len(node.args) > at and _seconds(node.args[at]):
                lines.append(node.lineno)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args
            defaulted = args[len(args) - len(node.args.defaults) :]
            pairs = list(zip(defaulted, node.args.defaults, strict=True))
            pairs += list(zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True))
            for arg, default in pairs:
                if "timeout" in arg.arg and default is not None and _seconds(default):
                    lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if _clock(node.left) and _seconds(node.right):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            left = node.left
            if (
                isinstance(left, ast.BinOp)
                and isinstance(left.op, ast.Sub)
                and _clock(left.left)
                and any(_seconds(c) for c in node.comparators)
            ):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_test_waits_a_bare_number_of_seconds():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "data" in path.relative_to(TESTS).parts or path.name == "test_time_limits.py":
            continue
        found += [f"{path.relative_to(TESTS)}:{n}" for n in bare_limits(path.read_text())]
    assert found == [], "limits in seconds not scaled by timing.limit(): " + ", ".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "subprocess.run(cmd, timeout=60)",
        "p.wait(timeout=2 * 30)",
        "def f(timeout=300): pass",
        "def f(*, join_timeout: float = 5.0): pass",
        "out.wait_for(lambda line: True, 60)",
        "deadline = time.monotonic() + 120",
        "assert time.monotonic() - t0 < 15",
        "with deadline(30): pass",
    ],
)
def test_the_check_finds_each_kind_of_bare_limit(code):
    assert bare_limits(code) == [1]


@pytest.mark.parametrize(
    "code",
    [
        "subprocess.run(cmd, timeout=limit(60))",
        "p.wait(timeout=HANG + EXIT)",
        "def f(timeout=None): pass",
        "out.wait_for(lambda line: True, limit(60))",
        "deadline = time.monotonic() + limit(120)",
        "assert time.monotonic() - t0 >= HANG - 1",
        "time.sleep(2.0)",
    ],
)
def test_the_check_leaves_scaled_limits(code):
    assert bare_limits(code) == []


def test_limit_scales_by_the_sessions_factor(monkeypatch):
    monkeypatch.setenv(timing.VARIABLE, "2.5")
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert timing.factor() == 2.5
    assert timing.limit(60) == 150.0


def test_a_load_that_rose_after_the_measurement_scales_the_limit(monkeypatch):
    """The load average per CPU at the time a limit is taken, when above the factor."""
    monkeypatch.setenv(timing.VARIABLE, "1.5")
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (8.0, 3.0, 1.0))
    assert timing.load_per_cpu() == 4.0
    assert timing.limit(60) == 240.0


@pytest.mark.parametrize("text", ["0.5", "fast", "nan", "inf", "", "-3"])
def test_an_override_below_one_or_not_a_number_is_refused(monkeypatch, text):
    monkeypatch.setenv(timing.VARIABLE, text)
    with pytest.raises(ValueError, match=f"{timing.VARIABLE}=.*a number of at least 1"):
        timing.factor()


def test_measured_once_and_left_for_the_processes_started_later(tmp_path):
    """Without the variable, the factor is measured (at least 1) and stored in the
    environment, where a child process finds it."""
    code = (
        "import os, subprocess, sys, timing\n"
        "os.environ.pop(timing.VARIABLE, None)\n"
        "value = timing.factor()\n"
        "assert value >= 1 and timing.how.startswith('measured'), (value, timing.how)\n"
        "child = subprocess.run([sys.executable, '-c', 'import timing; print(timing.factor())'],"
        " capture_output=True, text=True, check=True).stdout\n"
        "assert float(child) == value, (child, value)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True,
        timeout=timing.limit(60),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr

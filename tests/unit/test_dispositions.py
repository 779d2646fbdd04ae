"""The programs a test starts begin with the default action of every signal the tests send
(tests/dispositions.py), however the suite was started: under ``nohup`` (SIGHUP ignored),
under ``setsid -w`` (a session of its own, no terminal) or as a shell's background job
(SIGINT and SIGQUIT ignored); the pytest process itself keeps ignoring what it was started
ignoring."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import dispositions
import pytest
from timing import limit

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().relative_to(ROOT)
NAMES = {s.name for s in dispositions.SIGNALS}


def _started(argv: list[str], **kw) -> subprocess.Popen:
    """``argv`` started as the tests start programs (Popen returns once it has exec'd)."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, **kw)


@pytest.mark.parametrize("session", ["own session", "the test's session"])
def test_programs_a_test_starts_begin_with_the_default_dispositions(session):
    """Each signal of ``dispositions.SIGNALS``, neither ignored nor blocked in a program a
    test starts, ends it by its default action; a Python started so has its
    KeyboardInterrupt; the test process outlives each signal it was started ignoring."""
    for sig in dispositions.SIGNALS:
        proc = _started(["sleep", "infinity"], start_new_session=session == "own session")
        try:
            masks = dispositions.status_masks(proc.pid)
            assert not masks["SigIgn"] & NAMES, f"ignores {masks['SigIgn']}"
            assert not masks["SigBlk"] & NAMES, f"blocks {masks['SigBlk']}"
            proc.send_signal(sig)
            assert proc.wait(timeout=limit(10)) == -sig
        finally:
            proc.kill()
            proc.wait()
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    python = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=limit(30))  # fmt: skip
    assert python.stdout == "True\n", python.stderr
    kept = os.environ.get(dispositions.VARIABLE, "")
    for name in filter(None, kept.split(",")):
        os.kill(os.getpid(), signal.Signals[name])  # as nohup asked: this process goes on


def test_a_program_started_under_nohup_ignores_sighup():
    """The opposite, which a test asks for in the program's command: ``nohup`` (what
    test_resume.py's test of ``nohup distfl run`` starts) leaves SIGHUP ignored."""
    proc = subprocess.run(["nohup", "cat", "/proc/self/status"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=limit(30))  # fmt: skip
    assert dispositions.masks_of(proc.stdout)["SigIgn"] & NAMES == {"SIGHUP"}, proc.stderr


#: how a suite is started (the shell's words), and what it is started ignoring
STARTS = {
    "nohup": (["nohup"], {"SIGHUP"}),
    "setsid": (["setsid", "-w"], set()),
    # a background job of a shell without job control (``./test.sh &`` in a script)
    "background": (["bash", "-c", '"$@" & wait $!', "bash"], {"SIGINT", "SIGQUIT"}),
}


@pytest.mark.parametrize(
    ("start", "workers"), [("nohup", 0), ("setsid", 0), ("background", 0), ("nohup", 1)]
)
def test_the_suite_started_under_nohup_setsid_or_in_the_background(start, workers):
    """A pytest started as ``nohup``, ``setsid -w`` or a script's background job would, on
    the test above (in one process, and in an xdist worker): it passes, and its header names
    what the session was started ignoring."""
    prefix, ignored = STARTS[start]
    env = {k: v for k, v in os.environ.items() if k != dispositions.VARIABLE}
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(workers),
         f"{HERE}::test_programs_a_test_starts_begin_with_the_default_dispositions"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=limit(120),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "2 passed" in out, out
    header = [line for line in out.splitlines() if line.startswith("started with ")]
    named = {n for line in header for n in line.split(" ignored:")[0][13:].split(", ")}
    assert named == ignored, out

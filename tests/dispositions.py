"""The signal dispositions the suite gives the programs it starts.

A signal ignored by a process stays ignored in every program it starts (across fork and
exec), and the usual ways of running a long job leave some ignored: ``nohup`` ignores
SIGHUP, a shell runs a background job (``./test.sh &`` in a script) with SIGINT and SIGQUIT
ignored. The tests signal the processes they start and check what those do (distfl keeps
an ignored SIGHUP ignored, as ``nohup distfl run`` asks; a Python started with SIGINT
ignored installs no KeyboardInterrupt), so those processes must begin with the defaults,
whatever the suite itself was started with.

:func:`keep_ignoring_here` (tests/conftest.py calls it as the session starts, in pytest
and in each xdist worker) replaces each of :data:`SIGNALS` that the process was started
ignoring with a handler that does nothing. The pytest process still outlives the signal
(a closed terminal does not end a suite run under ``nohup``), and a handler, unlike an
ignored disposition, is reset to the default by exec: every program a test starts begins
with the default action of each. The names go in ``DISTFL_TEST_IGNORED_SIGNALS`` for the
xdist workers, which pytest starts with the defaults. A test that needs a program to start
with a signal ignored says so in the program's command (``nohup``, ``env
--ignore-signal=...``)."""

from __future__ import annotations

import os
import signal

#: the signals a test may send to a program it starts, or a shell may leave ignored
SIGNALS = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)

#: the variable that names the signals the session was started ignoring (for its workers)
VARIABLE = "DISTFL_TEST_IGNORED_SIGNALS"


def _do_nothing(signum, frame) -> None:
    """What an ignored signal does to the test process: nothing."""


def keep_ignoring_here() -> list[str]:
    """Each of :data:`SIGNALS` that this process found ignored, or that
    ``DISTFL_TEST_IGNORED_SIGNALS`` names, gets a handler that does nothing; returns their
    names (also left in that variable)."""
    named = set(filter(None, os.environ.get(VARIABLE, "").split(",")))
    kept = []
    for sig in SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN or sig.name in named:
            signal.signal(sig, _do_nothing)
            kept.append(sig.name)
    if kept:
        os.environ[VARIABLE] = ",".join(kept)
    return kept


def status_masks(pid: int | str = "self") -> dict[str, set[str]]:
    """The names of the signals process ``pid`` ignores (``SigIgn``), catches with a
    handler (``SigCgt``) and blocks (``SigBlk``), from /proc/PID/status."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return masks_of(f.read())


def masks_of(status: str) -> dict[str, set[str]]:
    """:func:`status_masks` from the text of a /proc/PID/status."""
    masks = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigCgt", "SigBlk"):
            bits = int(value, 16)
            masks[key] = {s.name for s in signal.Signals if bits >> (s - 1) & 1}
    return masks

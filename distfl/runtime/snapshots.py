"""The server's copy of the last completed round, taken before each round changes the live
state: a round that raises, or that a stop signal abandons, falls back to it, and the run
file is written from it (:mod:`distfl.runtime.failures`).

A copy is taken while it costs at most :attr:`RoundSnapshots.SHARE` of a round
(:attr:`RoundSnapshots.FREE_S` seconds are always allowed); the copies stop after
:attr:`RoundSnapshots.STRIKES` rounds in a row over that budget (one copy that the OS paused
on a busy machine is no reason to give up the safety net), and the periodic checkpoint
covers such runs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distfl.runtime.run_state import RunState


class RoundSnapshots:
    """Takes and weighs the copies of the run's state (:meth:`RunState.snapshot
    <distfl.runtime.run_state.RunState.snapshot>`; :meth:`RunState.put_back
    <distfl.runtime.run_state.RunState.put_back>` puts one back)."""

    #: the share of a round a copy may cost, the seconds always allowed, and the rounds in a
    #: row over that budget after which no copy is taken any more
    SHARE = 0.05
    FREE_S = 0.01
    STRIKES = 3

    def __init__(self) -> None:
        self.enabled = True
        self.strikes = 0  # rounds in a row whose copy cost too much
        self.copy_s = 0.0  # seconds the last copy took

    def take(self, state: RunState) -> dict | None:
        """What a run file of the last completed round needs, copied before a round changes
        it (None once copying costs too much)."""
        if not self.enabled:
            return None
        started = time.perf_counter()
        saved = state.snapshot()
        self.copy_s = time.perf_counter() - started
        return saved

    def weigh(self, round_s: float) -> None:
        """Count the last copy against a round of ``round_s`` seconds."""
        if not self.enabled:
            return
        if self.copy_s > max(self.FREE_S, self.SHARE * round_s):
            self.strikes += 1
            self.enabled = self.strikes < self.STRIKES
        else:
            self.strikes = 0


__all__ = ["RoundSnapshots"]

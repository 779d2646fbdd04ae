"""The server's clocks: when the rounds' loop began, the seconds of the rounds before a
resume, what the last round's training and update took (the checkpoint's estimate of the
next round), the client-steps trained, and each worker's time this round (the
/timing/workers rows)."""

from __future__ import annotations

import time

import numpy as np

from distfl.runtime.protocol import WORKER_FIELDS


class RoundTiming:
    """The run's timing, as the server measures it and the components read it."""

    def __init__(self) -> None:
        #: when this process's loop of rounds began: Unix time (/timing@loop_started) and
        #: perf_counter() (the rounds' elapsed seconds and rate count from it)
        self.loop_started = 0.0
        self.loop_clock = 0.0
        #: seconds of the rounds before this process (the resumed file's last elapsed_s)
        self.elapsed_before = 0.0
        #: measured seconds of the last round's training step and update, and the clients it
        #: trained (the pre-round checkpoint's estimate of a round)
        self.train_s = 0.0
        self.update_s = 0.0
        self.clients_trained = 0
        #: client-steps of local training this process's rounds ran
        self.client_steps = 0
        #: per worker rank, this round's clients, train s, busy s, materialised clients,
        #: cache MiB and peak RSS (the steps' timing rows, summed), and the server's pooled
        #: tasks it computed and their seconds
        self.round_workers: dict[int, np.ndarray] = {}

    def start_loop(self) -> None:
        self.loop_started = time.time()
        self.loop_clock = time.perf_counter()

    def since_loop(self, now: float) -> float:
        """Seconds from the loop's start to ``now`` (a perf_counter() reading)."""
        return now - self.loop_clock

    def elapsed(self, now: float) -> float:
        """Seconds since the run's first round (across resumes) at ``now``."""
        return self.elapsed_before + now - self.loop_clock

    def add_step_row(self, row: np.ndarray) -> None:
        """A worker's timing row of a step (distfl.runtime.protocol.run_step): rank,
        clients, train s, busy s, clients materialised, cache MiB, peak RSS, stop."""
        acc = self.round_workers.setdefault(int(row[0]), np.zeros(WORKER_FIELDS))
        acc[:3] += row[1:4]  # clients, train s, busy s
        acc[3] += row[4]  # clients materialised
        acc[4:6] = row[5:7]  # cache MiB and peak RSS at the step's end

    def add_pooled(self, rank: int, tasks: int, seconds: float) -> None:
        """``tasks`` of the server's pooled work that ``rank`` computed in ``seconds``."""
        acc = self.round_workers.setdefault(rank, np.zeros(WORKER_FIELDS))
        acc[6] += tasks
        acc[7] += seconds


__all__ = ["RoundTiming"]

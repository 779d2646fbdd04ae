"""When the run file is first written: after the first round a process completes (a run,
or a resume) with ``checkpoint.seconds`` > 0, then only after ``checkpoint.seconds`` or
every ``checkpoint.every`` rounds; with both at 0, only at the end."""

from __future__ import annotations

import time
from types import SimpleNamespace

from distfl.config import Config
from distfl.config.schema import CheckpointSection, RunSection
from distfl.runtime.components import Checkpoint


def _server(rounds: int = 10, every: int = 0, seconds: float = 300.0) -> SimpleNamespace:
    """What Checkpoint.due reads of a server: its config and whether a signal stops it."""
    config = Config(
        run=RunSection(rounds=rounds), checkpoint=CheckpointSection(every=every, seconds=seconds)
    )
    return SimpleNamespace(config=config, stopping=lambda t: False)


def _due(checkpoint: Checkpoint, server, rounds: range) -> list[int]:
    """The rounds after which the checkpoint writes (a write takes no time here)."""
    written = []
    for t in rounds:
        if checkpoint.due(server, t):
            written.append(t)
            checkpoint.wrote, checkpoint.last_write = True, time.perf_counter()
    return written


def test_the_first_round_of_a_process_is_written():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()  # the loop's start
    assert _due(checkpoint, _server(), range(1, 10)) == [1]


def test_a_resumed_process_writes_after_its_first_round_too():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()
    assert _due(checkpoint, _server(rounds=40), range(21, 30)) == [21]


def test_every_counts_rounds_besides():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()
    assert _due(checkpoint, _server(every=4), range(1, 10)) == [1, 4, 8]


def test_seconds_passed_since_the_last_write():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()
    server = _server(seconds=0.05)
    assert _due(checkpoint, server, range(1, 3)) == [1]
    checkpoint.last_write -= 0.06  # 60 ms since the write after round 1
    assert _due(checkpoint, server, range(3, 5)) == [3]


def test_with_neither_the_file_is_written_at_the_end_only():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()
    assert _due(checkpoint, _server(seconds=0.0), range(1, 10)) == []


def test_not_after_the_last_round_which_the_end_writes():
    checkpoint = Checkpoint()
    checkpoint.last_write = time.perf_counter()
    assert _due(checkpoint, _server(rounds=1), range(1, 2)) == []

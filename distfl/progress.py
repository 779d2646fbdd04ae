"""Rank 0's progress display: a redrawn bar on a terminal, plain lines in logs."""

from __future__ import annotations

import math
import sys
from typing import TextIO


class Progress:
    def __init__(self, total: int, mode: str = "auto", stream: TextIO | None = None):
        self.total = total
        self.stream = stream or sys.stdout
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.every = max(1, total // 10)
        self.width = 24

    def update(
        self, round_index: int, *, clusters: int, accuracy: float, rounds_per_s: float
    ) -> None:
        if self.mode == "none":
            return
        acc = "  -  " if math.isnan(accuracy) else f"{accuracy:.3f}"
        text = (
            f"round {round_index:>{len(str(self.total))}}/{self.total} | clusters {clusters} "
            f"| acc {acc} | {rounds_per_s:.2f} rounds/s"
        )
        if self.mode == "bar":
            done = round(self.width * round_index / self.total)
            bar = "#" * done + "." * (self.width - done)
            self.stream.write(f"\r[{bar}] {text}")
            if round_index == self.total:
                self.stream.write("\n")
        elif round_index % self.every == 0 or round_index == self.total or not math.isnan(accuracy):
            self.stream.write(text + "\n")
        self.stream.flush()


class QuietOnBrokenPipe:
    """A text stream that stops writing, without an error, once its reader has gone away
    (``distfl run ... | head -3``): the run goes on and its run file is written."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def _gone(self) -> None:
        self.broken = True
        if self._stream is sys.stdout:
            stdout_to_devnull()  # what stdout still buffers goes nowhere at exit


def stdout_to_devnull() -> None:
    """Point file descriptor 1 at /dev/null, so that what stdout still buffers (flushed at
    exit) goes nowhere instead of raising BrokenPipeError again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor
        pass

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

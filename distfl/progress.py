"""Rank 0's progress display: a redrawn bar on a terminal, plain lines in logs."""

from __future__ import annotations

import math
import sys
from typing import TextIO


class Progress:
    """One line per round as the round ends: the round, the clusters, the round's mean
    training loss (the last local step's, over the clients that trained), the latest
    evaluated balanced accuracy with the round that measured it (carried forward between
    evaluations), the rate and the time left at that rate. ``bar``: redrawn in place with a
    bar; ``lines``: a line every tenth of the run, at each evaluation and at the end;
    ``none``: nothing; ``auto``: ``bar`` on a terminal, else ``lines``."""

    def __init__(self, total: int, mode: str = "auto", stream: TextIO | None = None):
        self.total = total
        self.stream = stream or sys.stdout
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.every = max(1, total // 10)
        self.width = 24
        self.accuracy = math.nan  # the latest evaluated accuracy, and its round
        self.accuracy_round = 0
        self.eval_shown = -math.inf  # seconds into the evaluation of its last line

    def line(
        self, round_index: int, *, clusters: int, accuracy: float, rounds_per_s: float,
        loss: float = math.nan, sim_s: float = math.nan,
    ) -> str:  # fmt: skip
        """The text of round ``round_index``'s line (``accuracy``: NaN in a round without
        evaluation, which shows the last one measured; ``sim_s``: the virtual clock, NaN
        without one)."""
        return " | ".join(self.fields(round_index, clusters=clusters, accuracy=accuracy,
                                      rounds_per_s=rounds_per_s, loss=loss,
                                      sim_s=sim_s).values())  # fmt: skip

    def fields(
        self, round_index: int, *, clusters: int, accuracy: float, rounds_per_s: float,
        loss: float = math.nan, sim_s: float = math.nan,
    ) -> dict[str, str]:  # fmt: skip
        """The fields of round ``round_index``'s line by name (round, clusters, loss, acc,
        sim: the virtual clock's time when the run has one, rate, eta), in the line's
        order."""
        if not math.isnan(accuracy):
            self.accuracy, self.accuracy_round = accuracy, round_index
        acc = (
            "  -  " if math.isnan(self.accuracy)
            else f"{self.accuracy:.3f}" + ("" if self.accuracy_round == round_index
                                          else f" (round {self.accuracy_round})")
        )  # fmt: skip
        left = (self.total - round_index) / rounds_per_s if rounds_per_s > 0 else math.nan
        return {
            "round": f"round {round_index:>{len(str(self.total))}}/{self.total}",
            "clusters": f"clusters {clusters}",
            "loss": f"loss {loss:.4f}",
            "acc": f"acc {acc}",
            **({} if math.isnan(sim_s) else {"sim": f"simulated {duration(sim_s)}"}),
            "rate": f"{rounds_per_s:.2f} rounds/s",
            "eta": f"ETA {duration(left)}",
        }

    def update(
        self, round_index: int, *, clusters: int, accuracy: float, rounds_per_s: float,
        loss: float = math.nan, sim_s: float = math.nan,
    ) -> None:  # fmt: skip
        if self.mode == "none":
            return
        fields = self.fields(round_index, clusters=clusters, accuracy=accuracy,
                             rounds_per_s=rounds_per_s, loss=loss, sim_s=sim_s)  # fmt: skip
        if self.mode == "bar":
            text = fit(fields, terminal_columns(self.stream), done=round_index / self.total,
                       width=self.width)  # fmt: skip
            self.stream.write(f"\r{text}\x1b[K")  # (erase what a longer line left)
            if round_index == self.total:
                self.stream.write("\n")
        elif round_index % self.every == 0 or round_index == self.total or not math.isnan(accuracy):
            self.stream.write(" | ".join(fields.values()) + "\n")
        self.stream.flush()

    #: an evaluation's progress is shown once it has run this long, then (``lines``) every
    #: EVAL_EVERY_S seconds
    EVAL_AFTER_S = 1.0
    EVAL_EVERY_S = 10.0

    def evaluation_line(self, round_index: int, done: int, total: int, seconds: float) -> str:
        """The text of a line during round ``round_index``'s evaluation."""
        return " | ".join(self.evaluation_fields(round_index, done, total, seconds).values())

    def evaluation_fields(
        self, round_index: int, done: int, total: int, seconds: float
    ) -> dict[str, str]:
        """The fields of :meth:`evaluation_line` by name (round, clients, rate, eta)."""
        rate = done / seconds if seconds > 0 else math.nan
        left = (total - done) / rate if rate > 0 else math.nan
        return {
            "round": f"round {round_index:>{len(str(self.total))}}/{self.total}",
            "clients": f"evaluating {done:,}/{total:,} clients",
            "rate": f"{rate:,.0f} clients/s",
            "eta": f"ETA {duration(left)}",
        }

    def evaluation(self, round_index: int, done: int, total: int, seconds: float) -> None:
        """An evaluation that has run for ``seconds``, ``done`` of ``total`` clients: shown
        after EVAL_AFTER_S (``bar``: redrawn; ``lines``: a line every EVAL_EVERY_S)."""
        if self.mode == "none" or seconds < self.EVAL_AFTER_S or done >= total:
            if done >= total:
                self.eval_shown = -math.inf
            return
        if self.mode == "lines" and seconds - self.eval_shown < self.EVAL_EVERY_S:
            return
        self.eval_shown = seconds
        fields = self.evaluation_fields(round_index, done, total, seconds)
        if self.mode == "bar":
            text = fit(fields, terminal_columns(self.stream))
            self.stream.write(f"\r{text}\x1b[K")
        else:
            self.stream.write(" | ".join(fields.values()) + "\n")
        self.stream.flush()


#: what a bar's frame gives up, in turn, until it fits its terminal (:func:`fit`):
#: a shorter bar, the round of a carried-forward accuracy, the rate, the bar, the loss, the
#: clusters, the accuracy, the time left (an evaluation's line: its rate, the time left,
#: the clients evaluated); the round stays
FIT_ORDER = ("bar", "acc-round", "rate", "sim", "bar", "loss", "clusters", "acc", "eta", "clients")
#: the bar's width once it has to make room
BAR_NARROW = 10


def fit(fields: dict[str, str], columns: int, *, done: float | None = None, width: int = 0) -> str:
    """A bar's frame: a bar ``width`` wide filled to ``done`` (a fraction; None: no bar),
    then ``fields`` joined, fitted to a terminal of ``columns`` (0: width unknown, no limit)
    by the steps of :data:`FIT_ORDER` in turn, whole fields at a time; only a terminal
    narrower than the first field cuts it."""
    fields = dict(fields)
    room = columns - 1 if columns > 0 else None  # (text in the last column may wrap)
    width = width if done is not None else 0

    def text() -> str:
        filled = round(width * (done or 0.0))
        bar = f"[{'#' * filled}{'.' * (width - filled)}] " if width else ""
        return bar + " | ".join(fields.values())

    for step in FIT_ORDER:
        if room is None or len(text()) <= room:
            break
        if step == "bar":  # first narrower, then none
            width = BAR_NARROW if width > BAR_NARROW else 0
        elif step == "acc-round" and "acc" in fields:
            fields["acc"] = fields["acc"].split(" (round")[0]
        else:
            fields.pop(step, None)
    return text()[:room]


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal that ``stream`` writes to: ``COLUMNS`` when set (as
    :func:`shutil.get_terminal_size` reads it), else the terminal's own; 0 when not known
    (a file, a pipe): no limit."""
    import os

    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # no file descriptor, or not a terminal
        return 0


def duration(seconds: float) -> str:
    """``seconds`` for a person: ``0 s``, ``42 s``, ``3m05s``, ``2h07m``; ``-`` when not
    known."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


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

    def fileno(self) -> int:
        return self._stream.fileno()

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

"""Stop signals: how a run learns of SIGTERM, SIGUSR1, SIGINT (Ctrl-C) and SIGHUP (a closed
terminal), and where it acts on one.

The handler (:class:`StopFlag`) records the signal's name. What happens next depends on the
work in progress (``docs/checkpoints.md`` has the table):

- the server's own work inside a round (the algorithm's plan and update, its pooled work in
  one process, the evaluation's bookkeeping) is *abandonable* while the server holds a copy
  of the last completed round: the handler raises :class:`StopNow` at once, the server puts
  the copy back and writes it;
- a step over the world (a broadcast, a reduce, a gather) is *shielded*: every rank leaves
  it together, and the stop is acted on as the step ends. Inside a step each worker
  checks the flag between local steps of training, between rows of a probe and between
  the tasks of a pooled job; an evaluation is cut into steps of about a second;
- a write of the run file always completes;
- a second Ctrl-C raises KeyboardInterrupt wherever the run is (at the end of a write in
  progress): the server writes what it holds of the last completed round and exits with
  code 130; further Ctrl-Cs while it does so are ignored (:meth:`StopFlag.keeping`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

#: SIGHUP: the terminal closed or the ssh session dropped
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
#: stop signals left ignored where the process found them ignored: ``nohup distfl run``
#: asks for a run that outlives its terminal (torchrun's and mpiexec's ranks get SIGHUP's
#: default action, so they handle it)
KEPT_IGNORED = (signal.SIGHUP,)


class StopNow(BaseException):
    """A stop signal inside work the server abandons (a BaseException, so that a plug-in's
    ``except Exception`` does not swallow it)."""


class StopFlag:
    """Set by a stop signal: ``name`` is the signal's name once one came.

    A worker reads it before each local step of a round that may be given up, between the
    rows of a probe and between pooled tasks, and reports it with its step's timing row;
    the server reads it between the steps of a round. Inside :meth:`abandonable` work the
    signal raises :class:`StopNow`; :meth:`shielded` work (the collectives) never sees it
    raised. A second SIGINT raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._abandonable = 0  # depth of abandonable work, 0 inside a shield
        self._writing = 0  # depth of writes of the run file in progress
        self._interrupt_pending = False  # a second Ctrl-C during a write

    def __call__(self, signum: int, _frame) -> None:
        if signum == signal.SIGINT and self.name == "SIGINT":
            if self._writing:  # the write completes first (it takes seconds at most)
                self._interrupt_pending = True
                return
            raise KeyboardInterrupt
        self.name = signal.Signals(signum).name
        if self._abandonable:
            raise StopNow

    @contextlib.contextmanager
    def abandonable(self, allowed: bool = True) -> Iterator[None]:
        """Work that a stop signal ends at once (StopNow), also when the signal came before
        it began; with ``allowed`` false (the server holds no copy of the last round),
        work that runs to its end."""
        if not allowed:
            with self.shielded():
                yield
            return
        self._abandonable += 1
        try:
            self.check()
            yield
        finally:
            self._abandonable -= 1

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Work that a signal does not interrupt (every rank leaves a collective together);
        inside abandonable work, the stop is acted on as it ends."""
        depth, self._abandonable = self._abandonable, 0
        try:
            yield
        finally:
            self._abandonable = depth
        self.check()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A write of the run file: neither a stop nor a second Ctrl-C interrupts it (a
        KeyboardInterrupt inside HDF5's own callbacks would not even reach the run); a
        second Ctrl-C during it is raised as it ends."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
        if self._interrupt_pending and not self._writing:
            self._interrupt_pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        """The last completed round put back and written as the run ends on an interrupt or
        a failure: a further Ctrl-C neither interrupts it nor is raised after it (the run
        is ending already)."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing:
                self._interrupt_pending = False

    @property
    def abandoning(self) -> bool:
        """Whether the work in progress is abandonable (outside any shield)."""
        return self._abandonable > 0

    def settle(self) -> None:
        """No work is abandonable any more (the server is writing what it holds)."""
        self._abandonable = 0

    def check(self) -> None:
        """Raise StopNow when a signal came and the work in progress is abandonable."""
        if self.name and self._abandonable:
            raise StopNow


@contextlib.contextmanager
def stop_signals(flag: StopFlag, *, after: str = "restore") -> Iterator[None]:
    """``flag`` handles the stop signals inside the block (but SIGHUP where it is ignored,
    as under ``nohup``: it stays ignored). After it, ``after = "restore"``
    puts back the handlers there were (the Python API: a notebook keeps its Ctrl-C);
    ``"ignore"`` (the command line, whose process is about to exit) ignores them, so that a
    signal during the process's teardown does not turn a finished run's exit code into a
    signal's."""
    previous = {}
    try:
        for sig in STOP_SIGNALS:
            if sig in KEPT_IGNORED and signal.getsignal(sig) == signal.SIG_IGN:
                continue
            previous[sig] = signal.signal(sig, flag)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if after == "ignore" else handler)


__all__ = ["KEPT_IGNORED", "STOP_SIGNALS", "StopFlag", "StopNow", "stop_signals"]

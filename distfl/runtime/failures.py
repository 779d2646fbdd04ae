"""What the server does when a round does not complete: a round that raises (any exception
of a plug-in's, SystemExit and a UserError included; a dead rank; a worker whose tasks
raised) fails the run in one line, a KeyboardInterrupt ends it, a diverged model stops it;
each time the run file is written with the last completed round first (the live state when
it is a completed round's, else the snapshot of the round before:
:mod:`distfl.runtime.snapshots`), and the line says what the file holds and how to
continue it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NoReturn, Protocol

from distfl.errors import CommError, DivergedError, Interrupted, RoundFailed
from distfl.runfile.atomic import RunFileWriteError
from distfl.runfile.output import keep_traceback
from distfl.runtime.components import OnDisk, write_server
from distfl.runtime.protocol import WorkerRaised, failure_exit_code
from distfl.text import exception_line, printable

if TYPE_CHECKING:
    from distfl.config import Config
    from distfl.runtime.run_state import RunState
    from distfl.runtime.stopping import StopFlag


class FailingServer(Protocol):
    """What the failure handling uses of the server (:class:`distfl.runtime.server.Server`),
    besides what the checkpoint writes (:func:`~distfl.runtime.components.write_server`)."""

    config: Config
    stop: StopFlag
    state: RunState
    phase: str  # what the round was doing
    file: OnDisk  # the run file: the round it holds

    def stop_workers(self, *, reports: bool = False) -> dict[int, dict]: ...


class WorkerTraceback(Exception):
    """The traceback of what a worker's tasks raised, as the worker sent it (kept as the
    cause of :class:`~distfl.runtime.protocol.WorkerRaised` in ``RUN.h5.traceback.txt``)."""


class RoundFailures:
    """The server's failure handling; ``world`` (distfl.comm.world.describe_world) says
    where each rank runs and its process id, which name a rank that died."""

    def __init__(self, world: dict | None) -> None:
        self.rank_pids: list[int] = list((world or {}).get("pid", []))
        self.hosts: list[str] = list((world or {}).get("host") or [])

    def keep_last_round(self, server: FailingServer, saved: dict | None) -> str:
        """Put the last completed round on disk, as far as the server holds it: the live
        state when it is a completed round's, else the snapshot ``saved`` of the round
        before the one in progress; the file is not written again when it holds that round
        already. Returns what the run file holds, for a one-line message ("run.h5 holds
        round 6"). A snapshot that cannot be put back (a plug-in's ``load_state_dict``
        raised) or a write that raises (a plug-in's ``state_dict``) leaves the file as it
        was, and the message says so."""
        server.stop.settle()  # nothing is abandoned any more: this write completes
        out = server.config.run.out
        failed = ""
        with server.stop.keeping():  # a further Ctrl-C is ignored until it is on disk
            if server.state.complete_round is None and saved is not None:
                try:
                    server.state.put_back(saved)
                except BaseException as exc:  # the live state stays a mix: never written
                    failed = (
                        f"round {saved['round']} could not be put back ({exception_line(exc)}); "
                    )
            complete = server.state.complete_round
            if complete is not None and complete != server.file.rounds_written:
                try:
                    write_server(server)
                except RunFileWriteError as exc:
                    return f"{out} was not written ({exc})"
                except BaseException as exc:  # the file on disk is as it was
                    failed += f"{out} could not be written ({exception_line(exc)}); "
        if server.file.rounds_written is None:
            return f"{failed}no run file was written"
        return f"{failed}{out} holds round {server.file.rounds_written}"

    @staticmethod
    def resume_hint(server: FailingServer) -> str:
        written = server.file.rounds_written
        if written is not None and written < server.config.run.rounds:
            return f": continue with distfl run --resume {server.config.run.out}"
        return ""

    def fail(
        self, server: FailingServer, t: int, exc: BaseException, saved: dict | None
    ) -> NoReturn:
        """Round ``t`` raised ``exc`` in ``server.phase``: the run file is written with the
        last completed round (:meth:`keep_last_round`), the workers are stopped (unless a
        rank died: the world is broken; a worker whose tasks raised sends what they raised
        as it stops), the traceback goes to ``RUN.h5.traceback.txt``, and RoundFailed says
        so in one line, with the exit code of the failure
        (:func:`~distfl.runtime.protocol.failure_exit_code`: a UserError's own, else 1)."""
        kept = self.keep_last_round(server, saved)
        code = failure_exit_code(exc)
        if isinstance(exc, CommError):
            cause = f"{_first_line(exc)}; {self.lost_ranks()}"
        elif isinstance(exc, WorkerRaised):
            cause, code, exc = self._worker_failure(server, exc)
        else:
            try:
                server.stop_workers()
            except Exception:
                pass  # a broken world: the launcher ends the other ranks
            cause = exception_line(exc)
        told = keep_traceback(server.config.run.out, f"round {t} failed in {server.phase}", exc)
        failed = RoundFailed(
            f"round {t} failed in {server.phase} ({cause}); {kept}{self.resume_hint(server)}; "
            f"{told}"
        )
        failed.exit_code = code
        raise failed from exc

    @staticmethod
    def _worker_failure(server: FailingServer, exc: WorkerRaised) -> tuple[str, int, BaseException]:
        """The cause, the exit code and the exception to keep the traceback of, for tasks
        that raised on worker ranks: each sends its report as the workers stop (the first
        rank's says what raised; its traceback comes from the worker)."""
        try:
            reports = server.stop_workers(reports=True)
        except Exception:
            reports = {}
        rank = exc.ranks[0]
        report = reports.get(rank)
        others = f" (and ranks {', '.join(map(str, exc.ranks[1:]))})" if exc.ranks[1:] else ""
        if report is None:
            return f"{exc}; what they raised did not reach rank 0", 1, exc
        line = printable(report.get("line", ""))
        kind = printable(report.get("type", "an exception"))
        cause = f"rank {rank}: {kind}: {line}{others}" if line else f"rank {rank}: {kind}{others}"
        code = report.get("code")
        exc.__cause__ = WorkerTraceback(f"rank {rank}:\n{report.get('traceback', '')}")
        return cause, code if type(code) is int and 0 < code < 256 else 1, exc

    def interrupted(self, server: FailingServer, t: int, saved: dict | None) -> NoReturn:
        """A KeyboardInterrupt (a second Ctrl-C, or one raised by a plug-in) in round ``t``:
        the last completed round is written before the process exits (code 130)."""
        live = server.state.complete_round
        where = server.phase if live is None else f"after round {live}"
        kept = self.keep_last_round(server, saved)
        raise Interrupted(f"interrupted in round {t} ({where}); {kept}{self.resume_hint(server)}")

    def diverged(
        self, server: FailingServer, exc: DivergedError, saved: dict | None
    ) -> DivergedError:
        """The error to raise for a round that diverged (every rank stops alike on the same
        bounds), once the last completed round is written."""
        kept = self.keep_last_round(server, saved)
        return DivergedError(f"{exc}; {kept}{self.resume_hint(server)}")

    def lost_ranks(self) -> str:
        """Which worker ranks have exited, as far as this host can tell (those on rank 0's
        host, by their process ids), and which run on other hosts and cannot be checked
        from here, for a failed collective's message. A rank that exited may have died or
        may have left after its own collective failed: both are said as "exited"."""
        here = self.hosts[0] if self.hosts else None
        exited, elsewhere = [], []
        for r, (pid, host) in enumerate(zip(self.rank_pids, self.hosts, strict=False)):
            if r == 0:
                continue
            if host != here:
                elsewhere.append(str(r))
            elif not _alive(int(pid)):
                exited.append(f"rank {r} (pid {pid})")
        parts = []
        if exited:
            parts.append(", ".join(exited) + (" has" if len(exited) == 1 else " have") + " exited")
        if elsewhere:
            many = len(elsewhere) > 1
            parts.append(f"rank{'s' if many else ''} {', '.join(elsewhere)} "
                         f"run{'' if many else 's'} on other hosts")  # fmt: skip
        if not exited:
            parts.insert(0, "a worker rank died or stopped answering")
        return "; ".join(parts)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, dead but not yet collected by
    its launcher, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True


__all__ = ["RoundFailures"]

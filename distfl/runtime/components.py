"""What the server does around each round, as small components it calls in turn (in the
manner of pfl-research's callbacks): the record of the run file's tables, the progress
display, the checkpoint, and the summary.

:meth:`RoundLoop.round <distfl.runtime.round_loop.RoundLoop.round>` runs a round (probe,
plan, train, update, splits), asks :class:`~distfl.runtime.evaluation.Evaluation` whether
to evaluate, then hands the round's :class:`RoundResult` to each component's
:meth:`~Component.after_round`; at the end each component's :meth:`~Component.at_end`.
None of them knows which algorithm runs.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from distfl.algorithms import ClientReports, RoundUpdate
from distfl.hierarchy import empty_leaves_note
from distfl.participation.model import OFF, RoundParticipation
from distfl.progress import Progress
from distfl.runfile.atomic import DiskReserve, RunFileWriteError, why
from distfl.runfile.layout import ALGORITHM_PREFIX
from distfl.runfile.run import participation_line
from distfl.runfile.writer import write_run_file
from distfl.runtime.capacity import run_file_bytes
from distfl.runtime.export import LiveExport
from distfl.runtime.newcomers import NO_NEWCOMERS, Newcomers
from distfl.runtime.newcomers import summary_line as newcomers_line
from distfl.runtime.privacy import (
    epsilon,
    noise_multiplier,
    run_sampling_rate,
    sample_epsilon,
    sample_rate,
    summary_lines,
)
from distfl.runtime.protocol import peak_rss_mb

if TYPE_CHECKING:
    from typing import TextIO

    from distfl.algorithms import ClusteringAlgorithm
    from distfl.config import Config
    from distfl.hierarchy import ClusterTree
    from distfl.runtime.run_state import RunState
    from distfl.runtime.timing import RoundTiming


@dataclass
class OnDisk:
    """What the server knows of its run file: the disk room held for its next write, when
    it was first written ("": not yet; a resume keeps the file's) and the round it holds
    (None: none written yet). :func:`write_server` keeps it."""

    room: DiskReserve
    created: str = ""
    rounds_written: int | None = None

    def wrote(self, created: str, round_index: int) -> None:
        """The file was written, holding round ``round_index``."""
        self.created, self.rounds_written = created, round_index


class ServerView(Protocol):
    """What the components see of the server (:class:`~distfl.runtime.server.Server`
    provides it): the run's facts, the tree and models of the clusters, the record of the
    file's tables, and the few steps they take through it. A component reads nothing else
    of the server (``tests/unit/test_architecture.py`` checks it), so that a component of
    one's own needs to know no more than this."""

    # the run
    config: Config
    num_clients: int
    num_params: int  # of a model
    algorithm: ClusteringAlgorithm
    partition: Any  # the clients' partition: group, num_train(), num_test(), owners, ...
    labels: Any  # each sample's class (the partition counts them per client)
    federation_groups: np.ndarray  # [K] ground-truth group
    num_train: np.ndarray  # [K] train samples
    newcomers: Newcomers  # data.held_out's clients, beyond the K trained
    num_test: np.ndarray  # [K] test samples
    comm: Any  # its world_size and name
    world: dict | None  # where the ranks ran (/world)
    trainer: str
    stream: TextIO
    # the clusters and the results so far: the models, the record of the file's tables,
    # the clients' accuracies, the rounds done (state_dict() is the file's /state)
    tree: ClusterTree
    state: RunState
    round_bytes: int
    file: OnDisk  # the run file: when first written, the round it holds, the room kept
    # the loop's start, the last round's seconds, each worker's time this round
    timing: RoundTiming

    def expected_round_s(self, t: int) -> float: ...

    def writing(self) -> AbstractContextManager[None]: ...  # a write no signal interrupts

    def evaluating(self, t: int, done: int, total: int, seconds: float) -> None: ...

    def step(self, model_of: dict, op_of: dict, t: int, *, cost: Any = None,
             models: list[str] | None = None, probe_op: int = 0,
             state: dict | None = None) -> tuple: ...  # fmt: skip

    def client_op(self, op: str) -> int: ...  # an op's number among the client half's

    def probe(self, request: Any, t: int, *, cost: Any = None) -> Any: ...  # a probe's rows

    def count(self, nbytes: int) -> None: ...

    def stopping(self, t: int) -> bool: ...

    def stop_workers(self) -> None: ...


@dataclass(frozen=True)
class Scores:
    """An evaluation's figures of the federation: the mean balanced accuracy, plain
    accuracy and test loss over the evaluated clients (weighted as ``eval.weighted`` says),
    and the lowest and the 10th percentile of their balanced accuracies (unweighted,
    :func:`distfl.metrics.low_tail`); NaN where no evaluated client has test data, and all
    NaN in a round without an evaluation (:data:`NO_SCORES`)."""

    accuracy: float
    accuracy_plain: float
    test_loss: float
    accuracy_worst: float
    accuracy_p10: float
    #: the mean test loss of the evaluated clients that trained in a round so far, and of
    #: those that never did (``eval.coverage``; NaN without it)
    loss_in_sample: float = math.nan
    loss_out_of_sample: float = math.nan
    #: the newcomers' figures (data.held_out; :data:`~distfl.runfile.layout.HELD_OUT_COLUMNS`),
    #: NaN without newcomers
    newcomers: dict[str, float] = field(default_factory=lambda: dict(NO_NEWCOMERS))


NO_SCORES = Scores(math.nan, math.nan, math.nan, math.nan, math.nan)


@dataclass
class RoundResult:
    """What one round did, as the components see it."""

    round: int
    reports: ClientReports
    update: RoundUpdate
    #: the clusters that trained (split parents too) and how many clients each sampled
    trained: list[str]
    sampled: dict[str, int]
    #: whether the round evaluated, and what the evaluation scored (:data:`NO_SCORES`, all
    #: NaN, without one)
    evaluated: bool
    scores: Scores
    #: seconds since the run's first round (across resumes), bytes this world moved
    elapsed: float
    moved: int
    #: rounds per second since this process's loop began
    rate: float
    #: seconds the algorithm's update took on the server (its split tests included)
    update_s: float = math.nan
    #: what participation did to the round's plan (dropouts, the deadline, the clock)
    participation: RoundParticipation = OFF


def _mean(values: np.ndarray) -> float:
    """The mean, NaN for none (a round no client reported to)."""
    return float(values.mean()) if len(values) else math.nan


def _last(values: list) -> float:
    """The last of a column's values, NaN for none."""
    return float(values[-1]) if len(values) else math.nan


def _participation_columns(metrics, took_part: RoundParticipation) -> dict[str, Any]:
    """The round's participation columns of /metrics: the clients lost, the simulated
    seconds of the round and of the run so far (NaN without a clock)."""
    before = _last(metrics["sim_elapsed_s"])  # (NaN in every row of a run without a clock)
    elapsed = (before if before == before else 0.0) + took_part.round_s
    return {
        "unavailable": took_part.unavailable, "dropped": took_part.dropped,
        "late": took_part.late, "rejected": took_part.rejected,
        "sim_round_s": took_part.round_s, "sim_elapsed_s": elapsed,
    }  # fmt: skip


def _privacy_columns(server: ServerView, r: RoundResult) -> dict[str, Any]:
    """The round's privacy columns ([privacy]): ε after it (NaN without noise), the busiest
    client's DP-SGD steps so far and the bound on ε they give. The PRV accountant, a
    fraction of a second to seconds a call, gives ε at evaluation rounds alone (the last
    round is one), NaN between."""
    config, metrics = server.config, server.state.record.metrics
    p = config.privacy
    counted = p.accountant == "rdp" or r.evaluated
    eps = math.nan
    if p.noised and counted:
        eps = epsilon(p, run_sampling_rate(config), r.round, noise_multiplier(config))
    if p.sample_dp is None:
        return {"dp_epsilon": eps, "dp_sample_steps": 0, "dp_sample_epsilon": math.nan}
    busiest = int(np.unique(r.reports.clients, return_counts=True)[1].max(initial=0))
    before = int(metrics["dp_sample_steps"][-1]) if len(metrics["dp_sample_steps"]) else 0
    steps = before + busiest * config.train.local_steps
    q = sample_rate(config.train.batch_size, server.num_train)
    sample = sample_epsilon(p, q, steps) if counted else math.nan
    return {"dp_epsilon": eps, "dp_sample_steps": steps, "dp_sample_epsilon": sample}


class Component:
    """A part of the server's work around the rounds; every hook does nothing by default."""

    #: what a failure in it is called ("round 7 failed in the record")
    label = "a component"

    def at_start(self, server: ServerView) -> None:
        pass

    def before_round(self, server: ServerView, t: int) -> None:
        pass

    def during_evaluation(
        self, server: ServerView, t: int, done: int, total: int, seconds: float
    ) -> None:
        """``done`` of the ``total`` clients of round ``t``'s evaluation are evaluated,
        ``seconds`` after it began (called after each of its steps)."""

    def after_round(self, server: ServerView, result: RoundResult) -> None:
        pass

    def at_end(self, server: ServerView, summary: dict[str, Any]) -> None:
        pass


class Recorder(Component):
    label = "the record"
    """The rows of the run file's per-round tables (distfl.runfile.layout): /metrics,
    /metrics/clusters, /metrics/membership, /timing and /timing/workers."""

    def after_round(self, server: ServerView, r: RoundResult) -> None:
        record, t = server.state.record, r.round
        idle = type(server.algorithm).record_idle_clusters
        for cid in r.trained:  # a split parent with the members it split
            if not idle and not r.sampled.get(cid, 0) and cid not in r.update.stats:
                continue  # (local: a row per cluster trained, not per client of the run)
            record.clusters.append(
                {"round": t, "cluster": cid, "size": len(server.tree.members(cid)),
                 "sampled": r.sampled.get(cid, 0)},
                r.update.stats.get(cid, {}),
                source=f"algorithm {server.algorithm.name!r}",
            )  # fmt: skip
        self._own_rows(server, t, r.update.rows)
        self._membership(server, t, None if idle else r.sampled)
        record.metrics.append({
            "round": t,
            "num_clusters": len(server.state.models),
            "num_participants": len(r.reports.clients),
            "num_splits": len(r.update.splits),
            "train_loss_first": _mean(r.reports.losses[:, 0]),
            "train_loss_last": _mean(r.reports.losses[:, -1]),
            "accuracy": r.scores.accuracy,
            "accuracy_worst": r.scores.accuracy_worst,
            "accuracy_p10": r.scores.accuracy_p10,
            "accuracy_plain": r.scores.accuracy_plain,
            "test_loss": r.scores.test_loss,
            "federation_bytes": server.round_bytes,
            **_participation_columns(record.metrics, r.participation),
            "loss_in_sample": r.scores.loss_in_sample,
            "loss_out_of_sample": r.scores.loss_out_of_sample,
            **_privacy_columns(server, r),
            **r.scores.newcomers,
        })  # fmt: skip
        record.timing.append({
            "round": t, "elapsed_s": r.elapsed, "bytes": r.moved, "rss_mb": peak_rss_mb(),
            "update_s": r.update_s,
        })  # fmt: skip
        for rank in sorted(server.timing.round_workers):
            (clients, train_s, busy_s, loaded, cache_mb, rss_mb, pooled,
             pooled_s) = server.timing.round_workers[rank]  # fmt: skip
            record.workers.append({
                "round": t, "rank": rank, "clients": clients, "train_s": train_s,
                "busy_s": busy_s, "loaded": loaded, "cache_mb": cache_mb, "rss_mb": rss_mb,
                "pooled": pooled, "pooled_s": pooled_s,
            })  # fmt: skip
        server.state.complete(t)  # the round and its record are complete

    @staticmethod
    def _own_rows(server: ServerView, t: int, rows: dict[str, dict]) -> None:
        """The rows of the algorithm's own tables this round (RoundUpdate.rows), checked:
        tables it declares, client ids of the run, clusters of its tree."""
        algorithm = server.algorithm
        source = f"algorithm {algorithm.name!r}"
        declared = {t.name for t in algorithm.tables}
        for name in sorted(rows):
            if name not in declared:
                raise RuntimeError(
                    f"{source} gave rows of a table {name!r} that it does not declare "
                    f"(its tables: {', '.join(sorted(declared)) or 'none'})"
                )
            values = dict(rows[name])
            n = len(np.asarray(next(iter(values.values()), ())))
            values["round"] = np.full(n, t, dtype=np.int64)
            for key in ("client", "other"):
                ids = np.asarray(values.get(key, ()))
                odd = ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0)
                if odd or (ids.size and ids.max() >= server.num_clients):
                    raise RuntimeError(
                        f"{source} gave rows of table {name!r} whose {key} is no client id of "
                        f"the run (0 .. {server.num_clients - 1})"
                    )
            for cid in set(map(str, values.get("cluster", ()))):
                if cid not in server.tree:
                    raise RuntimeError(
                        f"{source} gave rows of table {name!r} for cluster {cid!r}, which is "
                        "not in its tree"
                    )
            server.state.record.tables[ALGORITHM_PREFIX + name].extend(values, source=source)

    @staticmethod
    def _membership(server: ServerView, t: int, sampled: dict[str, int] | None = None) -> None:
        """Each leaf's clients by ground-truth group at the round's end; with ``sampled``
        (an algorithm that records no idle cluster: ``record_idle_clusters``), only the
        leaves that sampled a client this round."""
        leaves, assign = server.tree.assignment()
        if sampled is not None:
            index = {cid: i for i, cid in enumerate(leaves)}
            keep = np.zeros(len(leaves) + 1, dtype=bool)
            keep[[index[c] for c, n in sampled.items() if n and c in index]] = True
            assign = np.where(keep[assign], assign, -1)
        groups = server.federation_groups
        G = int(groups.max()) + 1 if len(groups) else 1
        placed = assign >= 0  # IFCA's clients before their first probe are nowhere yet
        counts = np.bincount(
            assign[placed] * G + groups[placed], minlength=len(leaves) * G
        ).reshape(len(leaves), G)
        for i, g in zip(*np.nonzero(counts), strict=True):
            server.state.record.membership.append(
                {"round": t, "cluster": leaves[int(i)], "group": g, "clients": counts[i, g]}
            )


class ProgressDisplay(Component):
    label = "the progress display"
    """A redrawn bar on a terminal, plain lines in logs (run.progress)."""

    def at_start(self, server: ServerView) -> None:
        self.progress = Progress(server.config.run.rounds, server.config.run.progress,
                                 server.stream)  # fmt: skip

    def during_evaluation(
        self, server: ServerView, t: int, done: int, total: int, seconds: float
    ) -> None:
        self.progress.evaluation(t, done, total, seconds)

    def after_round(self, server: ServerView, r: RoundResult) -> None:
        self.progress.update(r.round, clusters=len(server.state.models),
                             accuracy=r.scores.accuracy,
                             rounds_per_s=r.rate, loss=float(r.reports.losses[:, -1].mean())
                             if len(r.reports.losses) else math.nan,
                             sim_s=_last(server.state.record.metrics["sim_elapsed_s"]))  # fmt: skip


class Checkpoint(Component):
    label = "the checkpoint"
    """The run file, with ``checkpoint.seconds`` (> 0) after the first round this process
    completes (a run, or a resume: a kill that no signal announces, an MPI launcher ending
    every rank, finds a file from then on), then after a round once ``checkpoint.seconds``
    passed since the last write (and 20 times that write's own seconds: its cost stays under
    5% of the run); every ``checkpoint.every`` rounds; before a round when the rounds not yet
    on disk would otherwise wait longer than ``checkpoint.seconds`` for their write (a long
    evaluation or update ahead: :meth:`before_round`); and at the end; not in a round the
    run stops after (the end writes it). A write that fails stops the workers and ends the
    run (RunFileWriteError); the previous file stays."""

    #: a periodic write waits at least this many times as long as the last write took
    COST_FACTOR = 20

    def __init__(self) -> None:
        self.last_write = 0.0  # perf_counter() when the last write ended (or the loop began)
        self.write_s = 0.0
        self.wrote = False  # whether this process wrote the file

    #: the room held for the next write: this many times the size of the last one, and
    #: ROOM_SPARE bytes besides (the file grows with every round's rows)
    ROOM_FACTOR = 1.25
    ROOM_SPARE = 1 << 20

    def at_start(self, server: ServerView) -> None:
        self.last_write = time.perf_counter()
        self.estimate = run_file_bytes(server.config)
        if server.file.rounds_written is not None:  # a resumed file: its size is known
            self.estimate = max(self.estimate, self._room_after(server))
        try:
            server.file.room.hold(self.estimate)
        except OSError as exc:
            raise RunFileWriteError(
                f"cannot write the run file {server.config.run.out}: no room for it on its "
                f"disk ({why(exc)}); free some space or give another --out"
            ) from None

    def _room_after(self, server: ServerView) -> int:
        try:
            size = os.path.getsize(server.config.run.out)
        except OSError:  # a resumed run writing to another --out
            size = 0
        return int(self.ROOM_FACTOR * size) + self.ROOM_SPARE

    def keep_room(self, server: ServerView) -> None:
        """Room for the write after the one just made; a disk without it ends the run here,
        its last completed round on disk (RunFileWriteError, exit code 2)."""
        try:
            server.file.room.hold(max(self.estimate, self._room_after(server)))
        except OSError as exc:
            out = server.config.run.out
            raise RunFileWriteError(
                f"the disk of the run file {out} is full ({why(exc)}): it holds round "
                f"{server.file.rounds_written}, and there is no room for another write; free some "
                f"space, then continue with distfl run --resume {out}"
            ) from None

    def due(self, server: ServerView, t: int, ahead_s: float = 0.0) -> bool:
        """Whether to write after round ``t``, ``ahead_s`` seconds of work before the next
        write could come."""
        cfg = server.config.checkpoint
        if t >= server.config.run.rounds or server.stopping(t):
            return False
        if cfg.every and t % cfg.every == 0:
            return True
        if cfg.seconds and not self.wrote:  # the first round of this process
            return True
        waited = time.perf_counter() - self.last_write + ahead_s
        return bool(cfg.seconds) and waited >= max(cfg.seconds, self.COST_FACTOR * self.write_s)

    def before_round(self, server: ServerView, t: int) -> None:
        """Rounds completed but not on disk are written before a round expected to take
        so long (an evaluation of many clients, a long update) that they would wait longer
        than ``checkpoint.seconds`` after it began: a kill during that round loses none of
        them."""
        done = server.state.rounds_done
        if done <= (server.file.rounds_written or 0):
            return
        expected = server.expected_round_s(t)
        if expected > 0 and self.due(server, done, ahead_s=expected):
            self.write(server)
            self.keep_room(server)

    def after_round(self, server: ServerView, r: RoundResult) -> None:
        if not self.due(server, r.round):
            return
        try:
            self.write(server)
            self.keep_room(server)
        except RunFileWriteError:
            server.stop_workers()  # every rank ends
            raise

    def at_end(self, server: ServerView, summary: dict[str, Any]) -> None:
        if not (server.file.rounds_written == server.state.rounds_done and self.wrote):
            self.write(server)  # (unless a stop came while this process wrote that round)
        server.file.room.release()

    def write(self, server: ServerView) -> None:
        started = time.perf_counter()
        write_server(server)
        self.last_write = time.perf_counter()
        self.write_s = self.last_write - started
        self.wrote = True


def write_server(server: ServerView) -> None:
    """The run file of the server's state now (its last completed round)."""
    with server.writing():
        _write_server(server)


def _write_server(server: ServerView) -> None:
    leaves, assignment = server.tree.assignment()
    partition = server.partition
    created = write_run_file(
        server.config.run.out,
        config=server.config,
        world_size=server.comm.world_size,
        world=server.world,
        clients={
            "group": server.federation_groups,  # the K trained clients' (not the newcomers')
            "class_counts": partition.class_counts(server.labels)[: server.num_clients],
            "num_train": server.num_train,
            "num_test": server.num_test,
            "accuracy": server.state.client_accuracy,
            **({} if partition.owners is None else {"owner": partition.owners}),
        },
        hierarchy=server.tree.to_nodes(),
        leaves=leaves,
        assignment=assignment,
        leaf_models=torch.stack([server.state.models[c] for c in leaves]).numpy(),
        tables=server.state.record.arrays(),
        trainer=server.trainer,
        loop_started=server.timing.loop_started,
        sum_bytes_per_param=server.state.sum_bytes_per_param,
        state=server.state.state_dict(),
        created=server.file.created,
        room=server.file.room,
    )
    server.file.wrote(created, server.state.rounds_done)


class Summary(Component):
    label = "the summary"
    """The lines printed at the end: rounds and time, accuracy (the mean, the worst client's
    and the 10th percentile), clusters, throughput, traffic, the run file (and how to
    continue a stopped run)."""

    def at_end(self, server: ServerView, s: dict[str, Any]) -> None:
        cfg, w = server.config, server.comm.world_size
        moved = (
            "0 B (one process)" if w == 1 else f"{_bytes(s['bytes_per_round'])} (rank 0's traffic)"
        )
        head = (
            f"distfl: {s['rounds_this_run']} rounds in {s['wall_s']:.2f} s "
            f"({s['rounds_this_run'] / max(s['wall_s'], 1e-9):.2f} rounds/s), "
            f"world size {w} ({server.comm.name})"
        )
        hosts = sorted(set(server.world["host"])) if server.world else []
        if len(hosts) > 1:
            more = ", ..." if len(hosts) > 4 else ""
            head += f" on {len(hosts)} hosts ({', '.join(hosts[:4])}{more})"
        if s["stopped_by"]:
            head = (
                f"distfl: stopped by {s['stopped_by']} after round {s['rounds']}/"
                f"{cfg.run.rounds}; checkpoint written. Continue with: "
                f"distfl run --resume {cfg.run.out}\n" + head
            )
        lines = [
            head,
            f"  final balanced accuracy  {s['accuracy']:.4f} ({evaluated_over(cfg)})",
            f"  worst client             {s['accuracy_worst']:.4f}, 10th percentile "
            f"{s['accuracy_p10']:.4f} (of the same clients' balanced accuracies)",
            f"  clusters                 {s['num_clusters']}"
            f"{empty_leaves_note(s['num_clusters'], s['num_leaves'])}",
            f"  client-steps/s           {s['client_steps_per_s']:.1f}",
            f"  bytes moved per round    {moved}",
            f"  federation bytes/round   {_bytes(s['federation_bytes_per_round'])} "
            "(clients and server of a real deployment)",
            f"  run file                 {cfg.run.out}",
        ]
        if held := newcomers_line(server):
            lines.insert(3, held)
        if took_part := participation_line(server.state.record.metrics.columns):
            lines.insert(-1, f"  participation            {took_part}")
        for line in summary_lines(cfg, server.state.record.metrics):
            lines.insert(-1, line)
        server.stream.write("\n".join(lines) + "\n")
        server.stream.flush()


def evaluated_over(config: Config) -> str:
    """What an evaluation's mean is taken over, in words: "mean over 40 clients", "mean
    over a sample of 10,000 of 1,000,000 clients"."""
    K = config.data.num_clients
    n = config.eval.evaluated(K)
    return f"mean over {K:,} clients" if n >= K else f"mean over a sample of {n:,} of {K:,} clients"


def default_components() -> list[Component]:
    """What every run does after each round and at the end, in this order: record the
    round, show progress, checkpoint, export the round's rows (run.export); at the end
    write the file, close the exports, then print the summary."""
    return [Recorder(), ProgressDisplay(), Checkpoint(), LiveExport(), Summary()]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

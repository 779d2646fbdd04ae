"""The rounds of a run: :class:`RoundLoop` runs every round from the next to
``run.rounds`` over the server's parts (:class:`~distfl.runtime.server.Server`), each
round the algorithm's probe, plan, training and update, the splits and an evaluation when
one is due, preceded and followed by the components' work (record, progress, checkpoint).

Before a round changes the run's state (:class:`~distfl.runtime.run_state.RunState`) the
loop copies it (:mod:`~distfl.runtime.snapshots`); a stop signal gives the round up and the
run ends after the round before (:mod:`~distfl.runtime.stopping`); an exception or a dead
rank fails the round (:mod:`~distfl.runtime.failures`), each after writing the last
completed round."""

from __future__ import annotations

import time

import numpy as np
import torch

from distfl.algorithms import RoundUpdate
from distfl.errors import CommError, DivergedError, Interrupted
from distfl.metrics import last_finite
from distfl.runfile.atomic import RunFileWriteError
from distfl.runtime.components import NO_SCORES, RoundResult
from distfl.runtime.participation import admitted_training
from distfl.runtime.stopping import StopNow
from distfl.runtime.summary import run_summary


class RoundLoop:
    """The rounds of ``server``'s run (:meth:`run`), one at a time (:meth:`round`);
    ``server`` is the run's :class:`~distfl.runtime.server.Server` (not imported here: the
    server imports this module)."""

    def __init__(self, server) -> None:
        self.server = server

    def round(self, t: int, first: int, may_give_up: bool = False) -> RoundResult | None:
        """Round ``t``: the algorithm's probe, plan, training and update, the splits, and an
        evaluation when one is due. None, or StopNow raised: a stop signal gave the round up
        (during its probe, or, with ``may_give_up``, the server holding a snapshot of round
        ``t - 1``, anywhere); nothing of it is to be kept, and the run stops after round
        ``t - 1``. ``first``: the first round of this process (its rate counts from it)."""
        server = self.server
        bytes_before = server.comm.bytes_moved
        server.round_bytes = 0
        server.timing.round_workers = {}
        name = server.algorithm.name
        server.participation.begin(t)
        server.phase = f"{name}'s plan_probe"
        request = server.algorithm.plan_probe(t)
        if request is not None:
            server.phase = "the probe"
            rows = server.clients.probe(request, t)
            if rows is None:
                return None
            server.phase = f"{name}'s update_probe"
            server.algorithm.update_probe(t, request, rows)
        server.phase = f"{name}'s plan"
        plan = server.algorithm.plan(t)
        plan, took_part = server.participation.admit(plan)
        # a client lost to a dropout or the deadline downloaded its models
        server.count(took_part.lost_trainings * 4 * server.num_params)
        trained = server.tree.leaf_ids()  # the clusters of this round (split parents too)
        sampled = dict.fromkeys(trained, 0)
        for k in plan.train:
            for cid, _ in plan.targets(k):
                sampled[cid] += 1
        server.phase = "training"
        train_started = time.perf_counter()
        reports, took_part = admitted_training(server, plan, may_give_up, took_part)
        if reports is None:
            return None
        server.timing.train_s = time.perf_counter() - train_started
        server.timing.clients_trained = len(np.unique(reports.clients))
        server.phase = f"{name}'s update"
        update_started = time.perf_counter()
        # a round that no client reported to (none available, all dropped or late) changes
        # no model and nothing the algorithm holds
        update = server.algorithm.update(t, plan, reports) if plan.train else RoundUpdate()
        update_s = server.timing.update_s = time.perf_counter() - update_started
        server.phase = "applying the update"
        for cid, flat in update.models.items():
            server.state.models[cid] = torch.as_tensor(np.asarray(flat, dtype=np.float32))
        server.aggregation.split(server.state.models, update.splits)
        server.phase = "the evaluation"
        evaluated = server.evaluation.due(server, t)
        scores = server.evaluation(server, t) if evaluated else NO_SCORES
        server.state.rounds_done = t
        now = time.perf_counter()
        return RoundResult(
            round=t, reports=reports, update=update, trained=trained, sampled=sampled,
            evaluated=evaluated, scores=scores, elapsed=server.timing.elapsed(now),
            moved=server.comm.bytes_moved - bytes_before,
            rate=(t - first + 1) / max(server.timing.since_loop(now), 1e-9), update_s=update_s,
            participation=took_part,
        )  # fmt: skip

    def run(self) -> dict:
        """Every round from the next to ``run.rounds`` (or until a signal), each preceded
        and followed by the components' work (record, progress, checkpoint); then the file
        and the summary. A stop signal abandons the round in progress and the run ends after
        the round before (:mod:`distfl.runtime.stopping`); an exception or a dead rank
        fails the round (:meth:`RoundFailures.fail`) and a KeyboardInterrupt ends the run
        (:meth:`RoundFailures.interrupted`), each after writing the last completed round."""
        server = self.server
        try:
            return self._run()
        finally:
            server.file.room.release()

    def _run(self) -> dict:
        server = self.server
        for component in server.components:
            component.at_start(server)
        server.timing.start_loop()
        first = server.state.rounds_done + 1
        server.state.complete(server.state.rounds_done)
        accuracy = last_finite(server.state.record.metrics["accuracy"])
        try:
            for t in range(first, server.config.run.rounds + 1):
                result = self._kept_round(t, first)
                if result is None:  # the run stops after round t - 1
                    break
                if result.evaluated:
                    accuracy = result.scores.accuracy
                if server.stopping(t):
                    break
            try:
                server.phase = "stopping the workers"
                server.stop_workers()
            except CommError as exc:  # a rank died after the last round: the file is complete
                server.failures.fail(server, server.state.rounds_done, exc, None)
            summary = run_summary(server, first, accuracy)
        except Interrupted:
            raise  # the last completed round is written already
        except KeyboardInterrupt:  # a second Ctrl-C between rounds or after the last
            server.failures.interrupted(server, server.state.rounds_done + 1, None)
        self._end(summary)
        return summary

    def _end(self, summary: dict) -> None:
        """The components' work at the end (the last write of the file, the summary); what
        raises there fails the run as a round would, the file written as far as it can be."""
        server = self.server
        try:
            for component in server.components:
                server.phase = component.label
                component.at_end(server, summary)
        except KeyboardInterrupt:
            server.failures.interrupted(server, server.state.rounds_done + 1, None)
        except RunFileWriteError:
            raise  # it says what the file holds
        except BaseException as exc:  # a plug-in's state, read for the file, say
            server.failures.fail(server, server.state.rounds_done, exc, None)

    def _kept_round(self, t: int, first: int) -> RoundResult | None:
        """Round ``t`` with the components' work before and after it, its state copied
        before it changes (:class:`RoundSnapshots`); None: a signal stops the run after
        round ``t - 1`` (the live state is that round's). A round that raises fails the run
        (:class:`RoundFailures`): any exception, a plug-in's UserError, SystemExit (whatever
        its code) and a plug-in's own BaseException included; a KeyboardInterrupt (a second
        Ctrl-C, or one a plug-in raised) interrupts it."""
        server = self.server
        saved = None
        try:
            for component in server.components:  # (a hook a component may leave out)
                server.phase = component.label
                if hasattr(component, "before_round"):
                    component.before_round(server, t)
            if server.stopping(t - 1):  # a signal while the rounds before were written
                return None
            server.phase = "the copy of the last completed round"
            saved = server.snapshots.take(server.state)
            round_started = time.perf_counter()
            server.state.begin_round()
            with server.stop.abandonable(saved is not None):
                result = self.round(t, first, may_give_up=saved is not None)
            if result is None:  # given up at a stop signal: the run ends after round t - 1
                raise StopNow
            for component in server.components:  # the Recorder completes the round
                server.phase = component.label
                component.after_round(server, result)
            server.state.complete(t)
        except StopNow:
            try:
                self._given_up(saved)
            except KeyboardInterrupt:  # a second Ctrl-C while the round was given up
                server.failures.interrupted(server, t, saved)
            return None
        except KeyboardInterrupt:
            server.failures.interrupted(server, t, saved)
        except RunFileWriteError:
            raise  # it says what the file holds; every rank was stopped
        except DivergedError as exc:  # every rank stops alike on the same bounds
            if t == 1 and server.file.rounds_written is None:
                raise  # no round to keep
            raise server.failures.diverged(server, exc, saved) from None
        except BaseException as exc:  # a dead rank (CommError) and a failed worker too
            server.failures.fail(server, t, exc, saved)
        server.snapshots.weigh(time.perf_counter() - round_started)
        return result

    def _given_up(self, saved: dict | None) -> None:
        """A stop signal gave the round in progress up: the live state goes back to the
        snapshot ``saved`` of the round before (when the round had changed it)."""
        server = self.server
        server.stop.settle()
        if saved is not None and server.state.complete_round is None:
            server.state.put_back(saved)
        if not server.stop.name:
            server.stop.name = "a stop signal at a worker"


__all__ = ["RoundLoop"]

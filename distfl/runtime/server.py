"""The server (rank 0): asks the algorithm for each round's plan, runs it over the world
and aggregates cluster models; the evaluation, the run file's record, the progress display,
the checkpoint and the summary are components it calls after each round and at the end
(:mod:`distfl.runtime.components`). It knows algorithms only through
:class:`~distfl.algorithms.ClusteringAlgorithm` and reads the cluster tree the algorithm
owns.

Its collaborators: :mod:`~distfl.runtime.seeding` (the initial models),
:mod:`~distfl.runtime.steps` (the steps over the world, placed by
:mod:`~distfl.runtime.placement`), :mod:`~distfl.runtime.aggregation` (the sums decoded into
the clusters' new models), :mod:`~distfl.runtime.evaluation`, :mod:`~distfl.runtime.timing`,
:mod:`~distfl.runtime.snapshots` (the copy of the last completed round) and
:mod:`~distfl.runtime.failures` (a round that does not complete)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from distfl.aggregators import build_aggregator
from distfl.algorithms import (
    ClientReports,
    Federation,
    ProbeRequest,
    RoundPlan,
    RoundUpdate,
    build_algorithm,
    every_run_statistics,
)
from distfl.comm.base import Communicator
from distfl.config import Config
from distfl.data import OwnerPopulation, Partition, Population
from distfl.errors import CommError, DivergedError, Interrupted
from distfl.metrics import last_finite
from distfl.models import flat_params, last_layer_span, last_linear, num_params
from distfl.participation.model import Participation
from distfl.progress import QuietOnBrokenPipe
from distfl.runfile.atomic import DiskReserve, RunFileWriteError
from distfl.runfile.checkpoint import RunFile
from distfl.runfile.tables import Record
from distfl.runtime.aggregation import ClusterAggregation
from distfl.runtime.components import Component, RoundResult, default_components
from distfl.runtime.evaluation import NO_SCORES, Evaluation
from distfl.runtime.failures import RoundFailures
from distfl.runtime.participation import admitted_training
from distfl.runtime.placement import Placement
from distfl.runtime.protocol import (
    AFTER,
    MAY_GIVE_UP,
    PROBE,
    RETURN_MODEL,
    TRAIN,
    ProbeShape,
    StepOutput,
    sum_layout,
)
from distfl.runtime.run_state import RunState
from distfl.runtime.seeding import ModelSeeding
from distfl.runtime.snapshots import RoundSnapshots
from distfl.runtime.steps import WorldSteps
from distfl.runtime.stopping import StopFlag, StopNow
from distfl.runtime.summary import run_summary
from distfl.runtime.timing import RoundTiming
from distfl.runtime.worker import Worker
from distfl.train import trainer_choice


class Server:
    def __init__(
        self,
        config: Config,
        comm: Communicator,
        *,
        labels: np.ndarray,
        input_shape: tuple[int, ...],
        num_classes: int,
        partition: Partition | Population | OwnerPopulation,
        local_worker: Worker | None,
        device: torch.device | None = None,
        stream: TextIO | None = None,
        stop=None,
        world: dict | None = None,
        components: list[Component] | None = None,
    ):
        self.config = config
        self.comm = comm
        #: where each rank runs (distfl.comm.world.describe_world), for /world; its process
        #: ids stay with the failure handling (they name a rank that died)
        self.world = None if world is None else {k: v for k, v in world.items() if k != "pid"}
        self.failures = RoundFailures(world)
        self.partition = partition
        #: each client's ground-truth group (int64)
        self.federation_groups = np.asarray(partition.group, dtype=np.int64)
        self.labels = labels
        #: progress and summary; a reader that went away (``| head``) costs no result
        self.stream = QuietOnBrokenPipe(stream or sys.stdout)
        self.num_clients = config.data.num_clients
        self.local_steps = config.train.local_steps
        self.num_train = partition.num_train()
        self.num_test = partition.num_test()
        placement = Placement(
            self.num_train, config.train.batch_size, self.local_steps,
            max(comm.world_size - 1, 1), balanced=config.server.placement == "balanced",
        )  # fmt: skip
        #: its ``name`` is set by a stop signal (distfl.runtime.stopping): the run writes its
        #: last completed round and stops
        self.stop: StopFlag = stop if stop is not None else StopFlag()
        seeding = ModelSeeding(config, input_shape, num_classes)
        model = seeding.build(0)
        #: the workers' local trainer (they train on ``device``, as rank 0 would), and why
        #: ``auto`` did not take the vectorised one where it could not ("" otherwise)
        choice = trainer_choice(
            config.train.trainer, model, device or torch.device("cpu"),
            input_shape=tuple(input_shape), name=config.model.name,
        )  # fmt: skip
        self.trainer, self.trainer_note = choice.kind, choice.note
        self.num_params = num_params(model)
        self.algorithm = build_algorithm(config, self._federation(model, input_shape))
        #: who takes part in each round ([participation]); the algorithm draws through it
        self.participation = Participation(
            config, client_group=self.federation_groups, num_train=self.num_train,
            num_params=self.num_params,
        )  # fmt: skip
        self.algorithm.participation = self.participation
        #: the cluster tree, owned by the algorithm: read here, never copied
        self.tree = self.algorithm.tree
        aggregator = build_aggregator(config.server)
        layout = sum_layout(config.comm.sums, model)
        self.aggregation = ClusterAggregation(aggregator, layout, self.num_params)
        #: what a round changes (distfl.runtime.run_state): models, record, accuracies, ...
        self.state = self._first_state(seeding, model)
        self.timing = RoundTiming()
        self.steps = WorldSteps(
            comm, layout=layout, local_steps=self.local_steps, placement=placement,
            local_worker=local_worker, stop=self.stop, timing=self.timing,
        )  # fmt: skip
        #: the algorithm's pieces of server work go to the workers when there are any
        self.algorithm.pool = self.steps.pool()
        #: when and how clients evaluate; what is done after each round and at the end
        self.evaluation = Evaluation()
        self.components = default_components() if components is None else components
        self._init_state(config)

    def _init_state(self, config: Config) -> None:
        """The run's bookkeeping before its first round (:meth:`restore` continues one)."""
        #: when the run's first file was written ("": not yet; kept on resume)
        self.created = ""
        self.round_bytes = 0
        self.phase = "the round's start"  # what the round is doing (a failure names it)
        #: the copy of the last completed round taken before each round
        self.snapshots = RoundSnapshots()
        self.rounds_written: int | None = None  # the round of the run file on disk, if any
        #: the round the live state holds completed (its record too); None while a round
        #: is changing it
        self.live_round: int | None = None
        #: the room on the run file's disk held for its next write (the checkpoint holds it)
        self.room = DiskReserve(Path(config.run.out))

    def _first_state(self, seeding: ModelSeeding, model: torch.nn.Module) -> RunState:
        """The run's state before its first round (:meth:`restore` continues one)."""
        models = seeding.cluster_models(
            model, self.algorithm.initial_models(), self.tree.leaf_ids()
        )
        return RunState(
            algorithm=self.algorithm, aggregation=self.aggregation,
            participation=self.participation, models=models, record=self._record(),
            client_accuracy=np.full(self.num_clients, np.nan),
            coverage=bool(self.config.eval.coverage),
        )  # fmt: skip

    def _federation(self, model: torch.nn.Module, input_shape: tuple[int, ...]) -> Federation:
        """What the algorithm is told of the federation and the model."""
        config = self.config
        return Federation(
            num_clients=self.num_clients,
            clients_per_round=config.server.clients_per_round,
            seed=config.run.effective_sampling_seed(),
            local_steps=self.local_steps,
            groups=self.federation_groups,
            num_train=self.num_train,
            num_params=self.num_params,
            embed_dim=last_linear(model).in_features,
            input_dim=math.prod(input_shape),
            last_layer=last_layer_span(model),
            num_classes=last_linear(model).out_features,
            initial_model=flat_params(model).numpy(),
        )

    def _record(self, saved: dict | None = None) -> Record:
        """The run file's per-row tables, empty or as ``saved`` holds them: the layout's,
        with the built-in algorithms' every-run statistics, and the algorithm's own."""
        own = [t.table() for t in self.algorithm.tables]
        return Record(saved, always={"clusters": every_run_statistics()}, own=own)

    # -- resumption ------------------------------------------------------------------

    def restore(self, saved: RunFile) -> None:
        """Continue from a run file's /state, exactly where it stopped."""
        self.state.load(saved)
        self.state.record = self._record(saved.tables)
        if len(self.state.record.timing):
            self.timing.elapsed_before = float(self.state.record.timing["elapsed_s"][-1])
        self.created = saved.created
        self.rounds_written = self.state.rounds_done  # the file resumed holds it
        self.live_round = self.state.rounds_done

    # -- what the components call ------------------------------------------------------

    def step(
        self,
        model_of: dict[int, str | list[tuple[str, float]]],
        tasks: dict[int, int],
        round_index: int,
        models: list[str] | None = None,
        probe_op: int = 0,
        probe: ProbeShape | None = None,
        cost: np.ndarray | None = None,
        state: dict[int, np.ndarray] | None = None,
    ) -> tuple[list[str], StepOutput]:
        """Run one step of ``tasks`` over the world with the cluster models ``models``
        (default: those ``model_of`` names), placed on the workers by predicted ``cost``
        ([K], samples each client works through; default its local training's), with the
        clients' ``state`` rows for the client half. The gathered rows come back sorted by
        client (:meth:`WorldSteps.run`)."""
        return self.steps.run(
            self.state.models, model_of, tasks, round_index, clusters=models, probe_op=probe_op,
            probe=probe, cost=cost, state=state,
        )  # fmt: skip

    def evaluating(self, t: int, done: int, total: int, seconds: float) -> None:
        """Tell the components how far round ``t``'s evaluation is."""
        for component in self.components:  # (a hook a component may leave out)
            if hasattr(component, "during_evaluation"):
                component.during_evaluation(self, t, done, total, seconds)

    def writing(self):
        """A context in which no signal interrupts a write of the run file."""
        return self.stop.writing()

    def count(self, nbytes: int) -> None:
        self.round_bytes += int(nbytes)

    def stop_workers(self, *, reports: bool = False) -> dict[int, dict]:
        """End every worker's loop (once); with ``reports``, bring each failed worker's
        report first (:meth:`WorldSteps.stop_workers`)."""
        return self.steps.stop_workers(reports=reports)

    def stopping(self, t: int) -> bool:
        """Whether a signal asked the run to stop after round ``t`` (not its last)."""
        return bool(self.stop.name and t < self.config.run.rounds)

    def expected_round_s(self, t: int) -> float:
        """Seconds round ``t`` is expected to take: the last round's training and update,
        and its evaluation when one is due (:meth:`Evaluation.expected_s`)."""
        expected = self.timing.train_s + self.timing.update_s
        if self.evaluation.due(self, t):
            expected += self.evaluation.expected_s(self, t)
        return expected

    # -- a round's steps ---------------------------------------------------------------

    def probe(self, request: ProbeRequest, round_index: int) -> np.ndarray | None:
        """The probe's rows without the client id, [n, width], as the algorithm's client
        half answered them; None when a worker gave up rows at a stop signal (an algorithm
        whose probe may be abandoned: ClusteringAlgorithm.probe_abandonable)."""
        n, M, width = len(request.clients), len(request.clusters), request.row_width()
        ops = type(self.algorithm).client_ops
        if request.op not in ops:
            raise RuntimeError(
                f"{self.algorithm.name} asked for probe {request.op!r}; its client_ops are {ops}"
            )
        if request.federation_bytes is not None:
            self.count(request.federation_bytes)
        else:  # each client downloads the models and uploads its row
            self.count(n * (M * 4 * self.num_params + width * 8))
        clusters = list(request.clusters)
        model_of = {int(k): clusters[0] for k in request.clients}
        tasks = {int(k): PROBE for k in request.clients}
        _, out = self.step(
            model_of, tasks, round_index, models=clusters, cost=self.num_train,
            probe_op=ops.index(request.op) + 1,
            probe=ProbeShape(width, tuple(int(a) for a in request.args)),
        )  # fmt: skip
        rows = out.probe_rows.cpu().numpy()
        if self.algorithm.probe_abandonable and (rows[:, 0] < 0).any():
            return None
        expected = np.asarray(request.clients, dtype=np.int64)
        if not np.array_equal(rows[:, 0].astype(np.int64), expected):
            raise RuntimeError(f"round {round_index}: probe rows for {rows[:, 0]}")
        return rows[:, 1:]

    def train_round(self, plan: RoundPlan, may_give_up: bool = False) -> ClientReports | None:
        """Train the plan's clients; the aggregator makes each planned cluster's new model.
        None: with ``may_give_up``, a worker left its training at a stop signal (the round
        is to be discarded)."""
        give_up = MAY_GIVE_UP if may_give_up else 0
        if plan.prepare is not None and plan.after is not None:
            raise RuntimeError(
                f"{self.algorithm.name}'s plan for round {plan.round} has both a prepare op "
                f"({plan.prepare!r}) and an after op ({plan.after!r}); a plan takes one"
            )
        op = plan.prepare if plan.prepare is not None else plan.after
        answers = (PROBE if plan.prepare is not None else AFTER) if op is not None else 0
        tasks = {k: TRAIN | give_up | answers | (RETURN_MODEL if k in plan.return_models else 0)
                 for k in plan.train}  # fmt: skip
        targets = {k: plan.targets(k) for k in plan.train}
        soft = plan.soft()
        trainings = len(targets) if plan.one_training else sum(len(v) for v in targets.values())
        # each training downloads its model, uploads its update and its S losses
        self.count(trainings * (8 * self.num_params + 8 * self.local_steps + 8))
        probe_op, shape, state = 0, None, None
        if op is not None:
            width = int(plan.prepare_width if plan.prepare is not None else plan.after_width)
            probe_op = self.client_op(op)
            shape = ProbeShape(width)
            state = self._state_rows(plan)
            self.count(len(plan.train) * 8 * (width + self._state_width(plan)))
        clusters, out = self.step(
            targets if soft else plan.train, tasks, plan.round, probe_op=probe_op,
            probe=shape, state=state,
        )  # fmt: skip
        if may_give_up and (out.loss_rows[:, 0] < 0).any():
            return None
        sums = out.sums.cpu().reshape(len(clusters), -1)
        self.state.sum_bytes_per_param = self.aggregation.bytes_per_param(sums)
        self.aggregation.apply(self.state.models, clusters, sums, out.exponents, out.weight_bits)
        rows = out.loss_rows.cpu().numpy()
        clients = rows[:, 0].astype(np.int64)
        expected = np.array([k for k in sorted(targets) for _ in targets[k]], dtype=np.int64)
        if not np.array_equal(clients, expected):
            raise RuntimeError(f"round {plan.round}: loss rows for {clients}, planned {expected}")
        self.timing.client_steps += trainings * self.local_steps
        models = None
        if plan.return_models:
            models = out.model_rows.cpu().numpy()
            returned = sum(len(targets[k]) for k in plan.return_models)
            if len(models) != returned:
                raise RuntimeError(f"round {plan.round}: {len(models)} client models returned")
        prepared = None
        if op is not None:
            answered = out.probe_rows.cpu().numpy()
            if not np.array_equal(answered[:, 0].astype(np.int64), np.array(sorted(targets))):
                raise RuntimeError(f"round {plan.round}: {op!r} rows for {answered[:, 0]}")
            prepared = answered[:, 1:]
        return ClientReports(
            clients=clients,
            losses=rows[:, 1:],
            num_samples=self.num_train[clients],
            models=models,
            cluster_models={c: m.numpy() for c, m in self.state.models.items()},
            clusters=[c for k in sorted(targets) for c, _ in targets[k]] if soft else None,
            weights=(
                np.array([g for k in sorted(targets) for _, g in targets[k]]) if soft else None
            ),  # fmt: skip
            rows=prepared,
        )

    def client_op(self, op: str) -> int:
        """The 1-based index of ``op`` among the algorithm's client_ops."""
        ops = type(self.algorithm).client_ops
        if op not in ops:
            raise RuntimeError(
                f"{self.algorithm.name} asked for op {op!r}; its client_ops are {ops}"
            )
        return ops.index(op) + 1

    @staticmethod
    def _state_width(plan: RoundPlan) -> int:
        rows = list(plan.client_state.values())
        return len(np.asarray(rows[0]).reshape(-1)) if rows else 0

    def _state_rows(self, plan: RoundPlan) -> dict[int, np.ndarray] | None:
        """Each trained client's state row (zeros for one the plan leaves out), or None."""
        width = self._state_width(plan)
        if not width:
            return None
        rows = {}
        for k in plan.train:
            row = np.asarray(plan.client_state.get(k, np.zeros(width)), dtype=np.float64)
            if row.shape != (width,):
                raise RuntimeError(
                    f"{self.algorithm.name}: client {k}'s state row has shape {row.shape}, "
                    f"not ({width},)"
                )
            rows[k] = row.reshape(-1)
        return rows

    def round(self, t: int, first: int, may_give_up: bool = False) -> RoundResult | None:
        """Round ``t``: the algorithm's probe, plan, training and update, the splits, and an
        evaluation when one is due. None, or StopNow raised: a stop signal gave the round up
        (during its probe, or, with ``may_give_up``, the server holding a snapshot of round
        ``t - 1``, anywhere); nothing of it is to be kept, and the run stops after round
        ``t - 1``. ``first``: the first round of this process (its rate counts from it)."""
        bytes_before = self.comm.bytes_moved
        self.round_bytes = 0
        self.timing.round_workers = {}
        name = self.algorithm.name
        self.participation.begin(t)
        self.phase = f"{name}'s plan_probe"
        request = self.algorithm.plan_probe(t)
        if request is not None:
            self.phase = "the probe"
            rows = self.probe(request, t)
            if rows is None:
                return None
            self.phase = f"{name}'s update_probe"
            self.algorithm.update_probe(t, request, rows)
        self.phase = f"{name}'s plan"
        plan = self.algorithm.plan(t)
        plan, took_part = self.participation.admit(plan)
        # a client lost to a dropout or the deadline downloaded its models
        self.count(took_part.lost_trainings * 4 * self.num_params)
        trained = self.tree.leaf_ids()  # the clusters of this round (split parents too)
        sampled = dict.fromkeys(trained, 0)
        for k in plan.train:
            for cid, _ in plan.targets(k):
                sampled[cid] += 1
        self.phase = "training"
        train_started = time.perf_counter()
        reports, took_part = admitted_training(self, plan, may_give_up, took_part)
        if reports is None:
            return None
        self.timing.train_s = time.perf_counter() - train_started
        self.timing.clients_trained = len(np.unique(reports.clients))
        self.phase = f"{name}'s update"
        update_started = time.perf_counter()
        # a round that no client reported to (none available, all dropped or late) changes
        # no model and nothing the algorithm holds
        update = self.algorithm.update(t, plan, reports) if plan.train else RoundUpdate()
        update_s = self.timing.update_s = time.perf_counter() - update_started
        self.phase = "applying the update"
        for cid, flat in update.models.items():
            self.state.models[cid] = torch.as_tensor(np.asarray(flat, dtype=np.float32))
        self.aggregation.split(self.state.models, update.splits)
        self.phase = "the evaluation"
        evaluated = self.evaluation.due(self, t)
        scores = self.evaluation(self, t) if evaluated else NO_SCORES
        self.state.rounds_done = t
        now = time.perf_counter()
        return RoundResult(
            round=t, reports=reports, update=update, trained=trained, sampled=sampled,
            evaluated=evaluated, accuracy=scores.accuracy, accuracy_plain=scores.accuracy_plain,
            test_loss=scores.test_loss, elapsed=self.timing.elapsed(now),
            moved=self.comm.bytes_moved - bytes_before,
            rate=(t - first + 1) / max(self.timing.since_loop(now), 1e-9), update_s=update_s,
            accuracy_worst=scores.accuracy_worst, accuracy_p10=scores.accuracy_p10,
            participation=took_part, loss_in_sample=scores.loss_in_sample,
            loss_out_of_sample=scores.loss_out_of_sample,
        )  # fmt: skip

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict:
        """Every round from the next to ``run.rounds`` (or until a signal), each preceded
        and followed by the components' work (record, progress, checkpoint); then the file
        and the summary. A stop signal abandons the round in progress and the run ends after
        the round before (:mod:`distfl.runtime.stopping`); an exception or a dead rank
        fails the round (:meth:`RoundFailures.fail`) and a KeyboardInterrupt ends the run
        (:meth:`RoundFailures.interrupted`), each after writing the last completed round."""
        try:
            return self._run()
        finally:
            self.room.release()

    def _run(self) -> dict:
        for component in self.components:
            component.at_start(self)
        self.timing.start_loop()
        first = self.state.rounds_done + 1
        self.live_round = self.state.rounds_done
        accuracy = last_finite(self.state.record.metrics["accuracy"])
        try:
            for t in range(first, self.config.run.rounds + 1):
                result = self._kept_round(t, first)
                if result is None:  # the run stops after round t - 1
                    break
                if result.evaluated:
                    accuracy = result.accuracy
                if self.stopping(t):
                    break
            try:
                self.phase = "stopping the workers"
                self.stop_workers()
            except CommError as exc:  # a rank died after the last round: the file is complete
                self.failures.fail(self, self.state.rounds_done, exc, None)
            summary = run_summary(self, first, accuracy)
        except Interrupted:
            raise  # the last completed round is written already
        except KeyboardInterrupt:  # a second Ctrl-C between rounds or after the last
            self.failures.interrupted(self, self.state.rounds_done + 1, None)
        self._end(summary)
        return summary

    def _end(self, summary: dict) -> None:
        """The components' work at the end (the last write of the file, the summary); what
        raises there fails the run as a round would, the file written as far as it can be."""
        try:
            for component in self.components:
                self.phase = component.label
                component.at_end(self, summary)
        except KeyboardInterrupt:
            self.failures.interrupted(self, self.state.rounds_done + 1, None)
        except RunFileWriteError:
            raise  # it says what the file holds
        except BaseException as exc:  # a plug-in's state, read for the file, say
            self.failures.fail(self, self.state.rounds_done, exc, None)

    def _kept_round(self, t: int, first: int) -> RoundResult | None:
        """Round ``t`` with the components' work before and after it, its state copied
        before it changes (:class:`RoundSnapshots`); None: a signal stops the run after
        round ``t - 1`` (the live state is that round's). A round that raises fails the run
        (:class:`RoundFailures`): any exception, a plug-in's UserError, SystemExit (whatever
        its code) and a plug-in's own BaseException included; a KeyboardInterrupt (a second
        Ctrl-C, or one a plug-in raised) interrupts it."""
        saved = None
        try:
            for component in self.components:  # (a hook a component may leave out)
                self.phase = component.label
                if hasattr(component, "before_round"):
                    component.before_round(self, t)
            if self.stopping(t - 1):  # a signal while the rounds before were written
                return None
            self.phase = "the copy of the last completed round"
            saved = self.snapshots.take(self.state)
            round_started = time.perf_counter()
            self.live_round = None
            with self.stop.abandonable(saved is not None):
                result = self.round(t, first, may_give_up=saved is not None)
            if result is None:  # given up at a stop signal: the run ends after round t - 1
                raise StopNow
            for component in self.components:  # the Recorder completes the round
                self.phase = component.label
                component.after_round(self, result)
            self.live_round = t
        except StopNow:
            try:
                self._given_up(saved)
            except KeyboardInterrupt:  # a second Ctrl-C while the round was given up
                self.failures.interrupted(self, t, saved)
            return None
        except KeyboardInterrupt:
            self.failures.interrupted(self, t, saved)
        except RunFileWriteError:
            raise  # it says what the file holds; every rank was stopped
        except DivergedError as exc:  # every rank stops alike on the same bounds
            if t == 1 and self.rounds_written is None:
                raise  # no round to keep
            raise self.failures.diverged(self, exc, saved) from None
        except BaseException as exc:  # a dead rank (CommError) and a failed worker too
            self.failures.fail(self, t, exc, saved)
        self.snapshots.weigh(time.perf_counter() - round_started)
        return result

    def _given_up(self, saved: dict | None) -> None:
        """A stop signal gave the round in progress up: the live state goes back to the
        snapshot ``saved`` of the round before (when the round had changed it)."""
        self.stop.settle()
        if saved is not None and self.live_round is None:
            self.state.put_back(saved)
            self.live_round = saved["round"]
        if not self.stop.name:
            self.stop.name = "a stop signal at a worker"

"""The server (rank 0): the run's parts, and what the components see of them
(:class:`~distfl.runtime.components.ServerView`). The rounds run over them in
:class:`~distfl.runtime.round_loop.RoundLoop`: the algorithm's plans (the server knows
algorithms only through :class:`~distfl.algorithms.ClusteringAlgorithm` and reads the
cluster tree the algorithm owns), the clients' work (:mod:`~distfl.runtime.client_steps`,
over the world's steps of :mod:`~distfl.runtime.steps`), the aggregation
(:mod:`~distfl.runtime.aggregation`), the evaluation and the components (record, progress,
checkpoint, summary: :mod:`~distfl.runtime.components`). What a round changes is the
run's state (:mod:`~distfl.runtime.run_state`); :mod:`~distfl.runtime.snapshots` copies it
before each round and :mod:`~distfl.runtime.failures` writes it when a round does not
complete."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TextIO

import numpy as np
import torch

from distfl.algorithms import Federation, build_algorithm, every_run_statistics
from distfl.comm.base import Communicator
from distfl.config import Config
from distfl.data import OwnerPopulation, Partition, Population
from distfl.models import flat_params, last_layer_span, last_linear, num_params
from distfl.participation.model import Participation
from distfl.progress import QuietOnBrokenPipe
from distfl.runfile.atomic import DiskReserve
from distfl.runfile.reader import RunFile
from distfl.runfile.tables import Record
from distfl.runtime.aggregation import ClusterAggregation
from distfl.runtime.client_steps import ClientSteps, client_op
from distfl.runtime.components import Component, OnDisk, default_components
from distfl.runtime.evaluation import Evaluation
from distfl.runtime.failures import RoundFailures
from distfl.runtime.newcomers import Newcomers
from distfl.runtime.placement import Placement
from distfl.runtime.protocol import StepOutput, sum_layout
from distfl.runtime.round_loop import RoundLoop
from distfl.runtime.run_state import RunState
from distfl.runtime.seeding import ModelSeeding
from distfl.runtime.snapshots import RoundSnapshots
from distfl.runtime.steps import WorldSteps
from distfl.runtime.stopping import StopFlag
from distfl.runtime.timing import RoundTiming
from distfl.runtime.worker import Worker
from distfl.train import trainer_choice


class Server:
    """Rank 0's part of a run (:meth:`run`)."""

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
        self.labels = labels
        #: progress and summary; a reader that went away (``| head``) costs no result
        self.stream = QuietOnBrokenPipe(stream or sys.stdout)
        self.num_clients = config.data.num_clients
        self.local_steps = config.train.local_steps
        #: the clients that never train (data.held_out), after the K trained
        self.newcomers = Newcomers.of(partition, self.num_clients)
        #: the K trained clients' ground-truth groups (int64), train and test samples
        self.federation_groups, self.num_train, self.num_test = self.newcomers.trained()
        placement = Placement(  # (every client's home: the newcomers' too)
            self.newcomers.num_train, config.train.batch_size, self.local_steps,
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
        #: who takes part in each round ([participation]); the algorithm draws through it
        self.participation = Participation(
            config, client_group=self.federation_groups, num_train=self.num_train,
            num_params=self.num_params,
        )  # fmt: skip
        layout = sum_layout(config.comm.sums, model)
        self.timing = RoundTiming()
        self.steps = WorldSteps(
            comm, layout=layout, local_steps=self.local_steps, placement=placement,
            local_worker=local_worker, stop=self.stop, timing=self.timing,
        )  # fmt: skip
        self.algorithm = build_algorithm(  # its pool of server work: the workers, if any
            config, self._federation(model, input_shape), pool=self.steps.pool(),
            participation=self.participation,
        )  # fmt: skip
        #: the cluster tree, owned by the algorithm: read here, never copied
        self.tree = self.algorithm.tree
        self.aggregation = ClusterAggregation.of_run(config, layout, self.num_params,
                                                     self.num_train)  # fmt: skip
        #: what a round changes (distfl.runtime.run_state): models, record, accuracies, ...
        self.state = self._first_state(seeding, model)
        #: the rounds' probes and trainings at the clients
        self.clients = ClientSteps(
            self.algorithm, self.steps, self.aggregation, self.state, self.timing,
            num_params=self.num_params, local_steps=self.local_steps,
            num_train=self.num_train, count=self.count,
        )  # fmt: skip
        #: when and how clients evaluate; what is done after each round and at the end
        self.evaluation = Evaluation()
        self.components = default_components() if components is None else components
        self._init_state(config)

    def _init_state(self, config: Config) -> None:
        """The run's bookkeeping before its first round (:meth:`restore` continues one)."""
        self.round_bytes = 0
        self.phase = "the round's start"  # what the round is doing (a failure names it)
        #: the copy of the last completed round taken before each round
        self.snapshots = RoundSnapshots()
        #: the run file: the room on its disk held for its next write (the checkpoint holds
        #: it), when it was first written, the round it holds
        self.file = OnDisk(DiskReserve(Path(config.run.out)))

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
        self.file.wrote(saved.created, self.state.rounds_done)  # the file resumed holds it
        self.state.complete(self.state.rounds_done)

    # -- what the components call ------------------------------------------------------

    def step(self, model_of: dict, tasks: dict[int, int], round_index: int, *,
             models: list[str] | None = None, **kw) -> tuple[list[str], StepOutput]:  # fmt: skip
        """Run one step of ``tasks`` over the world with the cluster models ``models``
        (default: those ``model_of`` names; :meth:`WorldSteps.run` says the rest: ``cost``,
        ``probe_op``, ``probe``, ``state``). The gathered rows come back sorted by client."""
        return self.clients.step(model_of, tasks, round_index, clusters=models, **kw)

    def probe(self, request, t: int, *, cost: np.ndarray | None = None) -> np.ndarray | None:
        """The rows of the probe ``request`` at the clients (:meth:`ClientSteps.probe`)."""
        return self.clients.probe(request, t, cost=cost)

    def client_op(self, op: str) -> int:
        """The 1-based index of ``op`` among the algorithm's client_ops."""
        return client_op(self.algorithm, op)

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

    # -- the run ---------------------------------------------------------------------

    def run(self) -> dict:
        """Every round from the next to ``run.rounds`` (or until a signal), then the file
        and the summary (:meth:`RoundLoop.run <distfl.runtime.round_loop.RoundLoop.run>`)."""
        return RoundLoop(self).run()

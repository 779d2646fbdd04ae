"""A worker: runs the tasks the server placed on it each step, materialising its clients'
data from the dataset every rank holds (a bounded cache keeps the recently used ones).

Training, evaluation and the exact sums are the runtime's; a probe is answered by the
algorithm's client half (:class:`distfl.algorithms.ClientHalf`), built on the first probe,
to which the worker offers itself as the :class:`~distfl.algorithms.ClientContext`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from distfl.algorithms import ClientHalf, algorithm_class, client_half
from distfl.algorithms.api.client_side import Prepared, ProbeAbandoned
from distfl.comm.base import Communicator
from distfl.config import Config
from distfl.data import (
    ClientCache,
    ClientData,
    Dataset,
    OwnerPopulation,
    Partition,
    Population,
    load_client,
)
from distfl.exact import NUM_LIMBS, element_scales, quantise_sum, segment_bounds, to_limbs
from distfl.models import build_model, load_flat, num_params
from distfl.plugins import AGGREGATORS
from distfl.runtime.pool import exchange
from distfl.runtime.privacy import clip_updates
from distfl.runtime.protocol import (
    AFTER,
    COMPUTE,
    EVAL,
    EVAL_WIDTH,
    FAILED,
    MAY_GIVE_UP,
    PROBE,
    RETURN_MODEL,
    STOP,
    TRAIN,
    Plan,
    StepOutput,
    empty_output,
    exchange_reports,
    failed_output,
    failure_report,
    run_step,
    sum_layout,
)
from distfl.train import build_trainer, finetune_seed, task_seed, trainer_kind
from distfl.train.sequential import evaluate_loaded


class TrainingLeft(Exception):
    """A stop signal between local steps of a round that may be given up (MAY_GIVE_UP)."""


class Worker:
    def __init__(
        self,
        config: Config,
        dataset: Dataset,
        partition: Partition | Population | OwnerPopulation,
        index: int,
        *,
        device: torch.device,
        comm_device: torch.device,
        stop: Any = None,
    ):
        self.config = config
        #: the process's stop flag (a signal's name once one came), read between the rows of
        #: a probe that may be given up (ClusteringAlgorithm.probe_abandonable)
        self.stop = stop
        self.abandonable = algorithm_class(config.algorithm.name).probe_abandonable
        #: this worker's index among the workers (its rank - 1; 0 for the in-process one)
        self.index = index
        self.device = device
        self.comm_device = comm_device
        self.model = build_model(
            config.model.name, dataset.input_shape, dataset.num_classes, params=config.model.params
        ).to(device)
        self.num_params = num_params(self.model)
        self.layout = sum_layout(config.comm.sums, self.model)
        self.trainer_name = trainer_kind(
            config.train.trainer, self.model, device, input_shape=tuple(dataset.input_shape),
            name=config.model.name,
        )  # fmt: skip
        #: the trainer takes each model's clients together (not one after another)
        self.together = self.trainer_name != "sequential"
        widest = int(np.max(partition.num_train(), initial=1))
        cls = algorithm_class(config.algorithm.name)
        self.trainer = build_trainer(
            self.trainer_name, self.model, config.train, device, pad_to=widest,
            cosine=cls.start_cosine(config.algorithm.params), sample_dp=config.privacy.sample_dp,
        )  # fmt: skip
        self.dataset, self.partition = dataset, partition
        self.cache = ClientCache(self._load, config.data.cache_mb * 2**20)
        self._client_half: ClientHalf | None = None
        # the aggregator's client weights: sample counts, or 1 each (FairAvg)
        self.uniform = AGGREGATORS.get(config.server.aggregator).uniform
        self.num_train = partition.num_train()
        self.train_seconds = 0.0
        self.client_steps = 0
        #: local steps each evaluated client takes before it is measured (the algorithm's
        #: ClusteringAlgorithm.evaluation_finetune), with the run's trainer and optimiser
        self.finetune_steps = int(
            algorithm_class(config.algorithm.name).evaluation_finetune(
                config.algorithm.params, local_steps=config.train.local_steps
            )
        )
        self._finetuner = None
        self._widest = widest

    def execute(self, plan: Plan, models: torch.Tensor) -> StepOutput:
        """Run the tasks placed on this worker, in the plan's order (ascending client, a
        client's several trainings in ascending model index)."""
        mine = [int(i) for i in plan.of_worker(self.index)]
        train_before = self.train_seconds
        loaded_before = self.cache.loaded
        trained = [i for i in mine if plan.tasks[i] & TRAIN]
        prepared: dict[int, Prepared] = {}
        probed = [i for i in mine if plan.tasks[i] & PROBE]
        probe_rows = self._probe_rows(plan, probed, models, prepared)
        evaluated = [i for i in mine if plan.tasks[i] & EVAL]
        eval_rows = self._eval_rows(plan, evaluated, models)
        between = self._leave_at_stop if plan.any(MAY_GIVE_UP) else None
        try:
            runs = self._train(plan, trained, models, prepared, between)
        except TrainingLeft:
            return self._left(plan, trained, eval_rows, probe_rows)
        if self.config.privacy.clip > 0:  # client-level DP: a client sends its update clipped
            runs = [(m, ps, clip_updates(new, models[m], self.config.privacy.clip), losses)
                    for m, ps, new, losses in runs]  # fmt: skip
        probe_rows += self._after_rows(plan, runs)
        out = self._trained_output(plan, models, runs, eval_rows, probe_rows)
        out.trained = len(trained)
        out.train_s = self.train_seconds - train_before
        out.loaded = self.cache.loaded - loaded_before
        out.cache_mb = self.cache.nbytes / 2**20
        return out

    def _probe_rows(
        self, plan: Plan, probed: list[int], models: torch.Tensor, prepared: dict[int, Prepared]
    ) -> list:
        """The probe rows ``[client, row...]`` of the tasks at ``probed``, before training:
        the models as broadcast. A task that also trains is its client's preparation, which
        goes to ``prepared`` (client -> :class:`Prepared`, checked). A row left
        at a stop signal is marked by the id -1 - k."""
        probe_rows: list = []
        for i in probed:
            k = int(plan.clients[i])
            if self.stopping():
                # a stop signal: the row is left, marked by the id -1 - k
                gone = np.full(plan.probe_width(), np.nan)
                probe_rows.append(np.concatenate([[-1 - k], gone]))
                continue
            try:
                row = self._probe(plan, i, models, prepared)
            except ProbeAbandoned:  # a stop signal in the row's local steps
                row = None
            if row is None:
                gone = np.full(plan.probe_width(), np.nan)
                probe_rows.append(np.concatenate([[-1 - k], gone]))
                continue
            probe_rows.append(np.concatenate([[k], row]))
        return probe_rows

    def _after_rows(self, plan: Plan, runs: list) -> list:
        """The rows ``[client, row...]`` of the tasks marked AFTER, from the models they
        trained (the client half's :meth:`~distfl.algorithms.api.client_side.ClientHalf.after`),
        in client order."""
        if not plan.any(AFTER):
            return []
        rows = []
        half, op = self._half(plan)
        name = algorithm_class(self.config.algorithm.name).name
        for _, positions, new, _ in runs:
            for j, i in enumerate(positions):
                if not plan.tasks[i] & AFTER:
                    continue
                k = int(plan.clients[i])
                answer = half.after(op, k, new[j], plan.state[i])
                row = self._answered(plan, answer, f"{name}'s op {op!r}",
                                     f"after client {k}'s training")  # fmt: skip
                rows.append((k, np.concatenate([[k], row])))
        return [row for _, row in sorted(rows, key=lambda kr: kr[0])]

    def _eval_rows(self, plan: Plan, evaluated: list[int], models: torch.Tensor) -> list:
        """The evaluation rows ``[client, balanced acc, acc, loss, n_test]`` of the tasks
        at ``evaluated``, in client order; each model loaded once. With a client-half op
        (``plan.probe_op``), the client half evaluates each client on all the models."""
        if plan.probe_op:
            return [self._half_evaluation(plan, i, models) for i in evaluated]
        eval_rows = []
        model_of = {int(plan.clients[i]): int(plan.model[i]) for i in evaluated}
        for m in sorted(set(model_of.values())):  # each model loaded once
            ks = [k for k in model_of if model_of[k] == m]
            if self.finetune_steps:
                eval_rows += self._finetuned_rows(ks, models[m], plan.round)
                continue
            load_flat(self.model, models[m].to(self.device))
            for k in ks:
                data = self.data(k)
                bal, acc, loss = evaluate_loaded(self.model, data, loss=self.config.train.loss)
                eval_rows.append([k, bal, acc, loss, float(data.y_test.shape[0])])
        eval_rows.sort(key=lambda row: row[0])
        return eval_rows

    def _half_evaluation(self, plan: Plan, i: int, models: torch.Tensor) -> list:
        """Task ``i``'s evaluation row as the algorithm's client half computes it (a
        mixture of the models, a personal model...)."""
        k = int(plan.clients[i])
        half, op = self._half(plan)
        bal, acc, loss = half.evaluate(op, k, models, plan.state[i])
        return [k, float(bal), float(acc), float(loss), float(self.data(k).y_test.shape[0])]

    def _trained_output(
        self, plan: Plan, models: torch.Tensor, runs: list[tuple[int, list[int], torch.Tensor,
        np.ndarray]], eval_rows: list, probe_rows: list,
    ) -> StepOutput:  # fmt: skip
        """The step's output once its tasks trained (``runs``: (model index, task positions,
        new flat models [n, P], loss rows [n, S]) for each group trained together): the loss
        rows, the models asked for, and the exact sums (or, with ``"scaled"``, the bounds
        that fix their grids)."""
        S = self.config.train.local_steps
        P = self.num_params
        G = plan.weight_bits()
        loss_rows, model_rows = [], []
        terms: dict[int, list] = {}  # model index -> [(start, new [n, P], w [n], q [n])]
        for m, positions, new, losses in runs:
            q = torch.tensor([self._weight_units(plan, i, G) for i in positions], dtype=torch.int64)
            w = q.to(torch.float64) * 2.0**-G  # exact: q < 2^53
            terms.setdefault(m, []).append((models[m].to(self.device), new, w, q))
            for j, i in enumerate(positions):
                k = int(plan.clients[i])
                loss_rows.append((i, np.concatenate([[k], losses[j]])))
                if plan.tasks[i] & RETURN_MODEL:
                    model_rows.append((i, new[j].cpu()))
        loss_rows = [row for _, row in sorted(loss_rows, key=lambda ir: ir[0])]
        model_rows = [row for _, row in sorted(model_rows, key=lambda ir: ir[0])]
        out = StepOutput(
            loss_rows=torch.tensor(np.array(loss_rows), dtype=torch.float64).reshape(-1, 1 + S),
            sums=None,
            eval_rows=torch.tensor(eval_rows, dtype=torch.float64).reshape(-1, EVAL_WIDTH),
            model_rows=(
                torch.stack(model_rows) if model_rows else torch.zeros((0, P), dtype=torch.float32)
            ),
            probe_rows=torch.tensor(np.array(probe_rows), dtype=torch.float64).reshape(
                -1, 1 + plan.probe_width()
            ),
            stopped=bool(self.stop is not None and self.stop.name),
        )
        if plan.any(TRAIN):
            if self.layout.kind == "scaled":
                L = len(self.layout.segments)
                out.bounds = torch.zeros((plan.num_models, L), dtype=torch.float64)
                for m, parts in terms.items():
                    for start, new, w, _ in parts:
                        bound = segment_bounds(new, start, w, self.layout.segments)
                        out.bounds[m] = torch.maximum(out.bounds[m], bound)
                out.finish_sums = lambda exponents: self._scaled_sums(plan, terms, exponents)
            else:
                out.sums = self._limb_sums(plan, terms)
        return out

    def _weight_units(self, plan: Plan, i: int, bits: int) -> int:
        """q of task ``i``: round(γ 2^G) times its client's count (1 with FairAvg, else its
        train samples), the integer its update's weight is 2^-G of."""
        base = 1 if self.uniform else int(self.num_train[int(plan.clients[i])])
        return int(round(float(plan.weight[i]) * 2.0**bits)) * base

    def _finetuned_rows(self, clients: list[int], start: torch.Tensor, round_index: int) -> list:
        """Evaluation rows of ``clients`` after each took :attr:`finetune_steps` local steps
        from ``start`` on its train split (seeded from (seed, round, client) alone, so any
        world size gives the same bits); ``start`` itself is left as it is."""
        if self._finetuner is None:
            cfg = dataclasses.replace(self.config.train, local_steps=self.finetune_steps)
            self._finetuner = build_trainer(
                self.trainer_name, self.model, cfg, self.device, pad_to=self._widest
            )
        t0 = time.perf_counter()
        start = start.to(self.device)
        seed = self.config.run.seed
        seeds = [finetune_seed(seed, round_index, k) for k in clients]
        if self.together:
            new, _ = self._finetuner.train_many(start, [self.data(k) for k in clients], seeds)
        else:
            new = torch.stack([
                self._finetuner.train(start, self.data(k), seed=s)[0]
                for k, s in zip(clients, seeds, strict=True)
            ])  # fmt: skip
        self.train_seconds += time.perf_counter() - t0
        rows = []
        for i, k in enumerate(clients):
            load_flat(self.model, new[i])
            data = self.data(k)
            bal, acc, loss = evaluate_loaded(self.model, data, loss=self.config.train.loss)
            rows.append([k, bal, acc, loss, float(data.y_test.shape[0])])
        return rows

    def _leave_at_stop(self) -> None:
        if self.stop is not None and self.stop.name:
            raise TrainingLeft

    def _left(
        self, plan: Plan, trained: list[int], eval_rows: list, probe_rows: list
    ) -> StepOutput:
        """The step's output once a stop signal left the training: every collective is still
        joined, with zero sums and models and the loss rows ``[-1 - client, NaN...]`` that
        tell the server to discard the round."""
        out = empty_output(plan, num_steps=self.config.train.local_steps, layout=self.layout,
                           device=self.comm_device)  # fmt: skip
        S = self.config.train.local_steps
        out.loss_rows = torch.tensor(
            [[-1 - int(plan.clients[i])] + [np.nan] * S for i in trained], dtype=torch.float64
        ).reshape(-1, 1 + S)
        returned = sum(1 for i in trained if plan.tasks[i] & RETURN_MODEL)
        out.model_rows = torch.zeros((returned, self.num_params), dtype=torch.float32)
        out.eval_rows = torch.tensor(eval_rows, dtype=torch.float64).reshape(-1, EVAL_WIDTH)
        gone = np.full(plan.probe_width(), np.nan)
        probe_rows = probe_rows + [
            np.concatenate([[-1 - int(plan.clients[i])], gone])
            for i in trained if plan.tasks[i] & AFTER
        ]  # fmt: skip
        out.probe_rows = torch.tensor(np.array(probe_rows), dtype=torch.float64).reshape(
            -1, 1 + plan.probe_width()
        )
        out.stopped = True
        return out

    def _scaled_sums(self, plan: Plan, terms: dict, exponents: torch.Tensor) -> torch.Tensor:
        """[M, P + 1] int64: each model's Σ_k round(w_k Δθ_k 2^-e) on its grids, Σ q_k."""
        P = self.num_params
        sums = torch.zeros((plan.num_models, P + 1), dtype=torch.int64, device=self.device)
        step = max(1, (1 << 16) // max(P, 1))  # clients per call: temporaries stay in cache
        for m, parts in terms.items():
            scales = element_scales(exponents[m], self.layout.segments).to(self.device)
            for start, new, w, q in parts:
                for lo in range(0, new.shape[0], step):
                    sums[m, :P] += quantise_sum(
                        new[lo : lo + step], start, w[lo : lo + step], scales
                    )
                sums[m, P] += int(q.sum())
        return sums

    def _limb_sums(self, plan: Plan, terms: dict) -> torch.Tensor:
        """[M, 3P + 1] int64: each model's Σ w_k Δθ_k as limbs on the 2^-64 grid, Σ q_k."""
        P = self.num_params
        sums = torch.zeros((plan.num_models, NUM_LIMBS, P), dtype=torch.int64)
        weights = torch.zeros(plan.num_models, dtype=torch.int64)
        step = max(1, (1 << 22) // max(P, 1))
        for m, parts in terms.items():
            for start, new, w, q in parts:
                start = start.to(torch.float64)
                for lo in range(0, new.shape[0], step):
                    delta = (new[lo : lo + step].to(torch.float64) - start) * w[
                        lo : lo + step, None
                    ].to(start.device)
                    limbs = to_limbs(delta.reshape(-1).cpu()).reshape(NUM_LIMBS, -1, P)
                    sums[m] += limbs.sum(dim=1)
                weights[m] += int(q.sum())
        return torch.cat([sums.reshape(plan.num_models, -1), weights[:, None]], dim=1)

    # -- the ClientContext a client half sees ---------------------------------------------

    def data(self, client: int) -> ClientData:
        """Client ``client``'s data: from the cache, or materialised from the dataset every
        rank holds (and cached)."""
        return self.cache.get(client)

    def _load(self, client: int) -> ClientData:
        cfg = self.config
        return load_client(
            self.dataset, self.partition, client, self.device,
            groups=cfg.groups, seed=cfg.run.effective_data_seed(),
        )  # fmt: skip

    def stopping(self) -> bool:
        """Whether a stop signal came and this run's probe may be given up (the client
        half's :meth:`~distfl.algorithms.ClientContext.stopping`)."""
        return bool(self.abandonable and self.stop is not None and self.stop.name)

    def _half(self, plan: Plan) -> tuple[ClientHalf, str]:
        """The algorithm's client half (built on first use) and the step's op."""
        cls = algorithm_class(self.config.algorithm.name)
        if not 1 <= plan.probe_op <= len(cls.client_ops):
            raise RuntimeError(f"{cls.name} has no client op number {plan.probe_op}")
        if self._client_half is None:
            self._client_half = client_half(cls)(self.config.algorithm.params, self)
        return self._client_half, cls.client_ops[plan.probe_op - 1]

    def _probe(
        self, plan: Plan, i: int, models: torch.Tensor, prepared: dict[int, Prepared]
    ) -> np.ndarray:
        """The client half's row for task ``i``: its probe's, or, for a task that trains,
        its preparation's (which, checked, goes to ``prepared``)."""
        half, op = self._half(plan)
        client = int(plan.clients[i])
        name = algorithm_class(self.config.algorithm.name).name
        if plan.tasks[i] & TRAIN:
            answer = half.prepare(op, client, models, plan.state[i])
            if isinstance(answer, Prepared):
                prepared[client] = self._checked(answer, plan, client, f"{name}'s op {op!r}")
                answer = answer.row
        else:
            answer = half.run(op, client, models, plan.probe.args)
        return self._answered(plan, answer, f"{name}'s op {op!r}", f"for client {client}")

    @staticmethod
    def _answered(plan: Plan, answer, who: str, whose: str) -> np.ndarray:
        """A client half's row as float64 [width], checked against the step's width."""
        row = np.asarray(answer, dtype=np.float64).reshape(-1)
        if row.shape != (plan.probe.width,):
            raise RuntimeError(
                f"{who} answered {row.shape[0]} values {whose}, not {plan.probe.width}"
            )
        return row

    def _checked(self, answer: Prepared, plan: Plan, client: int, who: str) -> Prepared:
        """A client half's :class:`Prepared`, its per-sample weights (float32 [trainings,
        n_train]) and its start and pull (float32 [P] tensors on the device) checked."""
        count = int(np.count_nonzero(plan.clients == client))
        weights = None
        if answer.sample_weights is not None:
            weights = np.asarray(answer.sample_weights, dtype=np.float32)
            expected = (count, self.data(client).num_train)
            if weights.shape != expected:
                raise RuntimeError(
                    f"{who} gave client {client} sample weights of shape {weights.shape}, "
                    f"not {expected} (trainings, samples)"
                )
        start = pull = None
        if answer.start is not None:
            if weights is not None:
                raise RuntimeError(f"{who} gave client {client} both a start and sample weights")
            start = self._flat(answer.start, who, client, "start")
            if answer.pull is not None:
                pull = self._flat(answer.pull, who, client, "pull")
        elif answer.pull is not None:
            raise RuntimeError(f"{who} gave client {client} a pull without a start")
        return Prepared(answer.row, weights, start, pull, float(answer.pull_mu))

    def _flat(self, value, who: str, client: int, what: str) -> torch.Tensor:
        flat = torch.as_tensor(np.asarray(value, dtype=np.float32)).reshape(-1)
        if flat.numel() != self.num_params:
            raise RuntimeError(
                f"{who} gave client {client} a {what} of {flat.numel()} values, not the "
                f"model's {self.num_params}"
            )
        return flat.to(self.device)

    def _train(
        self, plan: Plan, trained: list[int], models: torch.Tensor,
        prepared: dict[int, Prepared], between=None,
    ) -> list[tuple[int, list[int], torch.Tensor, np.ndarray]]:  # fmt: skip
        """Train the tasks at ``trained`` from their models: (model index, task positions,
        new flat models [n, P], losses [n, S]) for each group trained together (the tasks
        of one model, those with per-sample weights from ``prepared`` apart). Each task's
        seed is (seed, round, client, its position among its client's tasks). The
        vectorised trainer takes a group's clients together. A client whose preparation
        gave a start trains once, alone, from it (seed slot 0): its model is each of its
        tasks' (:meth:`_started`). ``between`` is called before every local step (it
        raises TrainingLeft)."""
        t0 = time.perf_counter()
        seed = self.config.run.seed
        slots = plan.slots()
        groups: dict[tuple[int, bool], list[int]] = {}
        started: dict[int, list[int]] = {}
        for i in trained:
            k = int(plan.clients[i])
            ready = prepared.get(k)
            if ready is not None and ready.start is not None:
                started.setdefault(k, []).append(i)
                continue
            weighted = ready is not None and ready.sample_weights is not None
            groups.setdefault((int(plan.model[i]), weighted), []).append(i)
        out = self._started(plan, started, prepared, between)
        for (m, weighted), positions in sorted(groups.items()):
            start = models[m].to(self.device)
            ks = [int(plan.clients[i]) for i in positions]
            seeds = [task_seed(seed, plan.round, k, int(slots[i])) for k, i in
                     zip(ks, positions, strict=True)]  # fmt: skip
            weights = None
            if weighted:
                weights = [
                    torch.from_numpy(prepared[k].sample_weights[int(slots[i])]).to(self.device)
                    for k, i in zip(ks, positions, strict=True)
                ]
            datas = [self.data(k) for k in ks]
            if self.together:
                new, losses = self.trainer.train_many(start, datas, seeds, between,
                                                      weights=weights)  # fmt: skip
            else:
                runs = [
                    self.trainer.train(start, d, seed=s, between=between,
                                       weights=None if weights is None else weights[j])
                    for j, (d, s) in enumerate(zip(datas, seeds, strict=True))
                ]  # fmt: skip
                new = torch.stack([r[0] for r in runs])
                losses = np.stack([r[1] for r in runs])
            out.append((m, positions, new, losses))
        self.train_seconds += time.perf_counter() - t0
        trainings = len(trained) - sum(len(ps) - 1 for ps in started.values())
        self.client_steps += trainings * self.config.train.local_steps
        return out

    def _started(
        self, plan: Plan, started: dict[int, list[int]], prepared: dict[int, Prepared], between,
    ) -> list[tuple[int, list[int], torch.Tensor, np.ndarray]]:  # fmt: skip
        """The trainings of the clients whose preparation gave a start: each client trains
        once, alone (its bits independent of its company), from its start with its pull;
        the model and losses stand for each of its tasks, one group per task (each task's
        sum takes the change from its own model)."""
        out = []
        seed = self.config.run.seed
        for k, positions in sorted(started.items()):
            ready = prepared[k]
            pull = None if ready.pull is None else (ready.pull, ready.pull_mu)
            s = task_seed(seed, plan.round, k, 0)
            if self.together:
                new, losses = self.trainer.train_many(
                    ready.start, [self.data(k)], [s], between, pull=pull
                )
            else:
                flat, loss = self.trainer.train(
                    ready.start, self.data(k), seed=s, between=between, pull=pull
                )
                new, losses = flat[None], loss[None]
            for i in positions:
                out.append((int(plan.model[i]), [i], new, losses))
        return out


def worker_loop(config: Config, comm: Communicator, worker: Worker) -> None:
    """A worker rank: take part in every step until the server's stop.

    Its tasks raising (a plug-in's code: an algorithm's client half, a model, a dataset's
    samples; any exception, SystemExit and a plug-in's own BaseException included; in a
    pooled job, what is no Exception) do not end the process: the worker joins the rest of
    the step with rows of NaN and says so in its timing row
    (:func:`~distfl.runtime.protocol.failed_output`), the server writes the last completed
    round, and at its ``FAILED`` step the worker sends the failure's report
    (:func:`~distfl.runtime.protocol.exchange_reports`) and ends. A KeyboardInterrupt (a
    second Ctrl-C) ends the process at once."""
    report: bytes | None = None

    def raised(exc: BaseException) -> None:
        nonlocal report
        report = failure_report(exc)

    def execute(plan: Plan, models: torch.Tensor) -> StepOutput:
        try:
            return worker.execute(plan, models)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raised(exc)
            return failed_output(
                plan, rank=comm.rank, world_size=comm.world_size,
                num_steps=config.train.local_steps, layout=worker.layout,
                device=worker.comm_device,
            )  # fmt: skip

    while True:
        plan, _ = run_step(
            comm,
            None,
            None,
            layout=worker.layout,
            num_steps=config.train.local_steps,
            execute=execute,
        )
        if plan.kind == STOP:
            return
        if plan.kind == FAILED:
            exchange_reports(comm, report)
            return
        if plan.kind == COMPUTE:
            stop = worker.stop if plan.round & MAY_GIVE_UP else None
            exchange(comm, None, stop=stop, raised=raised)

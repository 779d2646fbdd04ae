"""A worker: runs the tasks the server placed on it each step, materialising its clients'
data from the dataset every rank holds (a bounded cache keeps the recently used ones).

Training, evaluation and the exact sums are the runtime's; a probe is answered by the
algorithm's client half (:class:`distfl.algorithms.ClientHalf`), built on the first probe,
to which the worker offers itself as the :class:`~distfl.algorithms.ClientContext`.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from distfl.aggregators import AGGREGATORS
from distfl.algorithms import ClientHalf, algorithm_class, client_half
from distfl.comm.base import Communicator
from distfl.config import Config
from distfl.data import ClientCache, ClientData, Dataset, Partition, Population, load_client
from distfl.exact import NUM_LIMBS, to_limbs
from distfl.models import build_model, num_params
from distfl.runtime.protocol import (
    EVAL,
    EVAL_WIDTH,
    PROBE,
    RETURN_MODEL,
    STOP,
    TRAIN,
    Plan,
    StepOutput,
    run_step,
)
from distfl.train import SequentialTrainer, VectorisedTrainer, client_seed, evaluate, trainer_kind


class Worker:
    def __init__(
        self,
        config: Config,
        dataset: Dataset,
        partition: Partition | Population,
        index: int,
        *,
        device: torch.device,
        comm_device: torch.device,
    ):
        self.config = config
        #: this worker's index among the workers (its rank - 1; 0 for the in-process one)
        self.index = index
        self.device = device
        self.comm_device = comm_device
        self.model = build_model(
            config.model.name, dataset.input_shape, dataset.num_classes, hidden=config.model.hidden
        ).to(device)
        self.num_params = num_params(self.model)
        self.vectorised = trainer_kind(config.train.trainer, self.model) == "vectorised"
        if self.vectorised:
            self.trainer = VectorisedTrainer(self.model, config.train, device)
        else:
            self.trainer = SequentialTrainer(self.model, config.train, device)
        self.dataset, self.partition = dataset, partition
        self.cache = ClientCache(self._load, config.data.cache_mb * 2**20)
        self._client_half: ClientHalf | None = None
        # the aggregator's client weights: sample counts, or 1 each (FairAvg)
        self.uniform = AGGREGATORS[config.server.aggregator].uniform
        self.num_train = partition.num_train()
        self.train_seconds = 0.0
        self.client_steps = 0

    def execute(self, plan: Plan, models: torch.Tensor) -> StepOutput:
        """Run the tasks placed on this worker, in ascending client order."""
        S = self.config.train.local_steps
        P = self.num_params
        mine = plan.of_worker(self.index)
        own = [int(k) for k in plan.clients[mine]]
        model_of = dict(zip(own, (int(m) for m in plan.model[mine]), strict=True))
        bits = dict(zip(own, (int(b) for b in plan.tasks[mine]), strict=True))
        loss_rows, eval_rows, model_rows, probe_rows = [], [], [], []
        train_before = self.train_seconds
        loaded_before = self.cache.loaded
        sums = None
        if plan.any(TRAIN):
            sums = torch.zeros((plan.num_models, NUM_LIMBS, P), dtype=torch.int64)
            weights = torch.zeros(plan.num_models, dtype=torch.int64)
        for k in own:
            if bits[k] & PROBE:  # before training: the models as broadcast
                probe_rows.append(np.concatenate([[k], self._probe(plan, k, models)]))
            if bits[k] & EVAL:
                data = self.data(k)
                bal, acc, loss = evaluate(
                    self.model, models[model_of[k]], data, loss=self.config.train.loss
                )
                eval_rows.append([k, bal, acc, loss, float(data.y_test.shape[0])])
        trained = [k for k in own if bits[k] & TRAIN]
        by_model = self._train(trained, model_of, plan.round, models)
        for m, (ks, new, losses) in by_model.items():
            start = models[m].to(self.device, torch.float64)
            counts = torch.tensor(
                [1 if self.uniform else int(self.num_train[k]) for k in ks], dtype=torch.float64
            )
            # exact sums of n_k (θ_k - θ), many clients per call (chunks bound the temporaries)
            step = max(1, (1 << 22) // max(P, 1))
            for lo in range(0, len(ks), step):
                delta = (new[lo : lo + step].to(torch.float64) - start) * counts[
                    lo : lo + step, None
                ]
                limbs = to_limbs(delta.reshape(-1).cpu()).reshape(NUM_LIMBS, -1, P)
                sums[m] += limbs.sum(dim=1)
            weights[m] += int(counts.sum())
            for i, k in enumerate(ks):
                loss_rows.append(np.concatenate([[k], losses[i]]))
                if bits[k] & RETURN_MODEL:
                    model_rows.append((k, new[i].cpu()))
        loss_rows.sort(key=lambda row: row[0])
        model_rows = [row for _, row in sorted(model_rows, key=lambda kr: kr[0])]
        out_sums = None
        if sums is not None:
            out_sums = torch.cat([sums.reshape(plan.num_models, -1), weights[:, None]], dim=1)
            out_sums = out_sums.to(self.comm_device)
        return StepOutput(
            loss_rows=torch.tensor(np.array(loss_rows), dtype=torch.float64).reshape(-1, 1 + S),
            sums=out_sums,
            eval_rows=torch.tensor(eval_rows, dtype=torch.float64).reshape(-1, EVAL_WIDTH),
            model_rows=(
                torch.stack(model_rows) if model_rows else torch.zeros((0, P), dtype=torch.float32)
            ),
            probe_rows=torch.tensor(np.array(probe_rows), dtype=torch.float64).reshape(
                -1, 1 + plan.probe_width()
            ),
            trained=len(trained),
            train_s=self.train_seconds - train_before,
            loaded=self.cache.loaded - loaded_before,
            cache_mb=self.cache.nbytes / 2**20,
        )

    # -- the ClientContext a client half sees ---------------------------------------------

    def data(self, client: int) -> ClientData:
        """Client ``client``'s data: from the cache, or materialised from the dataset every
        rank holds (and cached)."""
        return self.cache.get(client)

    def _load(self, client: int) -> ClientData:
        cfg = self.config
        return load_client(
            self.dataset, self.partition, client, self.device,
            groups=cfg.groups, seed=cfg.run.seed,
        )  # fmt: skip

    def _probe(self, plan: Plan, client: int, models: torch.Tensor) -> np.ndarray:
        """The client half's row for ``client``."""
        cls = algorithm_class(self.config.algorithm.name)
        if not 1 <= plan.probe_op <= len(cls.client_ops):
            raise RuntimeError(f"{cls.name} has no probe number {plan.probe_op}")
        if self._client_half is None:
            self._client_half = client_half(cls)(self.config.algorithm.params, self)
        op = cls.client_ops[plan.probe_op - 1]
        row = np.asarray(
            self._client_half.run(op, client, models, plan.probe.args), dtype=np.float64
        ).reshape(-1)
        if row.shape != (plan.probe.width,):
            raise RuntimeError(
                f"{cls.name}'s probe {op!r} answered {row.shape[0]} values for client "
                f"{client}, not {plan.probe.width}"
            )
        return row

    def _train(
        self, clients: list[int], model_of: dict[int, int], round_index: int, models: torch.Tensor
    ) -> dict[int, tuple[list[int], torch.Tensor, np.ndarray]]:
        """Train ``clients`` from their cluster models. Per model index: (clients, new flat
        models [n, P], losses [n, S]). The vectorised trainer takes each model's clients
        together."""
        t0 = time.perf_counter()
        seed = self.config.run.seed
        by_model: dict[int, list[int]] = {}
        for k in clients:
            by_model.setdefault(model_of[k], []).append(k)
        out = {}
        for m, ks in by_model.items():
            start = models[m].to(self.device)
            seeds = [client_seed(seed, round_index, k) for k in ks]
            if self.vectorised:
                new, losses = self.trainer.train_many(start, [self.data(k) for k in ks], seeds)
            else:
                runs = [
                    self.trainer.train(start, self.data(k), seed=s)
                    for k, s in zip(ks, seeds, strict=True)
                ]
                new = torch.stack([r[0] for r in runs])
                losses = np.stack([r[1] for r in runs])
            out[m] = (ks, new, losses)
        self.train_seconds += time.perf_counter() - t0
        self.client_steps += len(clients) * self.config.train.local_steps
        return out


def worker_loop(config: Config, comm: Communicator, worker: Worker) -> None:
    """A worker rank: take part in every step until the server's stop."""
    while True:
        plan, _ = run_step(
            comm,
            None,
            None,
            num_params=worker.num_params,
            num_steps=config.train.local_steps,
            execute=worker.execute,
        )
        if plan.kind == STOP:
            return

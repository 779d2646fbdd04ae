"""A worker: hosts a contiguous shard of the clients and runs their tasks each step."""

from __future__ import annotations

import time

import numpy as np
import torch

from distfl.config import Config
from distfl.data import Dataset, Partition, load_clients
from distfl.exact import NUM_LIMBS, to_limbs
from distfl.models import build_model, num_params
from distfl.runtime.protocol import EVAL, EVAL_WIDTH, RETURN_MODEL, TRAIN, Plan, StepOutput
from distfl.train import SequentialTrainer, VectorisedTrainer, client_seed, evaluate, supports


class Worker:
    def __init__(
        self,
        config: Config,
        dataset: Dataset,
        partition: Partition,
        clients: range,
        *,
        device: torch.device,
        comm_device: torch.device,
    ):
        self.config = config
        self.clients = clients
        self.device = device
        self.comm_device = comm_device
        self.model = build_model(
            config.model.name, dataset.input_shape, dataset.num_classes, hidden=config.model.hidden
        ).to(device)
        self.num_params = num_params(self.model)
        self.vectorised = config.train.trainer == "vectorised" or (
            config.train.trainer == "auto" and supports(self.model)
        )
        if self.vectorised:
            self.trainer = VectorisedTrainer(self.model, config.train, device)
        else:
            self.trainer = SequentialTrainer(self.model, config.train, device)
        self.data = load_clients(
            dataset, partition, clients, device, groups=config.groups, seed=config.run.seed
        )
        self.train_seconds = 0.0
        self.client_steps = 0

    def execute(self, plan: Plan, models: torch.Tensor) -> StepOutput:
        """Run the tasks of this worker's clients, in ascending client order."""
        S = self.config.train.local_steps
        P = self.num_params
        own = [k for k in self.clients if plan.tasks[k]]
        loss_rows, eval_rows, model_rows = [], [], []
        sums = None
        if plan.any(TRAIN):
            sums = torch.zeros((plan.num_models, NUM_LIMBS, P), dtype=torch.int64)
            weights = torch.zeros(plan.num_models, dtype=torch.int64)
        for k in own:
            if plan.tasks[k] & EVAL:
                data = self.data[k]
                bal, acc, loss = evaluate(self.model, models[int(plan.model_of[k])], data)
                eval_rows.append([k, bal, acc, loss, float(data.y_test.shape[0])])
        trained = self._train([k for k in own if plan.tasks[k] & TRAIN], plan, models)
        for k in own:
            task = int(plan.tasks[k])
            m = int(plan.model_of[k])
            if task & TRAIN:
                start = models[m].to(self.device)
                new, losses = trained[k]
                n = self.data[k].num_train
                delta = (new.to(torch.float64) - start.to(torch.float64)) * float(n)
                sums[m] += to_limbs(delta.cpu())
                weights[m] += n
                loss_rows.append(np.concatenate([[k], losses]))
                if task & RETURN_MODEL:
                    model_rows.append(new.cpu())
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
        )

    def _train(
        self, clients: list[int], plan: Plan, models: torch.Tensor
    ) -> dict[int, tuple[torch.Tensor, np.ndarray]]:
        """Train ``clients`` from their cluster models: (new flat model, losses) per client.
        The vectorised trainer takes each cluster model's clients together."""
        t0 = time.perf_counter()
        seed = self.config.run.seed
        out: dict[int, tuple[torch.Tensor, np.ndarray]] = {}
        if self.vectorised:
            by_model: dict[int, list[int]] = {}
            for k in clients:
                by_model.setdefault(int(plan.model_of[k]), []).append(k)
            for m, ks in by_model.items():
                new, losses = self.trainer.train_many(
                    models[m].to(self.device),
                    [self.data[k] for k in ks],
                    [client_seed(seed, plan.round, k) for k in ks],
                )
                for i, k in enumerate(ks):
                    out[k] = (new[i], losses[i])
        else:
            for k in clients:
                out[k] = self.trainer.train(
                    models[int(plan.model_of[k])].to(self.device),
                    self.data[k],
                    seed=client_seed(seed, plan.round, k),
                )
        self.train_seconds += time.perf_counter() - t0
        self.client_steps += len(clients) * self.config.train.local_steps
        return out

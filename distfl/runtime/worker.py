"""A worker: hosts a contiguous shard of the clients and runs their tasks each step."""

from __future__ import annotations

import time

import numpy as np
import torch

from distfl.aggregators import AGGREGATORS
from distfl.config import Config
from distfl.data import Dataset, Partition, load_clients
from distfl.exact import NUM_LIMBS, to_limbs
from distfl.models import build_model, num_params
from distfl.runtime.protocol import (
    EVAL,
    EVAL_WIDTH,
    PROBE,
    PROBE_EMD,
    RETURN_MODEL,
    TRAIN,
    Plan,
    StepOutput,
)
from distfl.train import (
    SequentialTrainer,
    VectorisedTrainer,
    client_seed,
    evaluate,
    supports,
    train_losses,
)


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
        self.dataset, self.partition = dataset, partition
        self._emd_samples: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
        # the aggregator's client weights: sample counts, or 1 each (FairAvg)
        self.uniform = AGGREGATORS[config.server.aggregator].uniform
        self.train_seconds = 0.0
        self.client_steps = 0

    def execute(self, plan: Plan, models: torch.Tensor) -> StepOutput:
        """Run the tasks of this worker's clients, in ascending client order."""
        S = self.config.train.local_steps
        P = self.num_params
        own = [k for k in self.clients if plan.tasks[k]]
        loss_rows, eval_rows, model_rows, probe_rows = [], [], [], []
        sums = None
        if plan.any(TRAIN):
            sums = torch.zeros((plan.num_models, NUM_LIMBS, P), dtype=torch.int64)
            weights = torch.zeros(plan.num_models, dtype=torch.int64)
        for k in own:
            if plan.tasks[k] & PROBE:  # before training: the models as broadcast
                losses = train_losses(
                    self.model, models.to(self.device), self.data[k], loss=self.config.train.loss
                )
                probe_rows.append(np.concatenate([[k], losses]))
            if plan.tasks[k] & PROBE_EMD:
                row = self._emd_row(k, models[0].to(self.device), plan)
                probe_rows.append(np.concatenate([[k], row]))
            if plan.tasks[k] & EVAL:
                data = self.data[k]
                bal, acc, loss = evaluate(
                    self.model, models[int(plan.model_of[k])], data, loss=self.config.train.loss
                )
                eval_rows.append([k, bal, acc, loss, float(data.y_test.shape[0])])
        by_model = self._train([k for k in own if plan.tasks[k] & TRAIN], plan, models)
        for m, (ks, new, losses) in by_model.items():
            start = models[m].to(self.device, torch.float64)
            counts = torch.tensor(
                [1 if self.uniform else self.data[k].num_train for k in ks], dtype=torch.float64
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
                if plan.tasks[k] & RETURN_MODEL:
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
        )

    def _emd_samples_of_all(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """(embedding, validation) samples of every client, from its train split. Every rank
        holds the dataset, so the worker materialises other clients' samples itself."""
        if self._emd_samples is None:
            from distfl.algorithms.emdcfl import embed_sets

            cfg = self.config
            out = {}
            for k in range(cfg.data.num_clients):
                data = self.data.get(k) or load_clients(
                    self.dataset, self.partition, range(k, k + 1), self.device,
                    groups=cfg.groups, seed=cfg.run.seed,
                )[k]  # fmt: skip
                emb, val = embed_sets(
                    data.num_train, cfg.algorithm.emd_samples, seed=cfg.run.seed, client=k
                )
                out[k] = (data.x_train[emb], data.x_train[val])
            self._emd_samples = out
        return self._emd_samples

    def _emd_row(self, k: int, start: torch.Tensor, plan: Plan) -> np.ndarray:
        """Train client k for ``plan.flags`` steps from ``start`` into ω_k, then its row of
        EMD-CFL distances over every client."""
        import dataclasses

        from distfl.algorithms.emdcfl import emd_row
        from distfl.models import load_flat

        cfg = self.config
        local = SequentialTrainer(
            self.model, dataclasses.replace(cfg.train, local_steps=plan.flags), self.device
        )
        omega, _ = local.train(start, self.data[k], seed=client_seed(cfg.run.seed, 0, k))
        load_flat(self.model, omega)
        samples = self._emd_samples_of_all()
        a = cfg.algorithm
        return emd_row(
            self.model, k, {c: s[0] for c, s in samples.items()}, samples[k][1],
            ratio=a.emd_projection, seed=cfg.run.seed, solver=a.emd_solver, reg=a.emd_reg,
        )  # fmt: skip

    def _train(
        self, clients: list[int], plan: Plan, models: torch.Tensor
    ) -> dict[int, tuple[list[int], torch.Tensor, np.ndarray]]:
        """Train ``clients`` from their cluster models. Per model index: (clients, new flat
        models [n, P], losses [n, S]). The vectorised trainer takes each model's clients
        together."""
        t0 = time.perf_counter()
        seed = self.config.run.seed
        by_model: dict[int, list[int]] = {}
        for k in clients:
            by_model.setdefault(int(plan.model_of[k]), []).append(k)
        out = {}
        for m, ks in by_model.items():
            start = models[m].to(self.device)
            seeds = [client_seed(seed, plan.round, k) for k in ks]
            if self.vectorised:
                new, losses = self.trainer.train_many(start, [self.data[k] for k in ks], seeds)
            else:
                runs = [
                    self.trainer.train(start, self.data[k], seed=s)
                    for k, s in zip(ks, seeds, strict=True)
                ]
                new = torch.stack([r[0] for r in runs])
                losses = np.stack([r[1] for r in runs])
            out[m] = (ks, new, losses)
        self.train_seconds += time.perf_counter() - t0
        self.client_steps += len(clients) * self.config.train.local_steps
        return out

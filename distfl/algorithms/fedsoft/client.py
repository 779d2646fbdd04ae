"""FedSoft's client half: the importance estimate, the start (and pull) of a client's
training, and its evaluation on its personal model."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.algorithms.fedsoft.algorithm import (
    ESTIMATE,
    PERSONAL,
    START,
    importance_weights,
    mix_of,
    split_row,
)
from distfl.train import sample_losses
from distfl.train.sequential import evaluate


class FedSoftClient(api.ClientHalf):
    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        """The client's importance weights u [S] under the broadcast cluster models."""
        if op != ESTIMATE:
            return super().run(op, client, models, args)
        ctx = self.context
        losses = sample_losses(
            ctx.model, models.to(ctx.device), ctx.data(client), loss=ctx.config.train.loss
        )
        return importance_weights(losses.numpy(), float(self.params.sigma))

    def _models(self, client: int, models: torch.Tensor, state: np.ndarray):
        """(the client's personal model or None, its mix Σ u_s c_s / Σ u_s, Σ u_s)."""
        has, u, w = split_row(state, models.shape[0])
        mix = mix_of(models.cpu().numpy(), u)
        personal = w.astype(np.float32) if has else None
        return personal, mix.astype(np.float32), float(u.sum())

    def prepare(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> api.Prepared:
        """The training's start, its personal model (the run's initial model, which the
        server sends, before its first training; its mix without one, or every round with
        ``start = "mix"``), and the pull λ Σ_s u_s toward its mix: the
        gradient of (λ/2) Σ_s u_s ‖w − c_s‖²."""
        if op != START:
            return super().prepare(op, client, models, state)
        personal, mix, total = self._models(client, models, state)
        start = mix if personal is None or self.params.start == "mix" else personal
        return api.Prepared(row=np.zeros(0), start=start, pull=mix,
                        pull_mu=float(self.params.lam) * total)  # fmt: skip

    def evaluate(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> tuple[float, float, float]:
        """The personal model on the client's test split (its mix before it trains)."""
        if op != PERSONAL:
            return super().evaluate(op, client, models, state)
        personal, mix, _ = self._models(client, models, state)
        ctx = self.context
        flat = torch.from_numpy(mix if personal is None else personal).to(ctx.device)
        return evaluate(ctx.model, flat, ctx.data(client), loss=ctx.config.train.loss)

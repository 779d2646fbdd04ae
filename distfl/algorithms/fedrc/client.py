"""FedRC's client half: its robust E-step before a client trains; the mixture's evaluation
is FedEM's."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.algorithms.common.mixture_client import FedEMClient
from distfl.algorithms.fedrc.algorithm import (
    ESTEP,
    label_counts,
    mixture_weights,
    robust_responsibilities,
)
from distfl.train import sample_losses


class FedRCClient(FedEMClient):
    def prepare(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> api.Prepared:
        """``state``: the client's π (M values), then the clusters' label distributions P
        [M, C]. The row: its new π, then its q-weighted label counts [M, C]."""
        if op != ESTEP:
            return super().prepare(op, client, models, state)
        ctx = self.context
        M = models.shape[0]
        pi, share = state[:M], np.asarray(state[M:]).reshape(M, -1)
        data = ctx.data(client)
        losses = sample_losses(ctx.model, models.to(ctx.device), data, loss=ctx.config.train.loss)
        y = data.y_train.cpu().numpy()
        q = robust_responsibilities(pi, losses.numpy(), share, y)
        counts = label_counts(q, y, share.shape[1])
        row = np.concatenate([mixture_weights(q), counts.reshape(-1)])
        return api.Prepared(row=row, sample_weights=q.astype(np.float32))

    def evaluate(self, op, client, models, state):
        """FedEM's mixture, with the client's π (the first M values of ``state``)."""
        return super().evaluate(op, client, models, np.asarray(state)[: models.shape[0]])

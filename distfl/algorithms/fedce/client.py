"""FedCE's client half: each cluster model's batch losses on the client's train split, and
the client's association with each cluster."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.algorithms.fedce.algorithm import ASSOCIATE, association, batch_means
from distfl.train import sample_losses


class FedCEClient(api.ClientHalf):
    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]):
        """[L (M values), the history's increments (M values)]."""
        if op != ASSOCIATE:
            return super().run(op, client, models, args)
        ctx = self.context
        losses = sample_losses(
            ctx.model, models.to(ctx.device), ctx.data(client), loss=ctx.config.train.loss
        )
        vectors = batch_means(losses.numpy(), ctx.config.train.batch_size)
        L, inc = association(vectors, self.params.delta, self.params.prefix_counts)
        return np.concatenate([L, inc])

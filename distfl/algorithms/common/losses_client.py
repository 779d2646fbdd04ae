"""A client half any algorithm can use: each probed client's mean train loss under every
broadcast model (IFCA's cluster identity estimate, Ghosh et al. 2020, Algorithm 1)."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.train import train_losses

#: the probe this client half answers
LOSSES = "losses"


class LossesClient(api.ClientHalf):
    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        if op != LOSSES:
            return super().run(op, client, models, args)
        ctx = self.context
        return train_losses(
            ctx.model, models.to(ctx.device), ctx.data(client), loss=ctx.config.train.loss
        )

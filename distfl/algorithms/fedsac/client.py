"""FedSaC's client half: the principal axes of a trained model's penultimate features."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.algorithms.fedsac.algorithm import BASIS
from distfl.algorithms.fedsac.graph import principal_basis
from distfl.models import last_linear_inputs, load_flat


class FedSaCClient(api.ClientHalf):
    def after(self, op: str, client: int, model: torch.Tensor, state: np.ndarray) -> np.ndarray:
        """The top ``components`` principal axes [k, D] (flattened) of the trained model's
        penultimate features on the client's train split, in evaluation mode."""
        if op != BASIS:
            return super().after(op, client, model, state)
        ctx = self.context
        load_flat(ctx.model, model.to(ctx.device))
        ctx.model.eval()
        features = last_linear_inputs(ctx.model, ctx.data(client).x_train)
        ctx.model.train()
        basis = principal_basis(features.to(torch.float64).cpu().numpy(), self.params.components)
        return basis.reshape(-1)

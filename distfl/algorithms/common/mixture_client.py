"""The mixture's client half (FedEM's, which FedRC extends): the E-step before a client
trains and the mixture's evaluation."""

from __future__ import annotations

import numpy as np
import torch

from distfl.algorithms import api
from distfl.algorithms.common.mixture import (
    ESTEP,
    MIXTURE,
    NEWCOMER,
    mixture_weights,
    newcomer_weights,
    responsibilities,
)
from distfl.metrics import balanced_accuracy
from distfl.train import sample_logits, sample_losses


class FedEMClient(api.ClientHalf):
    def run(self, op: str, client: int, models: torch.Tensor, args: tuple[int, ...]) -> np.ndarray:
        """A newcomer's mixture weights under the broadcast components, learnt on its train
        split (:func:`newcomer_weights`)."""
        if op != NEWCOMER:
            return super().run(op, client, models, args)
        ctx = self.context
        losses = sample_losses(
            ctx.model, models.to(ctx.device), ctx.data(client), loss=ctx.config.train.loss
        )
        return newcomer_weights(losses.numpy())

    def prepare(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> api.Prepared:
        """The client's E-step on its train split under the broadcast components and its
        weights ``state`` (π_k): its new weights (the row) and q, each sample's weight in
        each component's training."""
        if op != ESTEP:
            return super().prepare(op, client, models, state)
        ctx = self.context
        losses = sample_losses(
            ctx.model, models.to(ctx.device), ctx.data(client), loss=ctx.config.train.loss
        )
        q = responsibilities(state, losses.numpy())
        return api.Prepared(row=mixture_weights(q), sample_weights=q.astype(np.float32))

    def evaluate(
        self, op: str, client: int, models: torch.Tensor, state: np.ndarray
    ) -> tuple[float, float, float]:
        """The mixture Σ_m π_km softmax(h_m(x)) on the client's test split."""
        if op != MIXTURE:
            return super().evaluate(op, client, models, state)
        ctx = self.context
        data = ctx.data(client)
        logits = sample_logits(ctx.model, models.to(ctx.device), data.x_test)
        return mixture_scores(logits.numpy(), np.asarray(state), data.y_test.cpu().numpy())


def mixture_scores(
    logits: np.ndarray, weights: np.ndarray, y: np.ndarray
) -> tuple[float, float, float]:
    """(balanced accuracy, accuracy, mean −log p(y | x)) of the mixture p = Σ_m π_m
    softmax(logits_m), from logits [M, n, C], weights π [M] and labels y [n]."""
    z = logits - logits.max(axis=2, keepdims=True)
    soft = np.exp(z) / np.exp(z).sum(axis=2, keepdims=True)
    p = np.einsum("m,mnc->nc", np.asarray(weights, dtype=np.float64), soft)
    if len(y) == 0:
        return float("nan"), float("nan"), float("nan")
    picked = p[np.arange(len(y)), y]
    with np.errstate(divide="ignore"):
        loss = float(np.mean(-np.log(picked)))
    pred = p.argmax(axis=1)
    return balanced_accuracy(y, pred), float(np.mean(pred == y)), loss

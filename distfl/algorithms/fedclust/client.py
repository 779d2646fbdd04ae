"""FedClust's client half: a client's row is its final layer after local training (the probe
``"weights"``).

The worker rebuilds the run's initial model (the server's seed and architecture, built on
the CPU in a forked random state so that nothing else's draws change), trains it for
``steps`` local SGD steps on client k with k's round-0 seed, and returns the slice
[start, stop) of the flat model: the last linear layer's weight and bias.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from distfl.algorithms import api
from distfl.models import build_model, flat_params
from distfl.train import SequentialTrainer, client_seed


class FedClustClient(api.ClientHalf):
    """Answers ``"weights"``: ``args = (steps, start, stop)``; the broadcast model is not
    used (the initial model is rebuilt, the same on every worker)."""

    def __init__(self, params, context):
        super().__init__(params, context)
        self._initial: torch.Tensor | None = None

    def initial_model(self) -> torch.Tensor:
        """The run's initial flat model, as the server builds it (from the initialisation
        seed, :meth:`~distfl.config.RunSection.effective_init_seed`)."""
        if self._initial is None:
            ctx = self.context
            cfg = ctx.config
            dataset = ctx.dataset
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(cfg.run.effective_init_seed())
                model = build_model(cfg.model.name, dataset.input_shape, dataset.num_classes,
                                    params=cfg.model.params)  # fmt: skip
            self._initial = flat_params(model)
        return self._initial

    def run(self, op, client, models, args) -> np.ndarray:
        if op != "weights":
            return super().run(op, client, models, args)
        steps, start, stop = (int(a) for a in args)
        ctx = self.context
        cfg = ctx.config
        local = SequentialTrainer(
            ctx.model, dataclasses.replace(cfg.train, local_steps=steps), ctx.device
        )
        start_model = self.initial_model().to(ctx.device)
        omega, _ = local.train(
            start_model, ctx.data(client), seed=client_seed(cfg.run.seed, 0, client)
        )
        return omega[start:stop].detach().cpu().double().numpy()


__all__ = ["FedClustClient"]

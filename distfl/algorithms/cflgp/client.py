"""CFL-GP's client half: a client's row is its gradient of the broadcast criterion model (the
probe ``"gradient"``).

The worker takes one local SGD step from the broadcast model on one batch of the
algorithm's ``batch`` samples (0: ``train.batch_size``; at most the client's train samples)
of the client's training data, drawn with the client's seed for the round (the same on
every worker), and returns (start − after) / ``train.lr``: the batch's gradient (plus
``train.weight_decay`` times the model), every parameter, float64. The step is SGD's
whatever ``train.optimizer`` is (Adam's first step is the gradient's sign, not the
gradient).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from distfl.algorithms import api
from distfl.train import SequentialTrainer, client_seed


class CFLGPClient(api.ClientHalf):
    """Answers ``"gradient"``: ``args = (round, batch)``; ``models`` [1, P] the criterion
    model."""

    def run(self, op, client, models, args) -> np.ndarray:
        if op != "gradient":
            return super().run(op, client, models, args)
        round_index, batch = (int(a) for a in args)
        ctx = self.context
        cfg = ctx.config
        # one plain SGD step whatever train.optimizer is: Adam's step is no gradient
        one = dataclasses.replace(
            cfg.train, local_steps=1, batch_size=batch or cfg.train.batch_size, optimizer="sgd"
        )
        step = SequentialTrainer(ctx.model, one, ctx.device)
        start = models[0].to(ctx.device)
        after, _ = step.train(
            start, ctx.data(client), seed=client_seed(cfg.run.seed, round_index, client)
        )
        grad = (start.double() - after.double()) / float(cfg.train.lr)
        return grad.detach().cpu().numpy()


__all__ = ["CFLGPClient"]
